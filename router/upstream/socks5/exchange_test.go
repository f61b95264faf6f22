package socks5_test

// Run: go test -fuzz=FuzzExchange -fuzztime=2m ./socks5/
//      go test -fuzz=FuzzParseReply -fuzztime=2m ./socks5/

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/agentcage/router/router/upstream/socks5"
)

// oracleHandshake is the blocking handshake as it was written before the Exchange, message by
// message with io.ReadFull, kept as the slow, obviously correct reference that an Exchange fed
// in arbitrary pieces must agree with.
func oracleHandshake(conn io.ReadWriter, c socks5.Client, dst socks5.Addr) (socks5.Addr, error) {
	const step = "socks5 connect"
	req, err := socks5.AppendRequest(nil, socks5.CmdConnect, dst)
	if err != nil {
		return socks5.Addr{}, fmt.Errorf("%s: %w", step, err)
	}
	method := socks5.MethodNoAuth
	var userPass []byte
	if c.Auth != nil {
		method = socks5.MethodUserPass
		userPass = append([]byte{socks5.UserPassVersion, byte(len(c.Auth.Username))}, c.Auth.Username...)
		userPass = append(append(userPass, byte(len(c.Auth.Password))), c.Auth.Password...)
	}
	greeting := []byte{socks5.Version, 1, method}
	readMethod := func() error {
		var b [2]byte
		if _, err := io.ReadFull(conn, b[:]); err != nil {
			return fmt.Errorf("socks5 greeting: read method selection: %w", err)
		}
		if b[0] != socks5.Version {
			return fmt.Errorf("socks5 greeting: server version 0x%02x, want 0x%02x", b[0], socks5.Version)
		}
		name := "no authentication"
		if method == socks5.MethodUserPass {
			name = "username/password"
		}
		switch b[1] {
		case method:
			return nil
		case socks5.MethodNoAcceptable:
			return fmt.Errorf("socks5 greeting: %w (offered only %s)", socks5.ErrNoAcceptableMethods, name)
		}
		return fmt.Errorf("socks5 greeting: server chose method 0x%02x, but only %s (0x%02x) was offered", b[1], name, method)
	}
	readStatus := func() error {
		var b [2]byte
		if _, err := io.ReadFull(conn, b[:]); err != nil {
			return fmt.Errorf("socks5 auth: read status: %w", err)
		}
		if b[0] != socks5.UserPassVersion {
			return fmt.Errorf("socks5 auth: reply version 0x%02x, want 0x%02x", b[0], socks5.UserPassVersion)
		}
		if b[1] != socks5.UserPassSuccess {
			return fmt.Errorf("socks5 auth: %w for user %q (status 0x%02x)", socks5.ErrAuthFailed, c.Auth.Username, b[1])
		}
		return nil
	}
	if c.Pipeline {
		all := append(append(append([]byte(nil), greeting...), userPass...), req...)
		if _, err := conn.Write(all); err != nil {
			return socks5.Addr{}, err
		}
		if err := readMethod(); err != nil {
			return socks5.Addr{}, err
		}
		if c.Auth != nil {
			if err := readStatus(); err != nil {
				return socks5.Addr{}, err
			}
		}
	} else {
		if _, err := conn.Write(greeting); err != nil {
			return socks5.Addr{}, err
		}
		if err := readMethod(); err != nil {
			return socks5.Addr{}, err
		}
		if c.Auth != nil {
			if _, err := conn.Write(userPass); err != nil {
				return socks5.Addr{}, err
			}
			if err := readStatus(); err != nil {
				return socks5.Addr{}, err
			}
		}
		if _, err := conn.Write(req); err != nil {
			return socks5.Addr{}, err
		}
	}
	rep, err := socks5.ReadReply(conn)
	if err != nil {
		return socks5.Addr{}, fmt.Errorf("%s: %w", step, err)
	}
	return rep.Bound, nil
}

// fed is the outcome of an Exchange driven the way an event loop drives it: the server's
// bytes arrive in pieces (cuts gives each piece's length, cycled; 0 means 1), every Feed sees
// all the bytes not yet consumed, and the end of the bytes is the end of the stream.
type fed struct {
	bound    socks5.Addr
	err      error
	written  []byte
	consumed int // bytes consumed by Feed (and handed to Cut)
}

func feedExchange(t *testing.T, c socks5.Client, dst socks5.Addr, server []byte, cuts []byte) fed {
	var x socks5.Exchange
	var r fed
	out, err := x.Start(&c, dst, nil)
	if err != nil {
		r.err = err
		return r
	}
	r.written = out
	avail := 0
	for i := 0; ; i++ {
		n, next, err := x.Feed(server[r.consumed:avail], nil)
		if n > avail-r.consumed {
			t.Fatalf("Feed consumed %d of %d bytes", n, avail-r.consumed)
		}
		r.consumed += n
		r.written = append(r.written, next...)
		if err != nil {
			r.err = err
			return r
		}
		if x.Done() {
			r.bound = x.Bound()
			return r
		}
		if avail == len(server) {
			r.err = x.Cut(server[r.consumed:avail], io.EOF)
			r.consumed = avail
			return r
		}
		step := 1
		if len(cuts) > 0 {
			step = max(1, int(cuts[i%len(cuts)]))
		}
		avail = min(len(server), avail+step)
	}
}

// recorderConn reads the script's bytes and records what the client writes.
type recorderConn struct {
	r     *bytes.Reader
	wrote bytes.Buffer
}

func (c *recorderConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *recorderConn) Write(p []byte) (int, error) { return c.wrote.Write(p) }

// sameOutcome fails t when an Exchange fed in pieces and the oracle disagree: the same bound
// address, the same error text and kind, the same bytes sent; on success the same bytes read
// (none past the reply).
func sameOutcome(t *testing.T, c socks5.Client, dst socks5.Addr, server, cuts []byte) {
	t.Helper()
	conn := &recorderConn{r: bytes.NewReader(server)}
	wantBound, wantErr := oracleHandshake(conn, c, dst)
	wantRead := len(server) - conn.r.Len()
	got := feedExchange(t, c, dst, server, cuts)
	if (got.err == nil) != (wantErr == nil) || got.err != nil && got.err.Error() != wantErr.Error() {
		t.Fatalf("error %v, the oracle's %v (server % x)", got.err, wantErr, server)
	}
	if got.err != nil {
		for _, kind := range []error{io.EOF, io.ErrUnexpectedEOF, socks5.ErrAuthFailed, socks5.ErrNoAcceptableMethods} {
			if errors.Is(got.err, kind) != errors.Is(wantErr, kind) {
				t.Fatalf("error %v: errors.Is(%v) differs from the oracle's %v", got.err, kind, wantErr)
			}
		}
		var ge, we *socks5.ReplyError
		if errors.As(got.err, &ge) != errors.As(wantErr, &we) || ge != nil && ge.Code != we.Code {
			t.Fatalf("error %v: reply code differs from the oracle's %v", got.err, wantErr)
		}
		if c.Auth != nil && strings.Contains(fmt.Sprintf("%v %+v %#v", got.err, got.err, got.err), c.Auth.Password) {
			t.Fatalf("error %v contains the password", got.err)
		}
	} else {
		if got.bound != wantBound {
			t.Fatalf("bound %+v, the oracle's %+v", got.bound, wantBound)
		}
		if got.consumed != wantRead {
			t.Fatalf("consumed %d bytes, the oracle read %d", got.consumed, wantRead)
		}
	}
	// The oracle writes a lock-step message only after the answer before it came whole; so
	// does the Exchange, which also stops at the first error.
	if !bytes.Equal(got.written, conn.wrote.Bytes()) {
		t.Fatalf("wrote\n% x\nthe oracle wrote\n% x", got.written, conn.wrote.Bytes())
	}
}

// TestExchangeSplit feeds every conversation of the handshake tests to an Exchange cut at
// every point, and one byte at a time: success, every failure, truncation, the credentials
// refused, all as the oracle says.
func TestExchangeSplit(t *testing.T) {
	conversations := []struct {
		name   string
		auth   *socks5.Auth
		dst    socks5.Addr
		server string
	}{
		{"ok-ipv4", nil, dstIPv4, selNoAuth + repIPv4 + banner},
		{"ok-ipv6-reply", nil, dstIPv4, selNoAuth + repIPv6 + banner},
		{"ok-name-reply", nil, dstName, selNoAuth + repName + banner},
		{"ok-userpass", creds, dstName, selUserPass + authOK + repZero + banner},
		{"refused", nil, dstIPv4, selNoAuth + h("05 05 00 01 00 00 00 00 00 00")},
		{"refused-cut-after-rep", nil, dstIPv4, selNoAuth + h("05 05")},
		{"general-failure-bad-atyp", nil, dstIPv4, selNoAuth + h("05 01 00 09 00 00 00")},
		{"auth-refused", creds, dstIPv4, selUserPass + h("01 01")},
		{"auth-bad-version", creds, dstIPv4, selUserPass + h("05 00")},
		{"no-acceptable", creds, dstIPv4, h("05 ff")},
		{"unoffered-method", nil, dstIPv4, h("05 02") + repZero},
		{"server-version", nil, dstIPv4, h("04 00") + repZero},
		{"reply-version", nil, dstIPv4, selNoAuth + h("04 00 00 01 00 00 00 00 00 00")},
		{"empty-name-reply", nil, dstIPv4, selNoAuth + h("05 00 00 03 00 00 00")},
		{"http-answer", nil, dstIPv4, "HTTP/1.1 400 Bad Request\r\n\r\n"},
		{"closed-at-once", nil, dstIPv4, ""},
	}
	for _, cv := range conversations {
		for _, pipeline := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/pipeline=%v", cv.name, pipeline), func(t *testing.T) {
				c := socks5.Client{Auth: cv.auth, Pipeline: pipeline}
				server := []byte(cv.server)
				for n := 0; n <= len(server); n++ {
					// the first n bytes, then the rest (and the stream cut at every length)
					sameOutcome(t, c, cv.dst, server, []byte{byte(max(n, 1)), 255})
					sameOutcome(t, c, cv.dst, server[:n], []byte{255})
				}
				sameOutcome(t, c, cv.dst, server, []byte{1})
			})
		}
	}
}

// TestExchangeNeed: a reader that reads exactly what Need asks never reads past the reply.
func TestExchangeNeed(t *testing.T) {
	for _, pipeline := range []bool{false, true} {
		var x socks5.Exchange
		c := socks5.Client{Auth: creds, Pipeline: pipeline}
		if _, err := x.Start(&c, dstName, nil); err != nil {
			t.Fatal(err)
		}
		server := []byte(selUserPass + authOK + repName + banner)
		var in []byte
		read := 0
		for !x.Done() {
			if need := x.Need(in); need > 0 {
				in = append(in, server[read:read+need]...)
				read += need
				continue
			}
			n, _, err := x.Feed(in, nil)
			if err != nil {
				t.Fatal(err)
			}
			in = in[n:]
		}
		if rest := string(server[read:]); rest != banner {
			t.Errorf("pipeline=%v: left %q unread, want the banner", pipeline, rest)
		}
		if x.Need(nil) != 0 {
			t.Errorf("Need after Done = %d, want 0", x.Need(nil))
		}
	}
}

// TestExchangeWriteFailed names the step whose bytes could not be sent.
func TestExchangeWriteFailed(t *testing.T) {
	broken := errors.New("broken pipe")
	var x socks5.Exchange
	c := socks5.Client{Auth: creds}
	if _, err := x.Start(&c, dstIPv4, nil); err != nil {
		t.Fatal(err)
	}
	if got := x.WriteFailed(broken).Error(); got != "socks5 greeting: write: broken pipe" {
		t.Errorf("after Start: %q", got)
	}
	if _, _, err := x.Feed([]byte(selUserPass), nil); err != nil {
		t.Fatal(err)
	}
	if got := x.WriteFailed(broken).Error(); got != "socks5 auth: write: broken pipe" {
		t.Errorf("after the method: %q", got)
	}
	if _, _, err := x.Feed([]byte(authOK), nil); err != nil {
		t.Fatal(err)
	}
	if got := x.WriteFailed(broken).Error(); got != "socks5 connect: write: broken pipe" {
		t.Errorf("after the credentials: %q", got)
	}
	if !errors.Is(x.WriteFailed(broken), broken) {
		t.Error("WriteFailed does not wrap the cause")
	}
}

// TestExchangeNoAlloc: feeding a whole pipelined conversation allocates nothing (a reply that
// binds an IP; errors and bound names allocate).
func TestExchangeNoAlloc(t *testing.T) {
	server := []byte(selNoAuth + repIPv4)
	c := socks5.Client{Pipeline: true}
	out := make([]byte, 0, 64)
	var x socks5.Exchange
	got := testing.AllocsPerRun(100, func() {
		if _, err := x.Start(&c, dstIPv4, out[:0]); err != nil {
			t.Fatal(err)
		}
		if _, _, err := x.Feed(server, out[:0]); err != nil || !x.Done() {
			t.Fatal(err)
		}
	})
	if got != 0 {
		t.Errorf("%v allocations per exchange, want 0", got)
	}
}

func FuzzExchange(f *testing.F) {
	f.Add([]byte(selNoAuth+repIPv4+banner), false, true, false, []byte{3})
	f.Add([]byte(selUserPass+authOK+repName), true, false, true, []byte{1, 5})
	f.Add([]byte(selNoAuth+h("05 05 00 03 04")+"ab"), false, true, true, []byte{2})
	const password = "fuzz-Secret-Pw"
	auth := &socks5.Auth{Username: "agent", Password: password}
	f.Fuzz(func(t *testing.T, server []byte, withAuth, pipeline, byName bool, cuts []byte) {
		c := socks5.Client{Pipeline: pipeline}
		if withAuth {
			c.Auth = auth
		}
		dst := dstIPv4
		if byName {
			dst = dstName
		}
		sameOutcome(t, c, dst, server, cuts)
	})
}

// FuzzParseReply: ParseReply agrees with ReadReply on any bytes, and asks for more exactly
// when ReadReply would have run out of them.
func FuzzParseReply(f *testing.F) {
	for _, s := range []string{repZero, repIPv6, repName + banner, h("05 05"), h("05 00 00 03 00"), h("04"), ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		src := bytes.NewReader(data)
		want, wantErr := socks5.ReadReply(src)
		read := len(data) - src.Len()
		got, n, err := socks5.ParseReply(data)
		if errors.Is(wantErr, io.EOF) || errors.Is(wantErr, io.ErrUnexpectedEOF) {
			if err != nil || n != 0 || got != (socks5.Reply{}) {
				t.Fatalf("ReadReply ran out (%v); ParseReply = %+v, %d, %v; want a request for more", wantErr, got, n, err)
			}
			return
		}
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() || got != want {
			t.Fatalf("ParseReply = %+v, %v; ReadReply = %+v, %v", got, err, want, wantErr)
		}
		if wellFormed(err) && n != read {
			t.Fatalf("ParseReply took %d bytes, ReadReply read %d", n, read)
		}
		if !wellFormed(err) && n != 0 {
			t.Fatalf("ParseReply took %d bytes with error %v", n, err)
		}
	})
}
