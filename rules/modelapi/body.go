package modelapi

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Request bodies. An inference call a forward passes can still make the model server itself
// connect out: llama.cpp's server downloads an http(s) image_url (and reads a file:// one
// under --media-path), vLLM fetches image_url, audio_url and video_url, LM Studio's and
// vLLM's /v1/responses call the MCP server a tool of type "mcp" names, vLLM runs host-side
// tools (web search, a code interpreter) for /v1/responses. Those connections leave from the
// host, past the proxy. So every body a forward passes is read as it streams through a
// [BodyCheck]: the fields the forward's server kinds resolve as URLs (see [Reach]) may hold
// inline data only, a data: URL; anything else is refused, with the field named.
//
// The checker is a byte-at-a-time JSON scanner: it keeps no more of the body than the stack
// of the objects and arrays it is in (at most [MaxDepth] of them), the current key and the
// first bytes of a watched value (up to maxKept bytes each); it runs in time linear in the
// body's length, whatever its shape (a long value it does not watch is skipped eight bytes
// at a time). It is strict where servers' parsers
// differ, so that what it passes every server reads as it did:
//
//   - The body is one JSON value (RFC 8259) in UTF-8, with white space around it, or empty.
//     No comments, trailing commas, NaN, single quotes, byte-order mark, second value or
//     other trailing bytes; a UTF-16 body (which Python's json.loads would decode) is not
//     JSON here.
//   - Keys are compared after unescaping (\u005f is "_") and folding case as Go's
//     encoding/json does (Unicode simple folding: "IMAGE_URL" is image_url, "ſerver_url",
//     with the long s, is server_url), since Ollama and LM Studio decode with it; each
//     occurrence of a duplicate key is checked, whichever one a server keeps.
//   - A watched value's bytes are judged after unescaping: "\u0064ata:" is "data:".
//
// Content-Type is ignored (servers parse JSON whatever it says); a Content-Encoding is
// refused by the forward ([ContentEncoding]), since a server that inflates the body would
// read what the check did not.

// MaxDepth bounds the nesting of objects and arrays in a body: deeper is refused. Chat
// bodies, tool schemas included, nest a few tens deep at most.
const MaxDepth = 128

// maxKept is the bytes kept of a key (a longer one matches no field name) and of a watched
// value (enough to judge it: a data: URL's header must end within them).
const maxKept = 128

// Reach is a set of the ways a request body can make a model server connect out: the
// fields it resolves as URLs and the host-side tools it runs.
type Reach uint16

const (
	ReachImageURL  Reach = 1 << iota // image_url: a chat content part's image (or /v1/responses' input_image)
	ReachAudioURL                    // audio_url: vLLM's audio content part
	ReachVideoURL                    // video_url: vLLM's video content part
	ReachFileURL                     // file_url: /v1/responses' input_file
	ReachServerURL                   // server_url: a /v1/responses tool of type "mcp"
	ReachMCP                         // a tool of type "mcp" (the server connects to it by its label or URL)
	ReachHostTools                   // tools the server runs itself: web_search*, code_interpreter
	ReachAnyURL                      // any key whose name has a word url or uri, or href (the generic kind; see urlish)
)

// fieldReach names the fields each Reach bit watches, as the servers spell them.
var fieldReach = []struct {
	name string
	r    Reach
}{
	{"image_url", ReachImageURL},
	{"audio_url", ReachAudioURL},
	{"video_url", ReachVideoURL},
	{"file_url", ReachFileURL},
	{"server_url", ReachServerURL},
}

// Reach returns what a server of kind k resolves in a request body (nothing for TCP,
// which is not checked at all).
func (k Kind) Reach() Reach {
	const oaiMedia = ReachImageURL | ReachAudioURL | ReachVideoURL | ReachFileURL | ReachServerURL
	switch k {
	case OpenAI:
		// Any OpenAI-compatible server: what any of llama.cpp, vLLM and LM Studio resolve.
		return LlamaCpp.Reach() | VLLM.Reach() | LMStudio.Reach()
	case Ollama:
		// Ollama decodes data: URLs only and refuses the rest itself; checked all the same.
		return ReachImageURL
	case LMStudio:
		return ReachImageURL | ReachServerURL | ReachMCP
	case LlamaCpp:
		return ReachImageURL
	case VLLM:
		return oaiMedia | ReachMCP | ReachHostTools
	case Generic:
		return oaiMedia | ReachMCP | ReachHostTools | ReachAnyURL
	}
	return 0
}

// ContentEncoding judges a request's Content-Encoding field values: any coding other than
// identity is refused (llama.cpp's HTTP library inflates a gzip or deflate body, which the
// check would not have read). It returns why, or "" to pass.
func ContentEncoding(values []string) string {
	for _, v := range values {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return "a Content-Encoding on the request body (the router reads bodies as they are sent)"
			}
		}
	}
	return ""
}

// BodyError is a refused body: the field that would make the server connect out (empty
// when the body is refused as a whole) and why.
type BodyError struct {
	Field  string // as a path: messages[0].content[1].image_url.url
	Reason string
}

func (e *BodyError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return "the field " + e.Field + " " + e.Reason
}

// Scanner states.
const (
	stValue      uint8 = iota // a value is next
	stValueOrEnd              // after '[': a value or ']'
	stKeyOrEnd                // after '{': a key or '}'
	stKey                     // after ',' in an object: a key
	stColon                   // after a key
	stAfter                   // after a value in a container: ',' or its end
	stDone                    // after the top-level value: white space only
	stString                  // in a string (key or value)
	stLiteral                 // in true, false or null
	stNumber                  // in a number
)

// What a string being scanned is.
const (
	strSkip   uint8 = iota // a value nobody watches
	strKey                 // an object's key
	strInline              // a watched value: inline data only
	strType                // a "type" value: a host-side tool?
)

// Number sub-states (RFC 8259 section 6).
const (
	numMinus uint8 = iota // after '-'
	numZero               // after a leading 0
	numInt                // in the integer digits
	numDot                // after '.'
	numFrac               // in the fraction digits
	numE                  // after 'e'
	numESign              // after the exponent's sign
	numExp                // in the exponent digits
)

// Key classes.
const (
	keyOther uint8 = iota
	keyFetch       // a field the server resolves as a URL
	keyURL         // "url": a URL when below a keyFetch field
	keyType        // "type"
)

type frame struct {
	array bool
	fetch bool  // below a keyFetch field
	key   uint8 // the class of the current member's key (of the array's own key for an array)
	index int   // the current element, for an array
	name  []byte
}

// BodyCheck reads one request body as it streams (Write, then Close at its end) and refuses
// it, with a *BodyError, at the first byte that settles it. It is not safe for concurrent
// use; after an error every call returns that error.
type BodyCheck struct {
	reach Reach
	stack []frame
	state uint8
	err   *BodyError
	off   int64 // bytes seen

	// In a string.
	str     uint8
	esc     uint8 // 0; 1 after '\'; 2..5 reading \u's hex digits
	u       rune
	buf     [maxKept]byte // a key's or a watched value's first bytes, unescaped
	folded  [maxKept]byte // buf, folded (fold)
	n       int
	over    bool // buf overflowed
	decided bool // a watched value is judged already

	// In a literal or a number.
	lit string
	num uint8
}

// NewBodyCheck returns a check of one body against r.
func NewBodyCheck(r Reach) *BodyCheck { return &BodyCheck{reach: r} }

// Write feeds the next bytes of the body. It returns len(p) and nil, or 0 and the
// *BodyError that refuses the body.
func (c *BodyCheck) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	for i := 0; i < len(p); i++ {
		if c.state == stString && c.esc == 0 && (c.str == strSkip || c.decided) {
			// The fast path through a long value: to the next quote, backslash or control
			// byte.
			j := i
			for j+8 <= len(p) && !special8(binary.LittleEndian.Uint64(p[j:])) {
				j += 8
			}
			for ; j < len(p); j++ {
				if b := p[j]; b == '"' || b == '\\' || b < 0x20 {
					break
				}
			}
			c.off += int64(j - i)
			i = j
			if i == len(p) {
				break
			}
		}
		c.step(p[i])
		c.off++
		if c.err != nil {
			return 0, c.err
		}
	}
	return len(p), nil
}

// Close ends the body: it must have held one whole value, or nothing but white space.
func (c *BodyCheck) Close() error {
	if c.err != nil {
		return c.err
	}
	switch c.state {
	case stDone:
		return nil
	case stValue:
		if len(c.stack) == 0 {
			return nil // empty
		}
	case stNumber:
		if len(c.stack) == 0 && c.num != numMinus && c.num != numDot && c.num != numE && c.num != numESign {
			return nil
		}
	}
	c.fail("", "the body ends before its JSON value does")
	return c.err
}

// Err returns the error that refused the body, or nil.
func (c *BodyCheck) Err() error {
	if c.err == nil {
		return nil
	}
	return c.err
}

func (c *BodyCheck) fail(field, why string) {
	if c.err == nil {
		c.err = &BodyError{Field: field, Reason: why}
	}
}

func (c *BodyCheck) malformed(what string) {
	c.fail("", fmt.Sprintf("the body is not one well-formed JSON value (byte %d: %s)", c.off, what))
}

// special8 reports whether the 8 bytes of w hold a quote, a backslash or a control byte
// (the bit tricks of "Bit Twiddling Hacks": haszero and hasless; exact as a yes or no).
func special8(w uint64) bool {
	const lsb, msb = 0x0101010101010101, 0x8080808080808080
	q := w ^ (lsb * '"')
	s := w ^ (lsb * '\\')
	return ((q-lsb)&^q|(s-lsb)&^s|(w-lsb*0x20)&^w)&msb != 0
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

func (c *BodyCheck) step(b byte) {
	switch c.state {
	case stString:
		c.inString(b)
	case stLiteral:
		if b != c.lit[0] {
			c.malformed("a misspelt true, false or null")
			return
		}
		if c.lit = c.lit[1:]; c.lit == "" {
			c.endValue()
		}
	case stNumber:
		c.inNumber(b)
	case stValue, stValueOrEnd:
		if isSpace(b) {
			return
		}
		if b == ']' && c.state == stValueOrEnd {
			c.pop()
			return
		}
		c.beginValue(b)
	case stKeyOrEnd, stKey:
		switch {
		case isSpace(b):
		case b == '}' && c.state == stKeyOrEnd:
			c.pop()
		case b == '"':
			c.beginString(strKey)
		default:
			c.malformed("a key was expected")
		}
	case stColon:
		switch {
		case isSpace(b):
		case b == ':':
			c.state = stValue
		default:
			c.malformed("':' was expected")
		}
	case stAfter:
		top := &c.stack[len(c.stack)-1]
		switch {
		case isSpace(b):
		case b == ',' && top.array:
			top.index++
			c.state = stValue
		case b == ',':
			c.state = stKey
		case b == ']' && top.array, b == '}' && !top.array:
			c.pop()
		default:
			c.malformed("',' or the end of the object or array was expected")
		}
	case stDone:
		if !isSpace(b) {
			c.malformed("bytes after the JSON value")
		}
	}
}

// beginValue starts the value whose first byte is b.
func (c *BodyCheck) beginValue(b byte) {
	switch {
	case b == '{' || b == '[':
		if len(c.stack) >= MaxDepth {
			c.fail("", fmt.Sprintf("the body nests objects and arrays deeper than %d", MaxDepth))
			return
		}
		f := frame{array: b == '['}
		if len(c.stack) > 0 {
			top := &c.stack[len(c.stack)-1]
			f.fetch = top.fetch || top.key == keyFetch
			if f.array {
				f.key = top.key // an array's elements are judged by the array's own key
			}
		}
		if n := len(c.stack); n < cap(c.stack) {
			f.name = c.stack[:n+1][n].name[:0] // the popped frame's buffer, reused
		}
		c.stack = append(c.stack, f)
		if f.array {
			c.state = stValueOrEnd
		} else {
			c.state = stKeyOrEnd
		}
	case b == '"':
		str := strSkip
		if len(c.stack) > 0 {
			switch top := c.stack[len(c.stack)-1]; {
			case top.key == keyFetch, top.key == keyURL && top.fetch:
				str = strInline
			case top.key == keyType && c.reach&(ReachMCP|ReachHostTools) != 0:
				str = strType
			}
		}
		c.beginString(str)
	case b == 't':
		c.state, c.lit = stLiteral, "rue"
	case b == 'f':
		c.state, c.lit = stLiteral, "alse"
	case b == 'n':
		c.state, c.lit = stLiteral, "ull"
	case b == '-':
		c.state, c.num = stNumber, numMinus
	case b == '0':
		c.state, c.num = stNumber, numZero
	case b >= '1' && b <= '9':
		c.state, c.num = stNumber, numInt
	default:
		c.malformed("a value was expected")
	}
}

// endValue follows a complete value.
func (c *BodyCheck) endValue() {
	if len(c.stack) == 0 {
		c.state = stDone
	} else {
		c.state = stAfter
	}
}

func (c *BodyCheck) pop() {
	c.stack = c.stack[:len(c.stack)-1]
	c.endValue()
}

func (c *BodyCheck) inNumber(b byte) {
	digit := b >= '0' && b <= '9'
	switch c.num {
	case numMinus:
		switch {
		case b == '0':
			c.num = numZero
		case digit:
			c.num = numInt
		default:
			c.malformed("a digit was expected")
		}
		return
	case numZero, numInt:
		switch {
		case digit && c.num == numInt:
			return
		case b == '.':
			c.num = numDot
			return
		case b == 'e' || b == 'E':
			c.num = numE
			return
		}
	case numDot:
		if digit {
			c.num = numFrac
		} else {
			c.malformed("a digit was expected")
		}
		return
	case numFrac:
		switch {
		case digit:
			return
		case b == 'e' || b == 'E':
			c.num = numE
			return
		}
	case numE:
		switch {
		case b == '+' || b == '-':
			c.num = numESign
		case digit:
			c.num = numExp
		default:
			c.malformed("a digit was expected")
		}
		return
	case numESign:
		if digit {
			c.num = numExp
		} else {
			c.malformed("a digit was expected")
		}
		return
	case numExp:
		if digit {
			return
		}
	}
	// The number ended before b.
	c.endValue()
	c.step(b)
}

func (c *BodyCheck) beginString(str uint8) {
	c.state, c.str, c.esc, c.n, c.over, c.decided = stString, str, 0, 0, false, false
}

func (c *BodyCheck) inString(b byte) {
	switch c.esc {
	case 0:
		switch {
		case b == '"':
			c.endString()
		case b == '\\':
			c.esc = 1
		case b < 0x20:
			c.malformed("a control byte in a string")
		default:
			c.keep(b)
		}
	case 1:
		c.esc = 0
		switch b {
		case '"', '\\', '/':
			c.keep(b)
		case 'b':
			c.keep('\b')
		case 'f':
			c.keep('\f')
		case 'n':
			c.keep('\n')
		case 'r':
			c.keep('\r')
		case 't':
			c.keep('\t')
		case 'u':
			c.esc, c.u = 2, 0
		default:
			c.malformed("a bad escape in a string")
		}
	default:
		var d rune
		switch {
		case b >= '0' && b <= '9':
			d = rune(b - '0')
		case b >= 'a' && b <= 'f':
			d = rune(b - 'a' + 10)
		case b >= 'A' && b <= 'F':
			d = rune(b - 'A' + 10)
		default:
			c.malformed("a bad \\u escape in a string")
			return
		}
		c.u = c.u<<4 | d
		if c.esc++; c.esc < 6 {
			return
		}
		c.esc = 0
		r := c.u
		if utf8.RuneLen(r) < 0 { // a surrogate: no name holds one, pair or not
			r = utf8.RuneError
		}
		var e [4]byte
		for _, x := range e[:utf8.EncodeRune(e[:], r)] {
			c.keep(x)
		}
	}
}

// keep records one unescaped byte of a key or a watched value.
func (c *BodyCheck) keep(b byte) {
	if c.str == strSkip || c.decided {
		return
	}
	if c.n == len(c.buf) {
		c.over = true
		if c.str == strInline || c.str == strType {
			c.judge(false) // enough to judge
		}
		return
	}
	c.buf[c.n] = b
	c.n++
	if c.str == strInline && b == ',' {
		c.judge(false) // the data: URL's header is whole
	}
}

func (c *BodyCheck) endString() {
	switch c.str {
	case strKey:
		top := &c.stack[len(c.stack)-1]
		top.key = c.classify(c.buf[:c.n], c.over)
		top.name = append(top.name[:0], c.buf[:min(c.n, 40)]...)
		c.state = stColon
		return
	case strInline, strType:
		if !c.decided {
			c.judge(true)
		}
	}
	c.endValue()
}

// judge decides a watched value from its first bytes (all of them when whole).
func (c *BodyCheck) judge(whole bool) {
	c.decided = true
	v := c.buf[:c.n]
	switch c.str {
	case strInline:
		if why := inlineData(v); why != "" {
			c.fail(c.path(), why)
		}
	case strType:
		t := fold(c.folded[:0], v)
		if !whole || c.over {
			// No tool type is that long, but read strictly: a web search type, whatever
			// follows.
			if bytes.HasPrefix(t, []byte("web_search")) && c.reach&ReachHostTools != 0 {
				c.fail(c.path(), "names a tool type that begins as a web search's")
			}
			return
		}
		switch {
		case string(t) == "mcp" && c.reach&ReachMCP != 0:
			c.fail(c.path(), `names a tool of type "mcp": the model server would connect to the MCP server itself`)
		case hostTool(t) && c.reach&ReachHostTools != 0:
			c.fail(c.path(), "names a tool of type "+strconv.Quote(string(t))+": the model server would run it itself, reaching out from the host")
		}
	}
}

// hostTool reports whether t (folded) is a tool type a server runs on the host that can
// connect out: OpenAI's web search tools (vLLM runs them with its browser tool) and the
// code interpreter. A call record fed back in a conversation (web_search_call) is not.
func hostTool(t []byte) bool {
	return string(t) == "code_interpreter" || (bytes.HasPrefix(t, []byte("web_search")) && !bytes.HasSuffix(t, []byte("_call")))
}

// inlineData judges the first bytes of a value the server would resolve as a URL: it must
// be a data: URL (RFC 2397), spelled as the servers test for it: "data:" in lower case at
// the very start, then a media type and parameters made of token characters, then a comma.
// It returns why not, or "".
func inlineData(v []byte) string {
	const why = "holds what the model server would fetch as a URL; only inline data (a data: URL) passes here"
	rest, ok := bytes.CutPrefix(v, []byte("data:"))
	if !ok {
		return why
	}
	for _, b := range rest {
		switch {
		case b == ',':
			return ""
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		case strings.IndexByte("!#$&^_.+-/;=", b) >= 0:
		default:
			return why
		}
	}
	return why // no comma within the first bytes: not a data: URL's header
}

// classify returns the class of a key (raw: its unescaped bytes; over: longer than kept).
func (c *BodyCheck) classify(raw []byte, over bool) uint8 {
	if over {
		if c.reach&ReachAnyURL != 0 {
			return keyFetch // the strictest reading of a key too long to read
		}
		return keyOther
	}
	k := fold(c.folded[:0], raw)
	for _, f := range fieldReach {
		if string(k) == f.name && c.reach&f.r != 0 {
			return keyFetch
		}
	}
	switch {
	case c.reach&ReachAnyURL != 0 && urlish(raw):
		return keyFetch
	case string(k) == "url":
		return keyURL
	case string(k) == "type":
		return keyType
	}
	return keyOther
}

// urlish reports whether a key (raw: unescaped, unfolded) names a URL by one of its words:
// the key cut at every byte that is not an ASCII letter or digit and where a lower-case
// letter or digit is followed by an upper-case one (image_url, imageURL, callbackUri,
// URLs, urlPath), a word that begins or ends with "url" or "uri" (urls and uris too), or is
// "href". A word merely holding the letters (security, during) is not one.
func urlish(raw []byte) bool {
	word := func(w []byte) bool {
		var low [maxKept]byte
		l := fold(low[:0], w)
		for _, x := range []string{"url", "uri"} {
			if bytes.HasPrefix(l, []byte(x)) || bytes.HasSuffix(l, []byte(x)) || bytes.HasSuffix(l, []byte(x+"s")) {
				return true
			}
		}
		return string(l) == "href"
	}
	alnum := func(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' }
	start := 0
	for i := 0; i <= len(raw); i++ {
		cut := i == len(raw) || !alnum(raw[i]) ||
			i > start && raw[i] >= 'A' && raw[i] <= 'Z' && (raw[i-1] >= 'a' && raw[i-1] <= 'z' || raw[i-1] >= '0' && raw[i-1] <= '9')
		if !cut {
			continue
		}
		if i > start && word(raw[start:i]) {
			return true
		}
		if i < len(raw) && alnum(raw[i]) {
			start = i // an upper-case letter begins the next word
		} else {
			start = i + 1
		}
	}
	return false
}

// fold appends b to dst lower-cased as Go's encoding/json matches keys (Unicode simple
// folding), for comparing with ASCII names: ASCII letters lower-cased, the long s (U+017F)
// as s and the Kelvin sign (U+212A) as k, the only non-ASCII runes that fold to ASCII
// letters. Other bytes stay as they are (and match no name), so the result is never longer
// than b.
func fold(dst, b []byte) []byte {
	for i := 0; i < len(b); {
		x := b[i]
		if x < utf8.RuneSelf {
			if x >= 'A' && x <= 'Z' {
				x += 'a' - 'A'
			}
			dst = append(dst, x)
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		switch r {
		case 0x17F:
			dst = append(dst, 's')
		case 0x212A:
			dst = append(dst, 'k')
		default:
			dst = append(dst, b[i:i+n]...)
		}
		i += n
	}
	return dst
}

// path spells where the scanner is, for a refusal: keys (clipped, printable ASCII) and
// array indexes.
func (c *BodyCheck) path() string {
	var sb strings.Builder
	for i, f := range c.stack {
		if f.array {
			fmt.Fprintf(&sb, "[%d]", f.index)
			continue
		}
		if i > 0 {
			sb.WriteByte('.')
		}
		for _, b := range f.name {
			if b < 0x20 || b >= 0x7f || b == '"' || b == '\\' {
				b = '?'
			}
			sb.WriteByte(b)
		}
	}
	if s := sb.String(); len(s) > 200 {
		return "..." + s[len(s)-200:]
	}
	return sb.String()
}
