package conf

import (
	"strconv"
	"strings"
)

// locator maps key paths to the line that defines them, so that every error can name the
// line. The TOML library reports lines for syntax errors only; this is a small scanner of
// the same text that knows headers, keys, strings, arrays and inline tables. Paths look like
// "proxy.exit.address", "rule[2].hosts" and "rule[2].hosts[3]" (1-based indexes for arrays
// of tables and array elements, as in error messages).
type locator struct {
	lines map[string]int
	// defs are the table headers and keys (not array elements) in file order, for placing
	// syntax errors.
	defs []def
}

type def struct {
	path string
	line int
}

func (l *locator) line(path string) int {
	for path != "" {
		if n, ok := l.lines[path]; ok {
			return n
		}
		if n, ok := l.lines[path+"[1]"]; ok { // an array of tables named as a whole
			return n
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

// lastAt returns the key or table header written last at or before line, and its line
// ("" and 0 when none is).
func (l *locator) lastAt(line int) (path string, at int) {
	for _, d := range l.defs {
		if d.line > line {
			break
		}
		path, at = d.path, d.line
	}
	return path, at
}

func locate(src string) *locator {
	l := &locator{lines: map[string]int{}}
	s := scanner{src: src, line: 1}
	counts := map[string]int{}
	table := ""
	for !s.eof() {
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
			name := strings.Join(s.keyParts(']'), ".")
			if array {
				counts[name]++
				name += "[" + strconv.Itoa(counts[name]) + "]"
			} else if i := strings.LastIndexByte(name, '.'); i >= 0 {
				// [rule.sub] after [[rule]] belongs to the last rule.
				if n := counts[name[:i]]; n > 0 {
					name = name[:i] + "[" + strconv.Itoa(n) + "]" + name[i:]
				}
			}
			table = name
			if _, seen := l.lines[name]; !seen {
				l.lines[name] = line
			}
			l.defs = append(l.defs, def{name, line})
			s.skipLine()
		default:
			line := s.line
			key := strings.Join(s.keyParts('='), ".")
			if key == "" {
				s.skipLine()
				continue
			}
			path := key
			if table != "" {
				path = table + "." + key
			}
			l.lines[path] = line
			l.defs = append(l.defs, def{path, line})
			s.value(l, path)
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

func (s *scanner) skipLine() {
	for !s.eof() && s.peek() != '\n' {
		if c := s.peek(); c == '"' || c == '\'' {
			s.str()
			continue
		}
		s.next()
	}
}

// keyParts reads a dotted key up to end ('=' or ']'), consuming end.
func (s *scanner) keyParts(end byte) []string {
	var parts []string
	var cur strings.Builder
	for !s.eof() {
		c := s.peek()
		switch {
		case c == end:
			s.next()
			if end == ']' && s.peek() == ']' {
				s.next()
			}
			return append(parts, strings.TrimSpace(cur.String()))
		case c == '\n':
			return nil
		case c == '"' || c == '\'':
			cur.WriteString(s.str())
		case c == '.':
			s.next()
			parts = append(parts, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(s.next())
		}
	}
	return nil
}

// str reads a basic, literal or multi-line string and returns its raw content (escapes are
// left as written: keys with escapes are rare and only lose their line).
func (s *scanner) str() string {
	q := s.next()
	multi := strings.HasPrefix(s.src[s.pos:], string([]byte{q, q}))
	if multi {
		s.next()
		s.next()
	}
	start := s.pos
	for !s.eof() {
		c := s.peek()
		if c == '\\' && q == '"' {
			s.next()
			s.next()
			continue
		}
		if c == q && (!multi || strings.HasPrefix(s.src[s.pos:], string([]byte{q, q, q}))) {
			body := s.src[start:s.pos]
			s.next()
			if multi {
				s.next()
				s.next()
			}
			return body
		}
		if c == '\n' && !multi {
			return s.src[start:s.pos]
		}
		s.next()
	}
	return s.src[start:]
}

// value skips one value, recording the lines of array elements and inline-table keys.
func (s *scanner) value(l *locator, path string) {
	s.skipSpace()
	switch s.peek() {
	case '[':
		s.next()
		for i := 1; ; i++ {
			s.skipBlank()
			if s.eof() || s.peek() == ']' {
				s.next()
				return
			}
			start := s.pos
			elem := path + "[" + strconv.Itoa(i) + "]"
			l.lines[elem] = s.line
			s.value(l, elem)
			s.skipBlank()
			if s.peek() == ',' || s.pos == start {
				s.next()
			}
		}
	case '{':
		s.next()
		for {
			s.skipSpace()
			if s.eof() || s.peek() == '}' || s.peek() == '\n' {
				s.next()
				return
			}
			line, start := s.line, s.pos
			key := strings.Join(s.keyParts('='), ".")
			if key == "" {
				return
			}
			l.lines[path+"."+key] = line
			s.value(l, path+"."+key)
			s.skipSpace()
			if s.peek() == ',' || s.pos == start {
				s.next()
			}
		}
	case '"', '\'':
		s.str()
	default:
		for !s.eof() {
			c := s.peek()
			if c == ',' || c == ']' || c == '}' || c == '\n' || c == '#' {
				return
			}
			s.next()
		}
	}
}

// skipBlank skips spaces, newlines and comments (inside arrays).
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
