package cagemark

import "strings"

// Generations is how many processes of a line the kernel program asks about: the calling
// one, its parent, and so on (see the package doc).
const Generations = 8

// nameMax is the most bytes of an executable's name the program reads.
const nameMax = 63

// rule is the kernel's reading of one name of Config.Names: base is the exact name, or the
// prefix when prefix; false when the kernel cannot tell it (a path, another wildcard).
func rule(name string) (base string, prefix, ok bool) {
	base, prefix = strings.CutSuffix(name, "*")
	if base == "" || strings.ContainsAny(base, "*?[]/\\\x00") {
		return "", false, false
	}
	return cut(base), prefix, true
}

// cut is name as far as the program reads it.
func cut(name string) string {
	if len(name) > nameMax {
		return name[:nameMax]
	}
	return name
}

// Matches reports whether the executable's file name exe is one of names as the kernel
// program compares them: byte for byte, exact or a trailing-'*' prefix, the first 63
// bytes; paths and other wildcards never match.
func Matches(names []string, exe string) bool {
	exe = cut(exe)
	for _, n := range names {
		base, prefix, ok := rule(n)
		if ok && (exe == base || prefix && strings.HasPrefix(exe, base)) {
			return true
		}
	}
	return false
}

// Gen is one generation of a process's line, as the kernel program asks about it.
type Gen struct {
	Exe  string // the file name of the executable it runs; "" when none can be read
	Once bool   // the program caged it once and remembers it (see Cage.Once)
}

// Line reports whether the kernel program marks the sockets of a process whose line is line
// (the process, its parent, and so on): the index in line of the first generation the
// program remembers or whose executable Matches, up to Generations, or -1. An empty name
// (a kernel thread, an executable that cannot be read) matches nothing.
func Line(names []string, line []Gen) int {
	for i, g := range line {
		if i == Generations {
			break
		}
		if g.Once || g.Exe != "" && Matches(names, g.Exe) {
			return i
		}
	}
	return -1
}
