package socks5_test

// Seeds live in testdata/fuzz/<target>; FuzzParseUDPHeader and
// FuzzAssociate also add the table tests' inputs with f.Add.
// Run: go test -fuzz=FuzzReadReply -fuzztime=2m ./socks5/
//      go test -fuzz=FuzzHandshake -fuzztime=2m ./socks5/
//      go test -fuzz=FuzzParseUDPHeader -fuzztime=2m ./socks5/
//      go test -fuzz=FuzzAssociate -fuzztime=2m ./socks5/

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/agentcage/router/router/upstream/socks5"
)

// wellFormed reports whether err is what ReadReply returns for a complete,
// well-formed reply: nil, or a bare *ReplyError.
func wellFormed(err error) bool {
	if err == nil {
		return true
	}
	_, ok := err.(*socks5.ReplyError)
	return ok
}

func FuzzReadReply(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		src := bytes.NewReader(data)
		rep, err := socks5.ReadReply(src)
		read := len(data) - src.Len()
		if read > socks5.MaxReplyLen {
			t.Fatalf("read %d bytes, more than a reply can have (%d)", read, socks5.MaxReplyLen)
		}

		var re *socks5.ReplyError
		isRep := errors.As(err, &re)
		switch {
		case wellFormed(err):
			// The bytes read are exactly one reply: encoding the result
			// again gives them back (RSV normalized to zero; an IPv4-mapped
			// IPv6 address is re-encoded as IPv4, so only its length is
			// compared).
			if (err == nil) != (rep.Code == socks5.RepSucceeded) {
				t.Fatalf("Code 0x%02x with error %v", rep.Code, err)
			}
			enc, eerr := socks5.AppendRequest(nil, rep.Code, rep.Bound)
			if eerr != nil {
				t.Fatalf("re-encode %+v: %v", rep, eerr)
			}
			got := append([]byte(nil), data[:read]...)
			got[2] = 0
			if rep.Bound.Name == "" && rep.Bound.IP.Is4In6() {
				if read != 22 {
					t.Fatalf("IPv6 reply of %d bytes", read)
				}
			} else if !bytes.Equal(got, enc) {
				t.Fatalf("read % x, re-encoded % x", got, enc)
			}
		case isRep:
			// A failure code with a broken rest: only the code is kept.
			if rep != (socks5.Reply{Code: re.Code}) || re.Code == socks5.RepSucceeded {
				t.Fatalf("Reply %+v with error %v", rep, err)
			}
		default:
			if rep != (socks5.Reply{}) {
				t.Fatalf("Reply %+v with error %v, want zero", rep, err)
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			if read != len(data) {
				t.Fatalf("truncation error %v with %d of %d bytes unread", err, len(data)-read, len(data))
			}
		}

		// The answer depends on the bytes read only: the same prefix, read
		// one byte at a time and followed by other bytes, gives the same
		// result and leaves the other bytes alone.
		more := append(append([]byte(nil), data[:read]...), "trailing target bytes"...)
		src2 := bytes.NewReader(more)
		rep2, err2 := socks5.ReadReply(iotest.OneByteReader(src2))
		if wellFormed(err) {
			if rep2 != rep || fmt.Sprint(err2) != fmt.Sprint(err) {
				t.Fatalf("with trailing bytes: %+v, %v; want %+v, %v", rep2, err2, rep, err)
			}
			if read2 := len(more) - src2.Len(); read2 != read {
				t.Fatalf("with trailing bytes: read %d, want %d", read2, read)
			}
		}
	})
}

// recorder is a conn whose server side is a fixed byte string.
type recorder struct {
	r      io.Reader
	writes int
	wrote  bytes.Buffer
}

func (c *recorder) Read(p []byte) (int, error) { return c.r.Read(p) }
func (c *recorder) Write(p []byte) (int, error) {
	c.writes++
	return c.wrote.Write(p)
}

func FuzzHandshake(f *testing.F) {
	const password = "fuzz-Secret-Pw"
	auth := &socks5.Auth{Username: "agent", Password: password}
	f.Fuzz(func(t *testing.T, server []byte, withAuth, pipeline, byName, oneByte bool) {
		c := socks5.Client{Pipeline: pipeline}
		if withAuth {
			c.Auth = auth
		}
		dst := dstIPv4
		if byName {
			dst = dstName
		}
		src := bytes.NewReader(server)
		conn := &recorder{r: src}
		if oneByte {
			conn.r = iotest.OneByteReader(src)
		}
		bound, err := c.Handshake(conn, dst)
		read := len(server) - src.Len()

		if err != nil {
			if bound != (socks5.Addr{}) {
				t.Fatalf("bound %+v with error %v", bound, err)
			}
			for _, verb := range []string{"%v", "%+v", "%#v"} {
				if s := fmt.Sprintf(verb, err); strings.Contains(s, password) {
					t.Fatalf("error contains the password: %s", s)
				}
			}
			for _, step := range []string{"socks5 greeting: ", "socks5 auth: ", "socks5 connect: "} {
				if strings.HasPrefix(err.Error(), step) {
					return
				}
			}
			t.Fatalf("error %q names no step", err)
		}

		// Success: the server's bytes were the method selection, the auth
		// status, and one reply; exactly those were read.
		head := 2
		if withAuth {
			head = 4
		}
		rsrc := bytes.NewReader(server[head:])
		rep, rerr := socks5.ReadReply(rsrc)
		if rerr != nil || rep.Bound != bound {
			t.Fatalf("Handshake bound %+v, but the reply parses as %+v, %v", bound, rep, rerr)
		}
		if want := head + len(server[head:]) - rsrc.Len(); read != want {
			t.Fatalf("read %d bytes, want %d", read, want)
		}
		wantWrites := 2
		if withAuth {
			wantWrites = 3
		}
		if pipeline {
			wantWrites = 1
		}
		if conn.writes != wantWrites {
			t.Fatalf("%d writes, want %d", conn.writes, wantWrites)
		}
		if !bytes.Contains(conn.wrote.Bytes(), []byte(dst.Name)) {
			t.Fatalf("request % x does not carry %q", conn.wrote.Bytes(), dst.Name)
		}
	})
}

func FuzzParseUDPHeader(f *testing.F) {
	for _, seed := range []string{
		h("00 00 00 01 c0 00 02 01 00 35") + "payload",
		h("00 00 00 04 20 01 0d b8 00 00 00 00 00 00 00 00 00 00 00 01 01 bb"),
		h("00 00 00 03 0b") + "example.com" + h("01 bb") + "data",
		h("00 00 01 01 c0 00 02 01 00 35"),
		h("00 00 00 03 00 00 35"),
		h("00 00 00 03 05") + "abc",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		orig := append([]byte(nil), data...)
		addr, n, err := socks5.ParseUDPHeader(data)
		if !bytes.Equal(data, orig) {
			t.Fatalf("ParseUDPHeader modified its input")
		}
		if err != nil {
			if addr != (socks5.Addr{}) || n != 0 {
				t.Fatalf("addr %+v, n %d with error %v", addr, n, err)
			}
			if !strings.HasPrefix(err.Error(), "udp header: ") {
				t.Fatalf("error %q does not say what failed", err)
			}
			if errors.Is(err, socks5.ErrFragmented) != (len(data) >= 4 && data[2] != 0) {
				t.Fatalf("error %v for FRAG byte of % x", err, data)
			}
			return
		}
		if n < 4+1+2 || n > socks5.MaxUDPHeaderLen || n > len(data) {
			t.Fatalf("header length %d of %d bytes", n, len(data))
		}
		if data[2] != 0 {
			t.Fatalf("accepted FRAG 0x%02x", data[2])
		}
		// The header re-encodes to the bytes it was parsed from (RSV
		// normalized to zero; an IPv4-mapped IPv6 address is re-encoded as
		// IPv4, so only its length is compared).
		enc, eerr := socks5.AppendUDPHeader(nil, addr)
		if eerr != nil {
			t.Fatalf("re-encode %+v: %v", addr, eerr)
		}
		got := append([]byte{0, 0}, data[2:n]...)
		if addr.Name == "" && addr.IP.Is4In6() {
			if n != 22 {
				t.Fatalf("IPv6 header of %d bytes", n)
			}
		} else if !bytes.Equal(got, enc) {
			t.Fatalf("parsed % x, re-encoded % x", got, enc)
		}
		// The payload does not change the header.
		addr2, n2, err2 := socks5.ParseUDPHeader(append(data[:n:n], "other payload"...))
		if addr2 != addr || n2 != n || err2 != nil {
			t.Fatalf("with another payload: %+v, %d, %v; want %+v, %d", addr2, n2, err2, addr, n)
		}
	})
}

func FuzzAssociate(f *testing.F) {
	const password = "fuzz-Secret-Pw"
	auth := &socks5.Auth{Username: "agent", Password: password}
	f.Add([]byte(selNoAuth+repIPv4), false, false, false)
	f.Add([]byte(selUserPass+authOK+repName), true, true, true)
	f.Add([]byte(selNoAuth+h("05 07 00 01 00 00 00 00 00 00")), false, true, false)
	f.Fuzz(func(t *testing.T, server []byte, withAuth, pipeline, oneByte bool) {
		c := socks5.Client{Pipeline: pipeline}
		if withAuth {
			c.Auth = auth
		}
		src := bytes.NewReader(server)
		conn := &recorder{r: src}
		if oneByte {
			conn.r = iotest.OneByteReader(src)
		}
		relay, err := c.Associate(conn, socks5.Addr{})
		read := len(server) - src.Len()
		if err != nil {
			if relay != (socks5.Addr{}) {
				t.Fatalf("relay %+v with error %v", relay, err)
			}
			for _, verb := range []string{"%v", "%+v", "%#v"} {
				if s := fmt.Sprintf(verb, err); strings.Contains(s, password) {
					t.Fatalf("error contains the password: %s", s)
				}
			}
			for _, step := range []string{"socks5 greeting: ", "socks5 auth: ", "socks5 associate: "} {
				if strings.HasPrefix(err.Error(), step) {
					return
				}
			}
			t.Fatalf("error %q names no step", err)
		}
		head := 2
		if withAuth {
			head = 4
		}
		rsrc := bytes.NewReader(server[head:])
		rep, rerr := socks5.ReadReply(rsrc)
		if rerr != nil || rep.Bound != relay {
			t.Fatalf("Associate relay %+v, but the reply parses as %+v, %v", relay, rep, rerr)
		}
		if want := head + len(server[head:]) - rsrc.Len(); read != want {
			t.Fatalf("read %d bytes, want %d", read, want)
		}
		if !bytes.HasSuffix(conn.wrote.Bytes(), []byte(assocZero)) {
			t.Fatalf("client wrote % x, want it to end with the request % x", conn.wrote.Bytes(), assocZero)
		}
	})
}
