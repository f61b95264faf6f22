package lab

import "time"

// HTTPLog returns a copy of the echo server's request log, oldest first.
func (l *Lab) HTTPLog() []HTTPRequest { return l.httpLog.snapshot() }

// DNSLog returns a copy of the DNS server's query log, oldest first.
func (l *Lab) DNSLog() []DNSQuery { return l.dnsLog.snapshot() }

// UDPLog returns a copy of the UDP echo server's log, oldest first.
func (l *Lab) UDPLog() []UDPPacket { return l.udpLog.snapshot() }

// ModelLog returns a copy of the streams the model server sent, in order of completion.
func (l *Lab) ModelLog() []ModelStream {
	streams := l.modelLog.snapshot()
	for i := range streams {
		streams[i].Sent = append([]time.Time(nil), streams[i].Sent...)
	}
	return streams
}

// ModelRequests returns a copy of every request the model server received (method and
// path as it routed them), oldest first.
func (l *Lab) ModelRequests() []HTTPRequest { return l.modelReqs.snapshot() }

// SocksLog returns a copy of go-socks5's error log (failed handshakes, dials, resets).
func (l *Lab) SocksLog() []string { return l.socksLog.snapshot() }

// ResetLogs empties the server logs (not danted's output).
func (l *Lab) ResetLogs() {
	l.httpLog.reset()
	l.dnsLog.reset()
	l.udpLog.reset()
	l.modelLog.reset()
	l.modelReqs.reset()
	l.socksLog.reset()
}
