package conf

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// This file holds the generator of hostile and of large configs, and the meter the limit
// tests and the fuzz target judge Parse with.

// shapes names every shape genShape builds: the ones that once made loading quadratic in
// this package or in the TOML library, and the large but honest ones.
var shapes = []string{
	"nested-arrays", "nested-inline", "dotted-key", "dotted-header", "long-header-keys",
	"long-key", "long-string", "escaped-string", "long-array", "inline-array", "many-tables",
	"many-keys", "array-tables", "unknown-proxy-refs", "forward-clash", "rules",
}

// genShape returns a config of about size bytes in the named shape.
func genShape(kind string, size int) []byte {
	var b strings.Builder
	b.Grow(size + 256)
	fill := func(unit func(i int) string) {
		for i := 0; b.Len() < size; i++ {
			b.WriteString(unit(i))
		}
	}
	switch kind {
	case "nested-arrays": // x = [[[[...]]]]
		n := size / 2
		b.WriteString("x = " + strings.Repeat("[", n) + strings.Repeat("]", n) + "\n")
	case "nested-inline": // x = {a={a={...}}}
		n := size / 4
		b.WriteString("x = " + strings.Repeat("{a=", n) + "1" + strings.Repeat("}", n) + "\n")
	case "dotted-key": // a.a.a....a = 1
		b.WriteString(strings.Repeat("a.", size/2) + "a = 1\n")
	case "dotted-header": // [a.a.a....a]
		b.WriteString("[" + strings.Repeat("a.", size/2) + "a]\nk = 1\n")
	case "long-header-keys": // one long table name, many keys under it
		b.WriteString("[\"" + strings.Repeat("h", size/2) + "\"]\n")
		fill(func(i int) string { return "k" + strconv.Itoa(i) + " = 1\n" })
	case "long-key": // one long key
		b.WriteString("\"" + strings.Repeat("k", size) + "\" = 1\n")
	case "long-string":
		b.WriteString("[log]\nlevel = \"" + strings.Repeat("x", size) + "\"\n")
	case "escaped-string":
		b.WriteString("[log]\nlevel = \"" + strings.Repeat(`\u0041`, size/6) + "\"\n")
	case "long-array":
		b.WriteString("[capture]\nlocal_udp_allow = [")
		fill(func(int) string { return "53," })
		b.WriteString("]\n")
	case "inline-array":
		b.WriteString("x = [")
		fill(func(int) string { return "{a=1}," })
		b.WriteString("]\n")
	case "many-tables":
		fill(func(i int) string { return "[t" + strconv.Itoa(i) + "]\n" })
	case "many-keys":
		b.WriteString("[log]\n")
		fill(func(i int) string { return "k" + strconv.Itoa(i) + " = 1\n" })
	case "array-tables":
		fill(func(int) string { return "[[x]]\n" })
	case "unknown-proxy-refs": // many proxies, many rules naming one that does not exist
		half := size / 2
		fill(func(i int) string {
			if b.Len() < half {
				return "[proxy.p" + strconv.Itoa(i) + "]\naddress = \"198.51.100.1:1080\"\n"
			}
			return "[[rule]]\naction = \"proxy\"\nproxy = \"nope\"\n"
		})
	case "forward-clash": // every forward on one address
		fill(func(int) string {
			return "[[forward]]\nlisten = \"10.0.0.1:80\"\nconnect = \"127.0.0.1:8080\"\nallow = [\"10.0.0.0/8\"]\n"
		})
	case "rules": // an honest, long rule list
		b.WriteString(genRules(size / 120))
	default:
		panic("unknown shape " + kind)
	}
	return []byte(b.String())
}

// genRules returns a valid config with n rules, in the forms real ones take.
func genRules(n int) string {
	var b strings.Builder
	b.WriteString("[proxy.exit]\naddress = \"198.51.100.1:1080\"\n\n[capture]\nvm_networks = [\"10.0.2.0/24\"]\n\n")
	for i := range n {
		fmt.Fprintf(&b, "[[rule]]\nname = \"r%d\"\n", i)
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, "hosts = [\"h%d.example.com\", \"*.s%d.example.net\"]\nports = [443, \"8000-8100\"]\naction = \"proxy\"\n\n", i, i)
		case 1:
			fmt.Fprintf(&b, "hosts = [\"10.%d.%d.0/24\"]\nnetwork = \"tcp\"\naction = \"direct\"\n\n", i>>8&255, i&255)
		case 2:
			fmt.Fprintf(&b, "apps = [\"app%d\"]\nsources = [\"10.0.2.%d\"]\naction = \"block\"\n\n", i, i%250+1)
		case 3:
			fmt.Fprintf(&b, "caged = true\nports = [%d]\naction = \"proxy\"\nproxy = \"exit\"\n\n", i%65535+1)
		}
	}
	b.WriteString("[[rule]]\nname = \"default\"\naction = \"direct\"\n")
	return b.String()
}

// cost is what one call took: wall time and bytes allocated (an upper bound of the heap it
// grew by, whatever the collector did meanwhile).
type cost struct {
	took  time.Duration
	alloc uint64
}

func (c cost) String() string {
	return fmt.Sprintf("%v, %.1f MB allocated", c.took.Round(time.Millisecond), float64(c.alloc)/(1<<20))
}

// measure runs f and returns its cost. Nothing else may allocate meanwhile for the figure to
// mean much: the tests that use it do not run in parallel.
func measure(f func()) cost {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	f()
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	return cost{took: took, alloc: after.TotalAlloc - before.TotalAlloc}
}
