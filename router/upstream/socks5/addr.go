package socks5

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
)

// Addr is a SOCKS5 address (RFC 1928 §5) with its port: a request's
// DST.ADDR/DST.PORT or a reply's BND.ADDR/BND.PORT.
//
// When Name is not empty the address is a host name: it is sent as ATYP
// DOMAINNAME, exactly as given, and IP is ignored. Nothing in this package
// resolves it; the proxy does. A name is 1 to [MaxNameLen] bytes; no other
// check is made on its bytes.
//
// Otherwise IP is the address: an IPv4 address, or an IPv6 address, which is
// sent as ATYP IP V4 when it is IPv4-mapped (::ffff:a.b.c.d). An IPv6 zone
// cannot be carried by SOCKS5 and is dropped. The zero Addr (no name, invalid
// IP) is not a valid destination.
type Addr struct {
	Name string
	IP   netip.Addr
	Port uint16
}

// String returns "host:port", with IPv6 addresses in brackets: the name when
// there is one, else the IP as it is stored.
func (a Addr) String() string {
	if a.Name != "" {
		return net.JoinHostPort(a.Name, strconv.Itoa(int(a.Port)))
	}
	return netip.AddrPortFrom(a.IP, a.Port).String()
}

// check reports why a cannot be encoded, or nil.
func (a Addr) check() error {
	if a.Name != "" {
		if len(a.Name) > MaxNameLen {
			return fmt.Errorf("host name is %d bytes, want 1..%d", len(a.Name), MaxNameLen)
		}
		return nil
	}
	if !a.IP.IsValid() {
		return errors.New("address has neither a host name nor an IP")
	}
	return nil
}

// appendAddr appends ATYP, the address and the port of a, which must have
// passed check.
func appendAddr(buf []byte, a Addr) []byte {
	switch {
	case a.Name != "":
		buf = append(buf, AtypDomain, byte(len(a.Name)))
		buf = append(buf, a.Name...)
	case a.IP.Unmap().Is4():
		ip := a.IP.Unmap().As4()
		buf = append(buf, AtypIPv4)
		buf = append(buf, ip[:]...)
	default:
		ip := a.IP.As16()
		buf = append(buf, AtypIPv6)
		buf = append(buf, ip[:]...)
	}
	return append(buf, byte(a.Port>>8), byte(a.Port))
}

// AppendRequest appends a request (RFC 1928 §4): VER, cmd, RSV X'00', and
// dst as ATYP, DST.ADDR and DST.PORT. cmd is written as given (see the Cmd
// constants). It returns buf unchanged and an error when dst is not a valid
// address (see [Addr]); it allocates only when buf lacks room
// ([MaxReplyLen] bytes always suffice).
func AppendRequest(buf []byte, cmd byte, dst Addr) ([]byte, error) {
	if err := dst.check(); err != nil {
		return buf, fmt.Errorf("invalid destination: %w", err)
	}
	buf = append(buf, Version, cmd, 0x00)
	return appendAddr(buf, dst), nil
}

// Reply is a server's reply to a request (RFC 1928 §6).
type Reply struct {
	// Code is REP: RepSucceeded or the reason of the failure.
	Code byte
	// Bound is BND.ADDR and BND.PORT, reported as the server sent them: for
	// CONNECT, the address the proxy uses to reach the target. Many servers
	// send 0.0.0.0:0 (always on failure); that is returned like any address.
	// An IPv6 address is kept as sent, even when it is IPv4-mapped.
	Bound Addr
}

// replyHeadLen is how much of a reply is read first: VER, REP, RSV, ATYP and
// the three bytes that every address form has at least (the length octet of
// a name and the port; the first three bytes of an IP address and its port
// are no shorter). Reading it never reads past the reply's end.
const replyHeadLen = 4 + 1 + 2

// ReadReply reads one reply (RFC 1928 §6) from r, byte-exactly: it reads
// the reply's bytes and not one more, so whatever follows the reply on r
// (the target's first bytes after a CONNECT) is left unread. It does not
// buffer, and r needs no buffering. It allocates a buffer of [MaxReplyLen]
// bytes; for a host name in BND.ADDR, also the name.
//
// When the reply is well formed, Reply is filled in and the error is nil if
// Code is RepSucceeded, a *[ReplyError] otherwise. When a failure code is
// followed by a short or malformed rest (a server may close right after
// REP), Reply holds the Code and the error wraps both the *ReplyError and
// the cause. Any other error (a wrong VER; a success reply cut short or
// malformed) comes with a zero Reply. A reply cut short wraps io.EOF (no
// byte read) or io.ErrUnexpectedEOF. A non-zero RSV byte is tolerated.
//
// ReadReply sets no deadline: the caller bounds the wait on r.
func ReadReply(r io.Reader) (Reply, error) {
	var b [MaxReplyLen]byte
	return readReply(r, b[:])
}

// readReply is ReadReply with a caller-provided buffer of at least
// MaxReplyLen bytes.
func readReply(r io.Reader, b []byte) (Reply, error) {
	n, err := io.ReadFull(r, b[:replyHeadLen])
	if n >= 1 && b[0] != Version {
		return Reply{}, fmt.Errorf("reply version 0x%02x, want 0x%02x", b[0], Version)
	}
	var code byte
	if n >= 2 {
		code = b[1]
	}
	// failed returns the error for a reply that cannot be read to its end.
	failed := func(cause error) (Reply, error) {
		if code != RepSucceeded {
			return Reply{Code: code}, fmt.Errorf("%w; %w", &ReplyError{Code: code}, cause)
		}
		return Reply{}, cause
	}
	if err != nil {
		return failed(fmt.Errorf("read reply: %w", err))
	}
	var rest int // bytes still to read after the head
	switch atyp := b[3]; atyp {
	case AtypIPv4:
		rest = 4 + 2 - 3
	case AtypIPv6:
		rest = 16 + 2 - 3
	case AtypDomain:
		if b[4] == 0 {
			return failed(errors.New("reply has an empty host name"))
		}
		rest = int(b[4])
	default:
		return failed(fmt.Errorf("reply address type 0x%02x unknown", atyp))
	}
	if _, err := io.ReadFull(r, b[replyHeadLen:replyHeadLen+rest]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // the head was there: EOF is mid-reply
		}
		return failed(fmt.Errorf("read reply: %w", err))
	}
	end := replyHeadLen + rest
	rep := Reply{Code: code, Bound: boundAddr(b[:end])}
	if code != RepSucceeded {
		return rep, &ReplyError{Code: code}
	}
	return rep, nil
}

// boundAddr is the address of a whole reply b (VER REP RSV ATYP ADDR PORT) whose ATYP
// and length were checked.
func boundAddr(b []byte) Addr {
	a := Addr{Port: uint16(b[len(b)-2])<<8 | uint16(b[len(b)-1])}
	switch b[3] {
	case AtypIPv4:
		a.IP = netip.AddrFrom4([4]byte(b[4:8]))
	case AtypIPv6:
		a.IP = netip.AddrFrom16([16]byte(b[4:20]))
	case AtypDomain:
		a.Name = string(b[5 : len(b)-2])
	}
	return a
}
