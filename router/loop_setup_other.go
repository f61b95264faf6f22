//go:build !linux

package router

import (
	"context"
	"net"
)

// serveLoops accepts nothing outside Linux: every flow is set up on a goroutine (Serve).
func (r *Router) serveLoops(context.Context, *net.TCPListener) (bool, error) { return false, nil }
