//go:build !linux

package router

import "syscall"

// withLoop does nothing outside Linux: there are no event loops to set flows up.
func withLoop(*Options, func(network, address string, c syscall.RawConn) error) {}
