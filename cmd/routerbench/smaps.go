//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// printMappings prints the mappings of pid with the most resident memory.
func printMappings(out io.Writer, pid int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps")
	if err != nil {
		fmt.Fprintln(out, err)
		return
	}
	type mapping struct {
		name string
		rss  int
	}
	var maps []mapping
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			name := f[0]
			if len(f) >= 6 {
				name += " " + f[5]
			}
			maps = append(maps, mapping{name: name})
		case len(f) >= 2 && f[0] == "Rss:" && len(maps) > 0:
			maps[len(maps)-1].rss, _ = strconv.Atoi(f[1])
		}
	}
	sort.Slice(maps, func(i, j int) bool { return maps[i].rss > maps[j].rss })
	for _, m := range maps[:min(8, len(maps))] {
		fmt.Fprintf(out, "  %8d KiB  %s\n", m.rss, m.name)
	}
}
