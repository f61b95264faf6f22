//go:build linux

package main

import "github.com/agentcage/router/internal/lab"

// row is one way of reaching the sink from the guest.
type row struct {
	name  string
	src   string // guest source address
	socks string // the client speaks SOCKS5 to this server itself
	proxy func(*world) *lab.Process
}

func rows() []row {
	return []row{
		{name: "direct", src: srcNAT},
		{name: "upstream", src: srcNAT, socks: upstream},
		{name: "redsocks", src: srcRedsocks, proxy: func(w *world) *lab.Process { return w.redsocks }},
		{name: "router", src: srcRouter, proxy: func(w *world) *lab.Process { return w.router }},
	}
}
