//go:build !linux

// Command routerbench measures the router's data path in Linux network namespaces; on other
// systems it only says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "routerbench: needs Linux (network namespaces, nftables)")
	os.Exit(1)
}
