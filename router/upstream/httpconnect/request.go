package httpconnect

import (
	"fmt"
	"net/netip"
	"strconv"
)

// AppendRequest appends a CONNECT request for host:port (RFC 9110 §9.3.6):
//
//	CONNECT host:port HTTP/1.1
//	Host: host:port
//	Proxy-Authorization: Basic <base64 of user:password>   (when auth is not nil)
//	<empty line>
//
// host is an IP address or a host name. An IP is written in its standard
// form, IPv6 in brackets, an IPv4-mapped IPv6 address as IPv4, a zone
// dropped. A name is sent as given, for the proxy to resolve; it is 1 to
// 255 bytes of letters, digits, '-', '.' and '_' (every byte that could
// change the request's meaning is refused). port is 1 to 65535.
//
// It returns buf unchanged and an error when host, port or auth is invalid
// (the error never shows the password); it allocates only when buf lacks
// room.
func AppendRequest(buf []byte, host string, port uint16, auth *Auth) ([]byte, error) {
	authority, err := targetAuthority(host, port)
	if err != nil {
		return buf, fmt.Errorf("invalid target: %w", err)
	}
	if auth != nil {
		if err := checkAuth(*auth); err != nil {
			return buf, fmt.Errorf("invalid credentials: %w", err)
		}
	}
	buf = append(buf, "CONNECT "...)
	buf = append(buf, authority...)
	buf = append(buf, " HTTP/1.1\r\nHost: "...)
	buf = append(buf, authority...)
	buf = append(buf, "\r\n"...)
	if auth != nil {
		buf = append(buf, "Proxy-Authorization: Basic "...)
		buf = append(buf, token(*auth)...)
		buf = append(buf, "\r\n"...)
	}
	return append(buf, "\r\n"...), nil
}

// targetAuthority returns host:port as it goes in the request line, or why
// it cannot.
func targetAuthority(host string, port uint16) (string, error) {
	if port == 0 {
		return "", fmt.Errorf("port 0")
	}
	p := strconv.Itoa(int(port))
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap().WithZone("")
		if ip.Is4() {
			return ip.String() + ":" + p, nil
		}
		return "[" + ip.String() + "]:" + p, nil
	}
	if len(host) < 1 || len(host) > maxHostLen {
		return "", fmt.Errorf("host name is %d bytes, want 1..%d", len(host), maxHostLen)
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_') {
			return "", fmt.Errorf("host name %q has byte 0x%02x, which a CONNECT target cannot carry", host, c)
		}
	}
	return host + ":" + p, nil
}
