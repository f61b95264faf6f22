package main

import (
	"fmt"
	"io"
)

func cmdCheckIP(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "router: not built yet")
	return exitUsage
}
