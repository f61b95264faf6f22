// Package platform is the Linux capture as the daemon sees it (a capture.Platform): the
// nftables table of package nftcap installed and kept in place (the healer), the guard
// without the daemon (`router guard`, the boot unit, the last good guard in the state
// directory), the transparent UDP sockets, attribution through sock_diag and /proc, the
// refusal counters and log, and the kernel's cage program for status. Only the command
// (cmd/router) imports it; the daemon knows it through package capture.
package platform
