// Package socks4 is the client side of the SOCKS4 wire protocol and of its SOCKS4a
// extension: the CONNECT request and the server's reply, nothing else.
//
// SOCKS4 ("SOCKS: A protocol for TCP proxy across firewalls", Ying-Da Lee) carries an IPv4
// destination and a user ID, no password; SOCKS4a ("SOCKS 4A: A Simple Extension to SOCKS 4
// Protocol") lets the client send a host name instead, with DSTIP set to 0.0.0.x (x not
// zero) and the name after the user ID, for the server to resolve. Neither carries IPv6 or
// UDP. [AppendRequest] writes a SOCKS4 request for an IPv4 destination and a SOCKS4a one
// for a name; a server that knows only SOCKS4 rejects the latter (reply 91), and the name is
// never resolved here.
//
// Like package socks5 it takes a connection the caller dialed and sets no deadline: after a
// successful [Client.Handshake] the connection carries the destination's bytes, and the
// handshake has read exactly the 8 bytes of the reply, never one more. A [Client] is a plain
// value, safe for concurrent use; the package has no state of its own.
package socks4

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
)

// Version is VN in a request: 4 (SOCKS4 "Request", CONNECT).
const Version byte = 0x04

// CmdConnect is CD in a request: 1, CONNECT. BIND (2) is not implemented.
const CmdConnect byte = 0x01

// ReplyVersion is VN in a reply: 0 (SOCKS4 "Reply"; some servers send 4, which is accepted).
const ReplyVersion byte = 0x00

// Reply codes, CD in a reply.
const (
	Granted     byte = 90 // request granted
	Rejected    byte = 91 // request rejected or failed
	NoIdentd    byte = 92 // rejected: the server cannot reach the client's identd
	IdentFailed byte = 93 // rejected: identd reports a different user ID
)

// ReplyLen is the length of every reply: VN, CD, DSTPORT (2) and DSTIP (4).
const ReplyLen = 8

// MaxFieldLen bounds the user ID and the host name written in a request (a name is at most
// 255 bytes in DNS; a user ID longer than that is no user ID a server keeps).
const MaxFieldLen = 255

// Errors of a request that cannot be written. They are never modified.
var (
	ErrIPv6     = errors.New("socks4: the destination is an IPv6 address, which SOCKS4 cannot carry")
	ErrNoDest   = errors.New("socks4: no destination (neither a name nor an IP)")
	ErrBadField = errors.New("socks4: the user ID or host name is longer than 255 bytes or holds a NUL")
)

// ReplyError is a complete, well-formed reply other than [Granted].
type ReplyError struct{ Code byte }

func (e *ReplyError) Error() string {
	switch e.Code {
	case Rejected:
		return "socks4: request rejected or failed (91)"
	case NoIdentd:
		return "socks4: rejected, the server cannot reach the client's identd (92)"
	case IdentFailed:
		return "socks4: rejected, identd reports another user ID (93)"
	}
	return fmt.Sprintf("socks4: unknown reply code %d", e.Code)
}

// AppendRequest appends a CONNECT request for the destination to b: SOCKS4a with the name
// when name is not empty, else SOCKS4 with ip, which must be IPv4 (an IPv4-mapped IPv6 is
// taken as IPv4).
func AppendRequest(b []byte, userID, name string, ip netip.Addr, port uint16) ([]byte, error) {
	if len(userID) > MaxFieldLen || strings.IndexByte(userID, 0) >= 0 || len(name) > MaxFieldLen || strings.IndexByte(name, 0) >= 0 {
		return b, ErrBadField
	}
	b = append(b, Version, CmdConnect, byte(port>>8), byte(port))
	switch {
	case name != "":
		// SOCKS4a: DSTIP 0.0.0.1, the name after the user ID's NUL.
		b = append(b, 0, 0, 0, 1)
		b = append(b, userID...)
		b = append(b, 0)
		b = append(b, name...)
		return append(b, 0), nil
	case !ip.IsValid():
		return b[:len(b)-4], ErrNoDest
	case !ip.Unmap().Is4():
		return b[:len(b)-4], ErrIPv6
	}
	a := ip.Unmap().As4()
	b = append(b, a[:]...)
	b = append(b, userID...)
	return append(b, 0), nil
}

// ParseReply checks one reply: nil when granted, a *[ReplyError] for another code, or an
// error for a malformed one (a version other than 0 or 4). DSTPORT and DSTIP are ignored:
// they mean something for BIND only.
func ParseReply(r [ReplyLen]byte) error {
	if r[0] != ReplyVersion && r[0] != Version {
		return fmt.Errorf("socks4: reply version %d, want 0 (is this a SOCKS4 server?)", r[0])
	}
	if r[1] != Granted {
		return &ReplyError{Code: r[1]}
	}
	return nil
}

// ReadReply reads exactly one reply from r and checks it (see ParseReply).
func ReadReply(r io.Reader) error {
	var b [ReplyLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("socks4: read reply: %w", err)
	}
	return ParseReply(b)
}

// Client runs CONNECT handshakes. UserID is sent in every request (it may be empty).
type Client struct {
	UserID string
}

// Handshake writes the CONNECT request for the destination (see AppendRequest) and reads
// the reply. On success rw carries the destination's bytes.
func (c Client) Handshake(rw io.ReadWriter, name string, ip netip.Addr, port uint16) error {
	req, err := AppendRequest(make([]byte, 0, 16+len(c.UserID)+len(name)), c.UserID, name, ip, port)
	if err != nil {
		return err
	}
	if _, err := rw.Write(req); err != nil {
		return fmt.Errorf("socks4: write request: %w", err)
	}
	return ReadReply(rw)
}
