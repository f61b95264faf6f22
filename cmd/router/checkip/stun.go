package checkip

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// STUN, RFC 5389: just enough to send a Binding request and read the address the server saw.
const (
	stunHeaderLen       = 20         // §6: type, length, magic cookie, transaction id
	stunMagicCookie     = 0x2112A442 // §6
	stunBindingRequest  = 0x0001     // §6, method Binding, class request
	stunBindingSuccess  = 0x0101     // §6, method Binding, class success response
	stunMappedAddress   = 0x0001     // §15.1
	stunXORMappedAddr   = 0x0020     // §15.2
	stunXORMappedAddrV0 = 0x8020     // the pre-RFC draft code point some servers still send
	stunFamilyIPv4      = 0x01       // §15.1
	stunFamilyIPv6      = 0x02       // §15.1
)

// STUNRequest returns a Binding request with transaction id txid and no attributes.
func STUNRequest(txid [12]byte) []byte {
	b := make([]byte, stunHeaderLen)
	binary.BigEndian.PutUint16(b[0:], stunBindingRequest)
	binary.BigEndian.PutUint16(b[2:], 0)
	binary.BigEndian.PutUint32(b[4:], stunMagicCookie)
	copy(b[8:], txid[:])
	return b
}

// ParseSTUNResponse reads a Binding success response to the request with transaction id txid
// and returns the mapped address it carries: XOR-MAPPED-ADDRESS when present, else
// MAPPED-ADDRESS. It is an error when b is not such a response (another message, another
// transaction, a length that does not add up) or carries no address. An IPv4-mapped IPv6
// address comes back as IPv4.
func ParseSTUNResponse(b []byte, txid [12]byte) (netip.AddrPort, error) {
	if len(b) < stunHeaderLen {
		return netip.AddrPort{}, fmt.Errorf("stun message of %d bytes is shorter than a header", len(b))
	}
	typ := binary.BigEndian.Uint16(b[0:])
	n := int(binary.BigEndian.Uint16(b[2:]))
	switch {
	case typ != stunBindingSuccess:
		return netip.AddrPort{}, fmt.Errorf("stun message type %#04x is not a binding success", typ)
	case binary.BigEndian.Uint32(b[4:]) != stunMagicCookie:
		return netip.AddrPort{}, errors.New("stun magic cookie is wrong")
	case [12]byte(b[8:20]) != txid:
		return netip.AddrPort{}, errors.New("stun transaction id is not ours")
	case n%4 != 0 || stunHeaderLen+n != len(b):
		return netip.AddrPort{}, fmt.Errorf("stun length %d does not match a %d-byte message", n, len(b))
	}
	var mapped, xorMapped netip.AddrPort
	for attrs := b[stunHeaderLen:]; len(attrs) > 0; {
		if len(attrs) < 4 {
			return netip.AddrPort{}, errors.New("stun attribute header is truncated")
		}
		at := binary.BigEndian.Uint16(attrs[0:])
		al := int(binary.BigEndian.Uint16(attrs[2:]))
		padded := 4 + (al+3)&^3 // §15: values are padded to a multiple of 4
		if padded > len(attrs) {
			return netip.AddrPort{}, fmt.Errorf("stun attribute %#04x overruns the message", at)
		}
		v := attrs[4 : 4+al]
		switch at {
		case stunXORMappedAddr, stunXORMappedAddrV0:
			if !xorMapped.IsValid() {
				ap, err := stunAddress(v, true, b[4:20])
				if err != nil {
					return netip.AddrPort{}, fmt.Errorf("stun xor-mapped-address: %w", err)
				}
				xorMapped = ap
			}
		case stunMappedAddress:
			if !mapped.IsValid() {
				ap, err := stunAddress(v, false, nil)
				if err != nil {
					return netip.AddrPort{}, fmt.Errorf("stun mapped-address: %w", err)
				}
				mapped = ap
			}
		}
		attrs = attrs[padded:]
	}
	switch {
	case xorMapped.IsValid():
		return xorMapped, nil
	case mapped.IsValid():
		return mapped, nil
	}
	return netip.AddrPort{}, errors.New("stun response carries no mapped address")
}

// stunAddress decodes a (XOR-)MAPPED-ADDRESS value (§15.1, §15.2). key is the magic cookie
// followed by the transaction id, the bytes an XORed address is masked with.
func stunAddress(v []byte, xor bool, key []byte) (netip.AddrPort, error) {
	if len(v) < 4 {
		return netip.AddrPort{}, fmt.Errorf("value of %d bytes is too short", len(v))
	}
	port := binary.BigEndian.Uint16(v[2:])
	var ip []byte
	switch v[1] {
	case stunFamilyIPv4:
		ip = v[4:]
		if len(ip) != 4 {
			return netip.AddrPort{}, fmt.Errorf("ipv4 address of %d bytes", len(ip))
		}
	case stunFamilyIPv6:
		ip = v[4:]
		if len(ip) != 16 {
			return netip.AddrPort{}, fmt.Errorf("ipv6 address of %d bytes", len(ip))
		}
	default:
		return netip.AddrPort{}, fmt.Errorf("address family %#02x", v[1])
	}
	ip = append([]byte(nil), ip...)
	if xor {
		port ^= stunMagicCookie >> 16
		for i := range ip {
			ip[i] ^= key[i]
		}
	}
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), port), nil
}

// STUNAnswer answers a Binding request the way a STUN server does: a Binding success response
// with the same transaction id and an XOR-MAPPED-ADDRESS of seen (the request's source). It
// lets a test or a lab run a minimal STUN server; req that is not a Binding request (RFC 5389,
// with the magic cookie) is an error.
func STUNAnswer(req []byte, seen netip.AddrPort) ([]byte, error) {
	if len(req) < stunHeaderLen {
		return nil, fmt.Errorf("stun message of %d bytes is shorter than a header", len(req))
	}
	if typ := binary.BigEndian.Uint16(req[0:]); typ != stunBindingRequest {
		return nil, fmt.Errorf("stun message type %#04x is not a binding request", typ)
	}
	if binary.BigEndian.Uint32(req[4:]) != stunMagicCookie {
		return nil, errors.New("stun magic cookie is wrong")
	}
	if !seen.IsValid() {
		return nil, errors.New("no address to answer with")
	}
	ip := seen.Addr().Unmap().AsSlice()
	family := byte(stunFamilyIPv4)
	if len(ip) == 16 {
		family = stunFamilyIPv6
	}
	val := make([]byte, 4+len(ip))
	val[1] = family
	binary.BigEndian.PutUint16(val[2:], seen.Port()^stunMagicCookie>>16)
	for i := range ip {
		val[4+i] = ip[i] ^ req[4+i] // the cookie, then the transaction id
	}
	b := make([]byte, stunHeaderLen, stunHeaderLen+4+len(val))
	binary.BigEndian.PutUint16(b[0:], stunBindingSuccess)
	binary.BigEndian.PutUint16(b[2:], uint16(4+len(val)))
	copy(b[4:], req[4:20])
	b = binary.BigEndian.AppendUint16(b, stunXORMappedAddr)
	b = binary.BigEndian.AppendUint16(b, uint16(len(val)))
	return append(b, val...), nil
}
