package cagemark

import (
	"strings"
	"testing"
)

// TestMatches: user space tells a name as the kernel program does: exact or a trailing-'*'
// prefix, byte for byte, the first 63 bytes; a path or another wildcard never matches; a
// line is caged by its first caged generation, up to Generations.
func TestMatches(t *testing.T) {
	names := []string{"qemu-system-*", "qemu-kvm", "VBoxHeadless", "/usr/bin/curl", "a?c", strings.Repeat("x", 70)}
	for _, tc := range []struct {
		exe  string
		want bool
	}{
		{"qemu-system-x86_64", true},
		{"qemu-system-", true},
		{"qemu-kvm", true},
		{"qemu-kvm-not", false},
		{"qemu-img", false},
		{"VBoxHeadless", true},
		{"vboxheadless", false}, // byte for byte: CagedNames adds the lower case
		{"curl", false},
		{"/usr/bin/curl", false},
		{"abc", false},
		{strings.Repeat("x", 63) + "y", true}, // both cut at 63 bytes, as the kernel reads them
		{"", false},
	} {
		if got := Matches(names, tc.exe); got != tc.want {
			t.Errorf("Matches(%q): %v, want %v", tc.exe, got, tc.want)
		}
	}
	gens := func(exes string) []Gen {
		var out []Gen
		for _, e := range strings.Split(exes, " ") {
			out = append(out, Gen{Exe: strings.TrimPrefix(e, "-")})
		}
		return out
	}
	once := gens("sh plainbin bash")
	once[1].Once = true
	for _, tc := range []struct {
		line []Gen
		want int
	}{
		{gens("qemu-kvm libvirtd systemd"), 0},
		{gens("sh qemu-system-x86_64 bash"), 1},
		{gens("sh - bash systemd"), -1},
		{gens("a b c d e f g h qemu-kvm"), -1}, // beyond Generations
		{gens("a b c d e f g qemu-kvm"), 7},
		{once, 1}, // a process the program caged once, whatever it runs now
	} {
		if got := Line(names, tc.line); got != tc.want {
			t.Errorf("Line(%v): %d, want %d", tc.line, got, tc.want)
		}
	}
}
