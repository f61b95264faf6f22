//go:build !(windows && amd64)

// Command wdprobe is a Windows (amd64) diagnostic; see main_windows.go.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "wdprobe runs on Windows only (see docs/windows-checklist.md)")
	os.Exit(2)
}
