package nftcap

import "fmt"

// validateUDP checks the fields of s that TPROXY uses: the UDP capture's port, and the mark
// and routing table that the UDP capture and the TCP one (TCPTProxy) share.
func (s Spec) validateUDP() []error {
	if !s.tproxied() {
		return nil
	}
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.UDPPort != 0 && s.UDPPort == s.DNSPort {
		add("udp port %d equals the dns port", s.UDPPort)
	}
	if s.UDPMark == 0 {
		add("udp capture (or tcp tproxy) needs a non-zero udp mark")
	} else if s.UDPMark == s.Mark {
		add("udp mark %#x equals the mark of the router's own sockets", s.UDPMark)
	}
	// 253-255 are the kernel's default, main and local tables; 0 is unspecified.
	if s.UDPTable == 0 || s.UDPTable >= 253 && s.UDPTable <= 255 {
		add("udp routing table %d: want a table of our own (not 0, 253, 254 or 255)", s.UDPTable)
	}
	return errs
}

// tproxied reports whether the table hands anything over by TPROXY (UDPPort, TCPTProxy):
// then it needs UDPMark, its policy routing (UDPTable) and its acceptance in the input
// chain.
func (s Spec) tproxied() bool { return s.UDPPort != 0 || s.TCPTProxy }
