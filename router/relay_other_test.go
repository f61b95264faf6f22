//go:build !linux

package router

import (
	"testing"
	"time"
)

// kernelRelay skips: the sockmap is Linux only.
func kernelRelay(t *testing.T, _ time.Duration) *relay {
	t.Skip("the sockmap relay is Linux only")
	return nil
}
