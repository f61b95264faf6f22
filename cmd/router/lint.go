package main

import (
	"fmt"
	"io"
)

func cmdLint(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "router: not built yet")
	return exitUsage
}
