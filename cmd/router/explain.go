package main

import (
	"fmt"
	"io"
)

func cmdExplain(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "router: not built yet")
	return exitUsage
}
