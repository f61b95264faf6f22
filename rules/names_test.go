package rules

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestNames: every key is found by any case of its text (a path by either separator), and
// nothing else is, among many keys (long probe runs, colliding low bits).
func TestNames(t *testing.T) {
	b := builder{words: 1}
	lists := map[string][]uint32{}
	var keys []string
	for i := range 5000 {
		k := fmt.Sprintf("h%d.example.com", i)
		if i%7 == 0 {
			k = fmt.Sprintf("c:/program files/app%d/x.exe", i)
		}
		keys = append(keys, k)
		lists[k] = []uint32{uint32(i % 64)}
	}
	n := b.makeNames(lists)
	for i, k := range keys {
		path := strings.Contains(k, "/")
		for _, q := range []string{k, strings.ToUpper(k), strings.ReplaceAll(strings.ToUpper(k), "/", `\`)} {
			st, ok := n.find(hashText(q, path), q, path)
			if !ok || len(st.list) != 1 || st.list[0] != uint32(i%64) {
				t.Fatalf("find(%q) = %v, %v; want rule %d", q, st, ok, i%64)
			}
		}
		for _, q := range []string{k + "x", "x" + k, k[1:], k[:len(k)-1]} {
			if _, ok := n.find(hashText(q, path), q, path); ok && !slices.Contains(keys, q) {
				t.Fatalf("find(%q) found a set; no such key", q)
			}
		}
	}
	if _, ok := (&names{}).find(hashText("a", false), "a", false); ok {
		t.Fatal("an empty table found a key")
	}
}

// TestAppendHost: a name's own set from exact, and the sets of the suffixes after each of its
// dots from suffixes, nearest the end first; case does not matter.
func TestAppendHost(t *testing.T) {
	b := builder{words: 1}
	exact := b.makeNames(map[string][]uint32{"a.b.example.com": {1}, "example.com": {2}})
	suffixes := b.makeNames(map[string][]uint32{"example.com": {3}, "b.example.com": {4}, "com": {5}, "a.b.example.com": {6}})
	got := func(host string) []uint32 {
		var l []uint32
		for _, s := range appendHost(nil, &exact, &suffixes, host) {
			l = append(l, s.list...)
		}
		return l
	}
	for _, tc := range []struct {
		host string
		want []uint32
	}{
		{"A.b.Example.COM", []uint32{5, 3, 4, 1}},
		{"example.com", []uint32{5, 2}},
		{"xexample.com", []uint32{5}},
		{"com", nil},
		{".com", []uint32{5}},
	} {
		if g := got(tc.host); fmt.Sprint(g) != fmt.Sprint(tc.want) {
			t.Errorf("appendHost(%q) = %v, want %v", tc.host, g, tc.want)
		}
	}
}
