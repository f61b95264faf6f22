package conf

import (
	"cmp"
	"container/heap"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentcage/router/rules"
)

// This file holds the primitives of decoding: the generic tree the TOML library produced,
// walked with every key and type checked, errors collected with their lines. What the keys
// mean is in schema.go; checks across keys in check.go.

// decoder walks the generic tree the TOML library produced, checking every key and type,
// and collects errors with their lines.
type decoder struct {
	file string
	loc  *locator
	opts Options
	errs errList
	// proxies indexes Config.Proxies by name once they are decoded.
	proxies map[string]int
	// readFile is Options.ReadFile as the caller gave it (nil: hosts files are read with a
	// bound, readBounded); hostBytes counts the bytes of the hosts files read so far.
	readFile  func(string) ([]byte, error)
	hostBytes int
	hostPaths []string // the hosts files read (Config.HostsFiles)
}

// at names a key for messages: its path (for the line) and how people call it.
type at struct {
	path  string // "rule[3].hosts[2]"
	where string // `rule #3 "model", hosts`; empty means use path
}

func (a at) key(k string) at {
	w := ""
	if a.where != "" {
		w = a.where + ", " + k
	}
	return at{path: a.path + "." + k, where: w}
}

func (a at) elem(i int) at {
	w := ""
	if a.where != "" {
		w = a.where + "[" + strconv.Itoa(i+1) + "]"
	}
	return at{path: a.path + "[" + strconv.Itoa(i+1) + "]", where: w}
}

func (d *decoder) fail(a at, format string, args ...any) {
	line := d.loc.line(a.path)
	if d.errs.room(line) {
		d.errs.add(&Error{File: d.file, Line: line, Key: a.path, Where: a.where, Msg: fmt.Sprintf(format, args...)})
	}
}

// errList keeps the first MaxErrors errors by line (those on one line in the order found)
// and counts the others, so that a file with a million mistakes costs no more than one with
// fifty: an error is formatted only when it is kept.
type errList struct {
	kept    errHeap
	seq     int // errors seen so far
	dropped int
}

type keptErr struct {
	e   *Error
	seq int
}

// errHeap is a max-heap: the error that would be shown last is on top.
type errHeap []keptErr

func (h errHeap) Len() int { return len(h) }
func (h errHeap) Less(i, j int) bool {
	if h[i].e.Line != h[j].e.Line {
		return h[i].e.Line > h[j].e.Line
	}
	return h[i].seq > h[j].seq
}
func (h errHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *errHeap) Push(x any)   { *h = append(*h, x.(keptErr)) }
func (h *errHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// room reports whether an error on line would be kept; when not, it counts it as dropped.
func (l *errList) room(line int) bool {
	if len(l.kept) < MaxErrors || line < l.kept[0].e.Line {
		return true
	}
	l.seq++
	l.dropped++
	return false
}

func (l *errList) add(e *Error) {
	heap.Push(&l.kept, keptErr{e, l.seq})
	l.seq++
	if len(l.kept) > MaxErrors {
		heap.Pop(&l.kept)
		l.dropped++
	}
}

// sorted returns the kept errors by line, and a last one counting the others; nil when
// there are none.
func (l *errList) sorted(file string) Errors {
	if len(l.kept) == 0 {
		return nil
	}
	ks := slices.Clone(l.kept)
	slices.SortFunc(ks, func(a, b keptErr) int {
		if a.e.Line != b.e.Line {
			return a.e.Line - b.e.Line
		}
		return a.seq - b.seq
	})
	out := make(Errors, 0, len(ks)+1)
	for _, k := range ks {
		out = append(out, k.e)
	}
	if l.dropped > 0 {
		out = append(out, &Error{File: file, Msg: fmt.Sprintf("%d more errors not shown (only the first %d are)", l.dropped, MaxErrors)})
	}
	return out
}

// checkKeys reports keys of m that are not in allowed, in file order.
func (d *decoder) checkKeys(a at, m map[string]any, allowed []string) {
	ka := func(k string) at {
		if a.path == "" {
			return at{path: k}
		}
		return a.key(k)
	}
	type unknown struct {
		key  string
		line int
	}
	var us []unknown
	for k := range m {
		if !slices.Contains(allowed, k) {
			us = append(us, unknown{k, d.loc.line(ka(k).path)})
		}
	}
	slices.SortFunc(us, func(x, y unknown) int { return cmp.Or(x.line-y.line, strings.Compare(x.key, y.key)) })
	for _, u := range us {
		if !d.errs.room(u.line) {
			continue // the suggestion is not worked out for an error that is not shown
		}
		msg := fmt.Sprintf("unknown key %q", u.key)
		if s := suggest(u.key, allowed); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		} else {
			msg += " (known keys: " + strings.Join(allowed, ", ") + ")"
		}
		k := ka(u.key)
		d.errs.add(&Error{File: d.file, Line: u.line, Key: k.path, Where: k.where, Msg: msg})
	}
}

// suggest returns the allowed key closest to k, if it is close.
func suggest(k string, allowed []string) string {
	best, bestD := "", 3
	for _, a := range allowed {
		if dd := editDistance(k, a); dd < bestD {
			best, bestD = a, dd
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func typeName(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case []map[string]any:
		return "an array of tables"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("a %T", v)
}

// section decodes the table at path, such as [dns], and reports its keys that are not in
// keys. It returns the table's place and the table, or false (reported) when v is no table.
func (d *decoder) section(path string, v any, keys []string) (at, map[string]any, bool) {
	a := at{path: path}
	m, ok := d.table(a, v)
	if ok {
		d.checkKeys(a, m, keys)
	}
	return a, m, ok
}

// oneOf decodes a string that must be one of choices, reporting any other as
// "%q: want "A" or "B"".
func (d *decoder) oneOf(a at, v any, choices ...string) (string, bool) {
	s, ok := d.str(a, v)
	if !ok {
		return "", false
	}
	if !slices.Contains(choices, s) {
		quoted := make([]string, len(choices))
		for i, c := range choices {
			quoted[i] = strconv.Quote(c)
		}
		d.fail(a, "%q: want %s", s, strings.Join(quoted, " or "))
		return "", false
	}
	return s, true
}

func (d *decoder) table(a at, v any) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		d.fail(a, "must be a table, not %s", typeName(v))
	}
	return m, ok
}

func (d *decoder) str(a at, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		d.fail(a, "must be a string, not %s", typeName(v))
	}
	return s, ok
}

func (d *decoder) boolean(a at, v any) (bool, bool) {
	b, ok := v.(bool)
	if !ok {
		d.fail(a, "must be true or false, not %s", typeName(v))
	}
	return b, ok
}

func (d *decoder) array(a at, v any) ([]any, bool) {
	xs, ok := v.([]any)
	if !ok {
		d.fail(a, "must be an array, not %s", typeName(v))
	}
	return xs, ok
}

// strings decodes an array of strings. A lone string is an error that shows the array it
// should be: the key holds a list, and a scalar there is usually a slip.
func (d *decoder) strings(a at, v any) []string {
	if s, ok := v.(string); ok {
		d.fail(a, "must be an array of strings, e.g. [%q], not a string", s)
		return nil
	}
	xs, ok := d.array(a, v)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(xs))
	for i, x := range xs {
		if s, ok := d.str(a.elem(i), x); ok {
			out = append(out, s)
		}
	}
	return out
}

func (d *decoder) port(a at, v any) (uint16, bool) {
	n, ok := v.(int64)
	if !ok {
		d.fail(a, "must be a port number, not %s", typeName(v))
		return 0, false
	}
	if n < 1 || n > 65535 {
		d.fail(a, "%d is not a port (1-65535)", n)
		return 0, false
	}
	return uint16(n), true
}

func (d *decoder) duration(a at, v any) (time.Duration, bool) {
	s, ok := d.str(a, v)
	if !ok {
		return 0, false
	}
	t, err := time.ParseDuration(s)
	if err != nil || t <= 0 {
		d.fail(a, "%q is not a positive duration such as \"90s\" or \"15m\"", s)
		return 0, false
	}
	return t, true
}

// durationIn decodes a duration that must lie between lo and hi (both allowed); why, when
// not empty, says in the error what the bounds protect.
func (d *decoder) durationIn(a at, v any, lo, hi time.Duration, why string) (time.Duration, bool) {
	t, ok := d.duration(a, v)
	if !ok {
		return 0, false
	}
	if t < lo || t > hi {
		if why != "" {
			why = " (" + why + ")"
		}
		d.fail(a, "%v: between %v and %v%s", t, lo, hi, why)
		return 0, false
	}
	return t, true
}

// size decodes a byte count: an integer, or a string with a unit ("64MiB", "512KiB",
// "1GiB", "100MB").
func (d *decoder) size(a at, v any) (int64, bool) {
	if n, ok := v.(int64); ok {
		if n <= 0 {
			d.fail(a, "%d is not a positive size", n)
			return 0, false
		}
		return n, true
	}
	s, ok := v.(string)
	if !ok {
		d.fail(a, "must be a size such as \"64MiB\" or a number of bytes, not %s", typeName(v))
		return 0, false
	}
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	for _, u := range units {
		num, found := strings.CutSuffix(s, u.suffix)
		if !found {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
		if err != nil || n <= 0 || n > (1<<62)/u.mult {
			break
		}
		return n * u.mult, true
	}
	d.fail(a, "%q is not a size such as \"64MiB\", \"512KiB\" or \"1GiB\"", s)
	return 0, false
}

func (d *decoder) prefixes(a at, v any) []netip.Prefix {
	var out []netip.Prefix
	for i, s := range d.strings(a, v) {
		if p, ok := d.parsePrefix(a.elem(i), s); ok {
			out = append(out, p)
		}
	}
	return out
}

// prefix decodes one CIDR given as a string.
func (d *decoder) prefix(a at, v any) (netip.Prefix, bool) {
	s, ok := d.str(a, v)
	if !ok {
		return netip.Prefix{}, false
	}
	return d.parsePrefix(a, s)
}

func (d *decoder) parsePrefix(a at, s string) (netip.Prefix, bool) {
	r, err := rules.ParseIPRange(s)
	if err != nil {
		d.fail(a, "%v", err)
		return netip.Prefix{}, false
	}
	p, ok := r.Prefix()
	if !ok {
		d.fail(a, "%q is a range; write a CIDR such as 10.0.2.0/24", s)
		return netip.Prefix{}, false
	}
	return p, true
}

func (d *decoder) addrPort(a at, v any, what string) (netip.AddrPort, bool) {
	s, ok := d.str(a, v)
	if !ok {
		return netip.AddrPort{}, false
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		hint := ""
		if h, _, e := net.SplitHostPort(s); e == nil && strings.EqualFold(h, "localhost") {
			hint = "; write 127.0.0.1 for localhost"
		}
		d.fail(a, "%q is not an IP:port %s%s", s, what, hint)
		return netip.AddrPort{}, false
	}
	if ap.Port() == 0 {
		d.fail(a, "%q: port 0 is not a port (1-65535)", s)
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}
