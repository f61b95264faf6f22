//go:build !linux

package modelfwd

import (
	"context"
	"net"
	"net/http"
	"time"
)

// newModelRoundTripper is net/http's Transport here: modelClient's liveness peek is
// Linux's (MSG_PEEK|MSG_DONTWAIT).
func newModelRoundTripper(dial func(ctx context.Context, network, addr string) (net.Conn, error)) modelRoundTripper {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           dial,
		DisableCompression:    true,
		MaxIdleConnsPerHost:   modelIdlePerServer,
		IdleConnTimeout:       modelIdleTimeout,
		ExpectContinueTimeout: time.Second,
	}
}
