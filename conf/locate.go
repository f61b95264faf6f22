package conf

import (
	"fmt"
	"strconv"
	"strings"
)

// locator maps key paths to the line that defines them, so that every error can name the
// line. The TOML library reports lines for syntax errors only; this is a small scanner of
// the same text that knows headers, keys, strings, arrays and inline tables. Paths look like
// "proxy.exit.address", "rule[2].hosts" and "rule[2].hosts[3]" (1-based indexes for arrays
// of tables and array elements, as in error messages).
//
// The scanner is also the check of the file's shape that runs before the TOML library sees
// it (see the package doc): it stops at the first key nested deeper than MaxNesting or whose
// path is longer than MaxKeyPath, and at the first array that holds an array or an inline
// table (the schema has none, and they cost the library most), and records why in over.
//
// It makes one pass, without recursion, and its work and memory are linear in the text
// whatever its shape: the keys form a tree in which each node holds its own name only,
// and a path is spelled out only when a message asks for it.
type locator struct {
	nodes []node
	// kids finds a node by its parent and its name (a key) or its index (an element).
	kids map[edge]int32
	// tables counts the elements of each array of tables so far, by node.
	tables map[int32]int32
	// elems holds the line of each element of each array value, by node.
	elems map[int32][]int32
	// defs are the table headers and keys (not array elements) in file order, for placing
	// syntax errors.
	defs []def
	// over is the first limit the text crosses; nil when it crosses none.
	over *Error
}

// node is a key, a table or an element of an array of tables.
type node struct {
	name   string // the key part as written; "" for an element
	parent int32
	index  int32 // 1-based index of an element; 0 for a key
	line   int32 // 0: never written itself (a table implied by a longer name)
	depth  uint8 // path segments from the root: "rule[2].hosts" is 3; at most MaxNesting
	keyLen uint8 // bytes of the key names on the path, with their dots; at most MaxKeyPath
}

type edge struct {
	parent int32
	index  int32
	name   string
}

type def struct {
	node int32
	line int32
}

const root = 0

func newLocator() *locator {
	return &locator{nodes: []node{{parent: -1}}, kids: map[edge]int32{}, tables: map[int32]int32{}, elems: map[int32][]int32{}}
}

// line returns the line of path, or of the nearest enclosing key that the file writes; an
// array of tables named as a whole ("rule") is on the line of its first element.
func (l *locator) line(path string) int {
	best := 0
	at := func(n int32) {
		if ln := l.nodes[n].line; ln > 0 {
			best = int(ln)
		} else if k, ok := l.kids[edge{parent: n, index: 1}]; ok && l.nodes[k].line > 0 {
			best = int(l.nodes[k].line)
		}
	}
	n := int32(root)
	for path != "" {
		var e edge
		switch {
		case path[0] == '[':
			j := strings.IndexByte(path, ']')
			i, err := strconv.Atoi(path[1:max(j, 1)])
			if j < 0 || err != nil || i < 1 {
				return best
			}
			e, path = edge{parent: n, index: int32(i)}, path[j+1:]
		default:
			path = strings.TrimPrefix(path, ".")
			j := strings.IndexAny(path, ".[")
			if j < 0 {
				j = len(path)
			}
			e, path = edge{parent: n, name: path[:j]}, path[j:]
		}
		k, ok := l.kids[e]
		if !ok {
			// A scalar element has a line but no node, and nothing below it.
			if es := l.elems[n]; e.index > 0 && int(e.index) <= len(es) {
				best = int(es[e.index-1])
			}
			return best
		}
		n = k
		at(n)
	}
	return best
}

// lastAt returns the key or table header written last at or before line, and its line
// ("" and 0 when none is).
func (l *locator) lastAt(line int) (path string, at int) {
	// defs are in file order, so their lines never decrease: find the last one <= line.
	lo, hi := 0, len(l.defs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if int(l.defs[m].line) <= line {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return "", 0
	}
	d := l.defs[lo-1]
	return l.path(d.node), int(d.line)
}

// path spells out the path of node n.
func (l *locator) path(n int32) string {
	var segs []int32
	for ; n > root; n = l.nodes[n].parent {
		segs = append(segs, n)
	}
	var b strings.Builder
	for i := len(segs) - 1; i >= 0; i-- {
		nd := &l.nodes[segs[i]]
		if nd.index > 0 {
			b.WriteString("[" + strconv.Itoa(int(nd.index)) + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(nd.name)
	}
	return b.String()
}

// child returns the node under parent with the given name or index, making it if needed;
// -1 when making it crosses a limit (recorded in l.over).
func (l *locator) child(parent int32, name string, index int32, line int) int32 {
	e := edge{parent: parent, index: index, name: name}
	if k, ok := l.kids[e]; ok {
		return k
	}
	p := l.nodes[parent]
	depth, keyLen := int(p.depth)+1, int(p.keyLen)
	if index == 0 {
		if keyLen > 0 {
			keyLen++
		}
		keyLen += len(name)
	}
	switch {
	case depth > MaxNesting:
		l.over = &Error{Line: line, Key: l.path(parent), Msg: fmt.Sprintf(
			"nested deeper than %d levels (each table name, dotted key part, array and inline table is a level; the config needs 4 at most)", MaxNesting)}
		return -1
	case keyLen > MaxKeyPath:
		key := l.path(parent)
		if key != "" {
			key += "."
		}
		if key += name; len(key) > 64 {
			key = strings.ToValidUTF8(key[:64], "") + "…"
		}
		l.over = &Error{Line: line, Key: key, Msg: fmt.Sprintf(
			"a key path longer than %d bytes (table and key names with their dots); the config's own are under 40", MaxKeyPath)}
		return -1
	}
	id := int32(len(l.nodes))
	l.nodes = append(l.nodes, node{name: name, parent: parent, index: index, depth: uint8(depth), keyLen: uint8(keyLen)})
	l.kids[e] = id
	return id
}

// walk follows a dotted name from n, making the nodes it lacks; in a header (tables),
// a name that is an array of tables stands for its last element.
func (l *locator) walk(n int32, parts []string, tables bool, line int) int32 {
	for i, part := range parts {
		if n = l.child(n, part, 0, line); n < 0 {
			return n
		}
		if t := l.tables[n]; tables && t > 0 && i < len(parts)-1 {
			n = l.kids[edge{parent: n, index: t}]
		}
	}
	return n
}

// header records a [table] or [[array.of.tables]] header and returns the table it opens.
func (l *locator) header(parts []string, array bool, line int) int32 {
	n := l.walk(root, parts, true, line)
	if n < 0 {
		return n
	}
	if array {
		l.tables[n]++
		if n = l.child(n, "", l.tables[n], line); n < 0 {
			return n
		}
	}
	if l.nodes[n].line == 0 {
		l.nodes[n].line = int32(line)
	}
	l.defs = append(l.defs, def{n, int32(line)})
	return n
}

// key records a key (dotted or not) of table n written on line; top says whether it is a
// line of its own (not inside an inline table), which syntax errors can be placed on.
func (l *locator) key(n int32, parts []string, line int, top bool) int32 {
	if n = l.walk(n, parts, false, line); n < 0 {
		return n
	}
	l.nodes[n].line = int32(line)
	if top {
		l.defs = append(l.defs, def{n, int32(line)})
	}
	return n
}

// locate scans src once; see locator.
func locate(src string) *locator {
	l := newLocator()
	s := scanner{src: src, line: 1}
	if strings.HasPrefix(src, "\xef\xbb\xbf") { // a UTF-8 byte order mark, which TOML skips
		s.pos = 3
	}
	table := int32(root)
	for !s.eof() && l.over == nil {
		s.skipSpace()
		switch c := s.peek(); {
		case c == '\n':
			s.next()
		case c == '#':
			s.skipComment()
		case c == '[':
			line := s.line
			s.next()
			array := s.peek() == '['
			if array {
				s.next()
			}
			parts := s.keyParts(']')
			if parts == nil {
				// A header left open: what follows belongs to no table the scanner knows.
				table = root
				l.defs = append(l.defs, def{root, int32(line)})
			} else if table = l.header(parts, array, line); table < 0 {
				return l // over a limit: nothing after matters
			}
			s.skipLine()
		default:
			line := s.line
			parts := s.keyParts('=')
			if parts == nil {
				s.skipLine()
				continue
			}
			if n := l.key(table, parts, line, true); n >= 0 {
				s.value(l, n)
			}
		}
	}
	return l
}

type scanner struct {
	src  string
	pos  int
	line int
}

func (s *scanner) eof() bool { return s.pos >= len(s.src) }

func (s *scanner) peek() byte {
	if s.eof() {
		return 0
	}
	return s.src[s.pos]
}

func (s *scanner) next() byte {
	c := s.peek()
	s.pos++
	if c == '\n' {
		s.line++
	}
	return c
}

func (s *scanner) skipSpace() {
	for !s.eof() && (s.peek() == ' ' || s.peek() == '\t' || s.peek() == '\r') {
		s.next()
	}
}

func (s *scanner) skipComment() {
	for !s.eof() && s.peek() != '\n' {
		s.next()
	}
}

// skipLine skips the rest of a line the scanner cannot read (a header's tail, a line
// without '='), stepping over strings on it.
func (s *scanner) skipLine() {
	for !s.eof() && s.peek() != '\n' {
		if c := s.peek(); c == '"' || c == '\'' {
			s.str(false, 0)
			continue
		}
		s.next()
	}
}

// skipBlank skips spaces, newlines and comments (inside arrays and inline tables).
func (s *scanner) skipBlank() {
	for !s.eof() {
		switch s.peek() {
		case ' ', '\t', '\r', '\n':
			s.next()
		case '#':
			s.skipComment()
		default:
			return
		}
	}
}

// keyParts reads a dotted key up to end ('=' or ']'), consuming end (and a second ']' that
// closes an array of tables). It returns nil when the line ends first. It stops early, with
// what it has read, once that crosses a limit (MaxNesting+1 parts, or a part longer than
// MaxKeyPath): the caller reports it, and the rest of the key need not be read.
func (s *scanner) keyParts(end byte) []string {
	var parts []string
	start := s.pos // the part being read, when bare
	quoted, isQuoted := "", false
	long := 0 // the bare part's bytes that are not blanks
	part := func() string {
		if isQuoted {
			return quoted
		}
		return strings.TrimSpace(s.src[start:s.pos])
	}
	for !s.eof() {
		c := s.peek()
		switch {
		case c == end:
			parts = append(parts, part())
			s.next()
			if end == ']' && s.peek() == ']' {
				s.next()
			}
			return parts
		case c == '\n':
			return nil
		case c == '"' || c == '\'':
			// A quoted part; anything else written beside it is a syntax error the TOML
			// library reports.
			quoted, isQuoted = s.str(false, MaxKeyPath+1), true
			if len(quoted) > MaxKeyPath {
				return append(parts, quoted)
			}
		case c == '.':
			parts = append(parts, part())
			s.next()
			start, isQuoted, long = s.pos, false, 0
			if len(parts) > MaxNesting {
				return parts
			}
		default:
			if c != ' ' && c != '\t' {
				if long++; long > MaxKeyPath {
					return append(parts, part())
				}
			}
			s.next()
		}
	}
	return nil
}

// str reads a string and returns its raw content (escapes are left as written: keys with
// escapes are rare and only lose their line). It ends strings as the TOML library does: a
// basic string at an unescaped '"', a literal one at a single quote, either at the end of
// the line; and, when multi is set (a value, not a key), a multi-line string at the last
// three quotes of a run of three to five. A one-line string stops early after limit bytes
// when limit > 0 (a key that long crosses MaxKeyPath whatever follows).
func (s *scanner) str(multi bool, limit int) string {
	q := s.next()
	long := multi && strings.HasPrefix(s.src[s.pos:], string([]byte{q, q}))
	if !long {
		start := s.pos
		for !s.eof() {
			if limit > 0 && s.pos-start >= limit {
				return s.src[start:s.pos]
			}
			switch c := s.peek(); {
			case c == '\\' && q == '"':
				s.next()
				if s.peek() != '\n' {
					s.next()
				}
			case c == q:
				body := s.src[start:s.pos]
				s.next()
				return body
			case c == '\n':
				return s.src[start:s.pos]
			default:
				s.next()
			}
		}
		return s.src[start:]
	}
	s.next()
	s.next()
	start := s.pos
	for !s.eof() {
		c := s.peek()
		if c == '\\' && q == '"' {
			s.next()
			s.next()
			continue
		}
		if c == q {
			run := 0
			for s.pos+run < len(s.src) && s.src[s.pos+run] == q {
				run++
			}
			if run >= 3 {
				body := s.src[start : s.pos+run-3]
				for range run {
					s.next()
				}
				return body
			}
			for range run {
				s.next()
			}
			continue
		}
		s.next()
	}
	return s.src[start:]
}

// bare skips a value that is not a string, array or inline table (a number, a boolean, a
// date with its time), and always moves on by one byte at least unless at a line's end.
func (s *scanner) bare() {
	start := s.pos
	for !s.eof() {
		switch s.peek() {
		case ',', ']', '}', '\n', '#':
			if s.pos == start && s.peek() != '\n' {
				s.next()
			}
			return
		}
		s.next()
	}
}

// value skips the value of key n, recording the lines of array elements and of inline-table
// keys. It keeps its own stack of the arrays and inline tables it is in: nesting costs no
// recursion, and stops at MaxNesting anyway.
func (s *scanner) value(l *locator, n int32) {
	type open struct {
		node   int32
		inline bool
	}
	var stack []open
	for {
		// A value of node n starts here.
		s.skipSpace()
		switch s.peek() {
		case '[':
			s.next()
			stack = append(stack, open{node: n})
		case '{':
			s.next()
			stack = append(stack, open{node: n, inline: true})
		case '"', '\'':
			s.str(true, 0)
		default:
			s.bare()
		}
		// Find where the next value starts, closing what ends before it.
		for n = -1; n < 0; {
			if len(stack) == 0 || l.over != nil {
				return
			}
			top := &stack[len(stack)-1]
			s.skipBlank()
			switch c := s.peek(); {
			case s.eof():
				return
			case c == ',':
				s.next()
			case !top.inline && c == ']', top.inline && c == '}':
				s.next()
				stack = stack[:len(stack)-1]
			case top.inline:
				line := s.line
				parts := s.keyParts('=')
				if parts == nil {
					return
				}
				if n = l.key(top.node, parts, line, false); n < 0 {
					return
				}
			default:
				if c == '[' || c == '{' {
					l.over = &Error{Line: s.line, Key: l.path(top.node), Msg: "an array that holds an array or an inline table: the config has none (its arrays hold strings and numbers; tables are written [name] or [[name]])"}
					return
				}
				l.elems[top.node] = append(l.elems[top.node], int32(s.line))
				if c == '"' || c == '\'' {
					s.str(true, 0)
				} else {
					s.bare()
				}
			}
		}
	}
}
