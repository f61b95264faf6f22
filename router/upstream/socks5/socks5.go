// Package socks5 is the client side of the SOCKS5 wire protocol: the bytes of
// RFC 1928 (method negotiation, CONNECT, UDP ASSOCIATE, replies, the header
// of relayed datagrams) and of RFC 1929 (username/password sub-negotiation),
// nothing else.
//
// It takes a connection that the caller has already dialed (the router dials
// the upstream proxy with its own marked socket, so the dial policy lives
// there, not here) and runs the handshake on it. After a successful
// [Client.Handshake] the connection carries the target's bytes and belongs to
// the caller's relay: the handshake reads exactly the server's messages and
// never a byte more, so data the target sends at once (an SSH or SMTP banner)
// stays in the connection.
//
// The same handshake without I/O is an [Exchange]: the caller moves the bytes (an event loop
// on a non-blocking socket), the Exchange says what to send and parses what came back, with
// Handshake's rules and errors; Handshake and Associate are built on it. [ParseReply] is
// [ReadReply] on bytes already received.
//
// For UDP, [Client.Associate] asks for an association on the control
// connection, and [AppendUDPHeader] and [ParseUDPHeader] write and read the
// header that every relayed datagram carries (RFC 1928 §7). Fragmented
// datagrams (FRAG not zero) are not supported: the parser refuses them, so
// that callers drop them as the RFC requires.
//
// What it is not: not a server, not a dialer (no net.Dial, no DNS, no
// sockets, no timeouts of its own: the caller sets deadlines on the
// connection and owns the UDP socket), and it has no BIND support beyond the
// command constant. GSSAPI (RFC 1961) is not implemented. Host names given
// in an [Addr] are sent to the proxy as they are and are never resolved
// locally.
//
// The package has no state of its own: no goroutines, no package-level
// variables other than sentinel errors. A [Client] is a plain value, safe for
// concurrent use by many handshakes.
package socks5

import (
	"errors"
	"fmt"
)

// Version is VER, the first byte of every RFC 1928 message
// (RFC 1928 §3 method selection, §4 requests, §6 replies).
const Version byte = 0x05

// Authentication methods, the METHOD byte (RFC 1928 §3).
const (
	MethodNoAuth   byte = 0x00 // X'00' NO AUTHENTICATION REQUIRED
	MethodGSSAPI   byte = 0x01 // X'01' GSSAPI (RFC 1961); not implemented here
	MethodUserPass byte = 0x02 // X'02' USERNAME/PASSWORD (RFC 1929)
	// MethodNoAcceptable is the server's answer when it accepts none of the
	// offered methods; the client must then close the connection (RFC 1928 §3).
	MethodNoAcceptable byte = 0xFF
)

// Commands, the CMD byte of a request (RFC 1928 §4). CmdConnect is driven
// by [Client.Handshake], CmdUDPAssociate by [Client.Associate]; CmdBind only
// by [AppendRequest] callers.
const (
	CmdConnect      byte = 0x01 // X'01' CONNECT
	CmdBind         byte = 0x02 // X'02' BIND
	CmdUDPAssociate byte = 0x03 // X'03' UDP ASSOCIATE
)

// Address types, the ATYP byte (RFC 1928 §5).
const (
	AtypIPv4   byte = 0x01 // X'01' IP V4 address: 4 octets
	AtypDomain byte = 0x03 // X'03' DOMAINNAME: a length octet, then the name, no NUL
	AtypIPv6   byte = 0x04 // X'04' IP V6 address: 16 octets
)

// Reply codes, the REP byte of a reply (RFC 1928 §6). X'09' to X'FF' are
// unassigned. [ReplyText] gives the human message of each.
const (
	RepSucceeded            byte = 0x00 // X'00' succeeded
	RepGeneralFailure       byte = 0x01 // X'01' general SOCKS server failure
	RepNotAllowed           byte = 0x02 // X'02' connection not allowed by ruleset
	RepNetworkUnreachable   byte = 0x03 // X'03' Network unreachable
	RepHostUnreachable      byte = 0x04 // X'04' Host unreachable
	RepConnectionRefused    byte = 0x05 // X'05' Connection refused
	RepTTLExpired           byte = 0x06 // X'06' TTL expired
	RepCommandNotSupported  byte = 0x07 // X'07' Command not supported
	RepAddrTypeNotSupported byte = 0x08 // X'08' Address type not supported
)

// Username/password sub-negotiation (RFC 1929 §2).
const (
	// UserPassVersion is VER of the sub-negotiation request and response:
	// "the current version of the subnegotiation, which is X'01'".
	UserPassVersion byte = 0x01
	// UserPassSuccess is the STATUS of a successful sub-negotiation; any
	// other value is a failure, after which the server must close the
	// connection (RFC 1929 §2).
	UserPassSuccess byte = 0x00
)

// Field limits of the wire format.
const (
	// MaxNameLen is the longest host name a DOMAINNAME address can carry: its
	// length is one octet (RFC 1928 §5).
	MaxNameLen = 255
	// MaxCredentialLen is the longest username or password: ULEN and PLEN are
	// one octet each, from 1 to 255 (RFC 1929 §2).
	MaxCredentialLen = 255
	// MaxReplyLen is the longest reply (or request) on the wire: VER, REP,
	// RSV, ATYP, a length octet, a 255-byte name, and the port (RFC 1928 §6).
	MaxReplyLen = 4 + 1 + MaxNameLen + 2
	// MinReplyLen is the shortest reply: VER, REP, RSV, ATYP, a one-byte name with its length
	// octet, and the port.
	MinReplyLen = 4 + 1 + 1 + 2
)

// Sentinel errors, for errors.Is. They are never modified.
var (
	// ErrNoAcceptableMethods means the server answered X'FF' to the method
	// selection: it accepts none of the offered methods (RFC 1928 §3).
	// Typically the proxy wants a password that is not configured, or does
	// not support username/password when one is.
	ErrNoAcceptableMethods = errors.New("no acceptable authentication methods")
	// ErrAuthFailed means the server rejected the username and password
	// (a non-zero RFC 1929 STATUS).
	ErrAuthFailed = errors.New("credentials rejected")
)

// ReplyText returns the human message for a reply code (RFC 1928 §6), such
// as "connection refused" for X'05'.
func ReplyText(code byte) string {
	switch code {
	case RepSucceeded:
		return "succeeded"
	case RepGeneralFailure:
		return "general SOCKS server failure"
	case RepNotAllowed:
		return "connection not allowed by ruleset"
	case RepNetworkUnreachable:
		return "network unreachable"
	case RepHostUnreachable:
		return "host unreachable"
	case RepConnectionRefused:
		return "connection refused"
	case RepTTLExpired:
		return "TTL expired"
	case RepCommandNotSupported:
		return "command not supported"
	case RepAddrTypeNotSupported:
		return "address type not supported"
	default:
		return "unassigned reply code"
	}
}

// ReplyError is a reply whose REP is not X'00' succeeded: the server refused
// or failed the request. Get it with errors.As to map the code, e.g. to a
// TCP reset for RepConnectionRefused.
type ReplyError struct {
	Code byte // the REP byte, see the Rep constants
}

// Error returns the reply's human message and code, e.g.
// "connection refused (reply 0x05)".
func (e *ReplyError) Error() string {
	return fmt.Sprintf("%s (reply 0x%02x)", ReplyText(e.Code), e.Code)
}
