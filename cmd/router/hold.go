package main

import (
	"fmt"
	"io"
	"os"
)

// cmdHold is the WinDivert holder the daemon starts on Windows (not for people): it keeps
// the daemon's diverting handle open after the daemon ends until Windows has deleted the
// daemon's permits, so that a crash lets nothing pass uncaptured.
func cmdHold(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("hold", "Internal (Windows): started by the daemon; holds its WinDivert handle until its WFP permits are gone.", stderr)
	handle := fs.Uint64("handle", 0, "the inherited WinDivert `handle`")
	parent := fs.Uint("parent", 0, "the daemon's process `id`")
	relay := fs.Bool("relay", false, "start the holder and exit (its parent is then gone)")
	if code, stop := parseFlags(fs, args, "handle", "parent"); stop {
		return code
	}
	if *relay {
		if err := relayHolder(uintptr(*handle), uint32(*parent)); err != nil {
			fmt.Fprintln(stderr, "router", err)
			return exitFindings
		}
		return exitOK
	}
	if err := runHolder(uintptr(*handle), uint32(*parent), os.Stdin, stdout); err != nil {
		fmt.Fprintln(stderr, "router", err)
		return exitFindings
	}
	return exitOK
}
