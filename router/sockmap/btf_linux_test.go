package sockmap

import (
	"testing"

	"github.com/cilium/ebpf/btf"
)

// TestMemberOffset: a member is found at its byte offset, also inside anonymous structs and
// unions (as the kernel's cache-line groups nest them); a named inner struct is not
// searched.
func TestMemberOffset(t *testing.T) {
	u32 := &btf.Int{Name: "u32", Size: 4}
	inner := &btf.Struct{Name: "", Size: 8, Members: []btf.Member{
		{Name: "a", Type: u32, Offset: 0},
		{Name: "write_seq", Type: u32, Offset: 32},
	}}
	union := &btf.Union{Name: "", Size: 8, Members: []btf.Member{{Name: "", Type: inner, Offset: 0}}}
	named := &btf.Struct{Name: "other", Size: 4, Members: []btf.Member{{Name: "hidden", Type: u32}}}
	top := []btf.Member{
		{Name: "x", Type: u32, Offset: 0},
		{Name: "o", Type: named, Offset: 32},
		{Name: "", Type: union, Offset: 128},
	}
	for _, tc := range []struct {
		name string
		off  uint32
		ok   bool
	}{
		{"x", 0, true},
		{"write_seq", 16 + 4, true},
		{"a", 16, true},
		{"hidden", 0, false},
		{"missing", 0, false},
	} {
		off, ok := memberOffset(top, tc.name, 0)
		if off != tc.off || ok != tc.ok {
			t.Errorf("%s: got %d, %v; want %d, %v", tc.name, off, ok, tc.off, tc.ok)
		}
	}
}
