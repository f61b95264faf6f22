// Package proxifier reads a Proxifier profile (.ppx, the XML that Proxifier 3 and 4 write on
// Windows and macOS) and writes the router's TOML config that does what the profile does, or
// says, at the profile's line, what it could not carry and why.
//
// Reading ([Parse]) is bounded, since a profile is a file anyone may send: at most
// [MaxSize] bytes, elements nested at most [MaxDepth] deep, at most [MaxElements] elements;
// no DTD is accepted (so no entity is ever declared or expanded, and no external file is
// read) and only XML's five predefined entities are known. The cost is linear in the size.
// [Convert] turns a [Profile] into TOML text and the list of what it changed or dropped
// ([Note]); it reads nothing and resolves nothing.
//
// What maps to what (docs/config.md, "Importing a Proxifier profile", has the table): a
// proxy becomes a [proxy.NAME] (SOCKS5, SOCKS4, HTTPS as an HTTP CONNECT proxy, HTTP also as
// CONNECT), its password a password_env placeholder (the profile's password is never
// copied); a simple chain becomes proxies reached through one another (via), a redundancy
// or load-balancing chain a failover list; each rule a [[rule]] in the same order, a
// disabled one with enabled = false; "resolve through proxy" the fake-IP DNS, its exclusion
// list direct_names.
package proxifier

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Bounds of what Parse reads. Real profiles are a few KB to a few hundred KB (the largest
// public one seen is 310 KB, with thousands of targets) and nest 5 levels.
const (
	MaxSize     = 8 << 20
	MaxDepth    = 16
	MaxElements = 200_000
)

// Profile is what Convert needs of a profile, each part with the line it starts on.
type Profile struct {
	Version  string // the root's version attribute: "101" (Proxifier 3), "102" (4)
	Platform string // "Windows" or "MacOSX"; "" when the profile does not say

	ViaProxy       Flag // Options/Resolve/ViaProxy: resolve names through the proxy
	TryLocalFirst  Flag // Options/Resolve/ViaProxy/TryLocalDnsFirst
	Exclusions     List // Options/Resolve/ExclusionList: names resolved locally
	UDP            Value
	LeakPrevention Flag
	// Others are the options the router has no counterpart for that the profile turns on.
	Others []Value

	Proxies []Proxy
	Chains  []Chain
	Rules   []Rule
}

// Flag is an element's enabled="true|false", and whether the profile writes it at all.
type Flag struct {
	Set, On bool
	Line    int
}

// Value is a named setting as written, with its line.
type Value struct {
	Name, Text string
	Line       int
}

// List is a ';'-separated list as written (newlines and spaces around entries removed,
// empty entries dropped), with its line.
type List struct {
	Items []string
	Line  int
}

// Proxy is one <Proxy id type>.
type Proxy struct {
	ID, Type string
	Address  string
	Port     string
	Label    string
	// Auth is the Authentication element's enabled; Username its user name. The password
	// is never kept: only whether there is one.
	Auth        bool
	Username    string
	HasPassword bool
	Line        int
}

// Chain is one <Chain id type>: its enabled proxies, in order.
type Chain struct {
	ID, Type, Name string
	Proxies        []string
	Line           int
}

// Rule is one <Rule enabled>.
type Rule struct {
	Enabled      bool
	Name         string
	Applications List
	Targets      List
	Ports        List
	Action       string // Direct, Block, Proxy or Chain
	ActionID     string // the proxy's or the chain's id
	Line         int
}

// element is the parsed tree: a name, attributes, text, children, and the line it opens on.
type element struct {
	name     string
	attrs    map[string]string
	text     strings.Builder
	children []*element
	line     int
}

func (e *element) child(name string) *element {
	for _, c := range e.children {
		if c.name == name {
			return c
		}
	}
	return nil
}

func (e *element) textOf(name string) string {
	if c := e.child(name); c != nil {
		return strings.TrimSpace(c.text.String())
	}
	return ""
}

// Error is a profile that cannot be read, at a line (0 when none applies).
type Error struct {
	File string
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return e.File + ": " + e.Msg
}

// Parse reads a profile. file names it in errors.
func Parse(file string, data []byte) (*Profile, error) {
	fail := func(line int, format string, args ...any) (*Profile, error) {
		return nil, &Error{File: file, Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	if len(data) > MaxSize {
		return fail(0, "the profile is %d bytes; at most %d are read", len(data), MaxSize)
	}
	root, err := parseTree(data)
	if err != nil {
		var pe *posError
		if errors.As(err, &pe) {
			return fail(pe.line, "%s", pe.msg)
		}
		return fail(0, "%v", err)
	}
	if root.name != "ProxifierProfile" {
		return fail(root.line, "the root element is <%s>, not <ProxifierProfile>: not a Proxifier profile", root.name)
	}
	p := &Profile{Version: plain(root.attrs["version"]), Platform: plain(root.attrs["platform"])}
	if o := root.child("Options"); o != nil {
		p.options(o)
	}
	if pl := root.child("ProxyList"); pl != nil {
		for _, e := range pl.children {
			if e.name != "Proxy" {
				continue
			}
			px := Proxy{ID: plain(e.attrs["id"]), Type: plain(strings.ToUpper(e.attrs["type"])), Address: e.textOf("Address"), Port: e.textOf("Port"), Label: plain(e.textOf("Label")), Line: e.line}
			if a := e.child("Authentication"); a != nil {
				px.Auth = a.attrs["enabled"] == "true"
				px.Username = a.textOf("Username")
				px.HasPassword = a.textOf("Password") != ""
			}
			p.Proxies = append(p.Proxies, px)
		}
	}
	if cl := root.child("ChainList"); cl != nil {
		for _, e := range cl.children {
			if e.name != "Chain" {
				continue
			}
			c := Chain{ID: plain(e.attrs["id"]), Type: plain(e.attrs["type"]), Name: plain(e.textOf("Name")), Line: e.line}
			for _, x := range e.children {
				if x.name == "Proxy" && x.attrs["enabled"] != "false" {
					c.Proxies = append(c.Proxies, plain(strings.TrimSpace(x.text.String())))
				}
			}
			p.Chains = append(p.Chains, c)
		}
	}
	if rl := root.child("RuleList"); rl != nil {
		for _, e := range rl.children {
			if e.name != "Rule" {
				continue
			}
			r := Rule{Enabled: e.attrs["enabled"] != "false", Name: e.textOf("Name"), Line: e.line,
				Applications: listOf(e.child("Applications")), Targets: listOf(e.child("Targets")), Ports: listOf(e.child("Ports"))}
			if a := e.child("Action"); a != nil {
				r.Action, r.ActionID = plain(a.attrs["type"]), plain(strings.TrimSpace(a.text.String()))
			}
			p.Rules = append(p.Rules, r)
		}
	}
	return p, nil
}

func (p *Profile) options(o *element) {
	flag := func(e *element) Flag {
		if e == nil {
			return Flag{}
		}
		return Flag{Set: true, On: e.attrs["enabled"] == "true", Line: e.line}
	}
	if r := o.child("Resolve"); r != nil {
		if v := r.child("ViaProxy"); v != nil {
			p.ViaProxy = flag(v)
			p.TryLocalFirst = flag(v.child("TryLocalDnsFirst"))
		}
		p.Exclusions = listOf(r.child("ExclusionList"))
	}
	if u := o.child("Udp"); u != nil {
		p.UDP = Value{Name: "Udp", Text: u.attrs["mode"], Line: u.line}
	}
	p.LeakPrevention = flag(o.child("LeakPreventionMode"))
	for _, name := range []string{"HandleDirectConnections", "ProcessServices", "ProcessOtherUsers", "HttpProxiesSupport"} {
		if e := o.child(name); e != nil && e.attrs["enabled"] == "true" {
			p.Others = append(p.Others, Value{Name: name, Text: "enabled", Line: e.line})
		}
	}
}

// listOf splits an element's text at ';' and newlines.
func listOf(e *element) List {
	if e == nil {
		return List{}
	}
	l := List{Line: e.line}
	for _, s := range strings.FieldsFunc(e.text.String(), func(r rune) bool { return r == ';' || r == '\n' || r == '\r' }) {
		if s = strings.TrimSpace(s); s != "" {
			l.Items = append(l.Items, s)
		}
	}
	return l
}

type posError struct {
	line int
	msg  string
}

func (e *posError) Error() string { return e.msg }

// parseTree reads the XML into elements, within the bounds.
func parseTree(data []byte) (*element, error) {
	d := xml.NewDecoder(bytes.NewReader(data))
	d.Strict = true
	d.Entity = nil // XML's five predefined entities only; any other is an error
	line := func() int { l, _ := d.InputPos(); return l }
	var stack []*element
	var root *element
	count := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			var se *xml.SyntaxError
			if errors.As(err, &se) {
				return nil, &posError{se.Line, "XML: " + se.Msg}
			}
			return nil, &posError{line(), "XML: " + err.Error()}
		}
		switch t := tok.(type) {
		case xml.Directive:
			return nil, &posError{line(), "the profile holds a DTD or directive (<!" + firstWord(t) + " …>): refused, entities are never expanded"}
		case xml.StartElement:
			count++
			if count > MaxElements {
				return nil, &posError{line(), "more than " + strconv.Itoa(MaxElements) + " elements"}
			}
			if len(stack) >= MaxDepth {
				return nil, &posError{line(), "elements nested deeper than " + strconv.Itoa(MaxDepth)}
			}
			e := &element{name: t.Name.Local, attrs: map[string]string{}, line: line()}
			for _, a := range t.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			if len(stack) == 0 {
				if root != nil {
					return nil, &posError{e.line, "a second root element"}
				}
				root = e
			} else {
				top := stack[len(stack)-1]
				top.children = append(top.children, e)
			}
			stack = append(stack, e)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				stack[len(stack)-1].text.Write(t)
			}
		}
	}
	if root == nil {
		return nil, &posError{0, "no XML element: not a Proxifier profile"}
	}
	return root, nil
}

// plain makes a value that is only ever shown or compared (an id, a type, a name in a
// comment) safe to print: control characters become '?', and at most 80 bytes are kept. The
// values that reach the config as data (targets, apps, names of rules) are quoted there.
func plain(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == 0x85 || r == 0x2028 || r == 0x2029 {
			return '?'
		}
		return r
	}, s)
	if len(s) > 80 {
		s = strings.ToValidUTF8(s[:80], "") + "…"
	}
	return s
}

func firstWord(b []byte) string {
	s := string(b)
	if i := strings.IndexAny(s, " \t\r\n["); i >= 0 {
		s = s[:i]
	}
	if len(s) > 20 {
		s = s[:20]
	}
	return s
}
