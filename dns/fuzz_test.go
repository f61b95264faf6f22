package dns

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// pipeResolver is an in-memory resolver: dial returns one end of a net.Pipe and a goroutine
// answers on the other, over TCP framing (stream) or one message per write (datagram). It
// answers every question with a few records of several types, glue included.
func pipeResolver(datagram bool) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			buf := make([]byte, 65535)
			for {
				var n int
				if datagram {
					var err error
					if n, err = server.Read(buf); err != nil {
						return
					}
				} else {
					var l [2]byte
					if _, err := io.ReadFull(server, l[:]); err != nil {
						return
					}
					n = int(binary.BigEndian.Uint16(l[:]))
					if _, err := io.ReadFull(server, buf[:n]); err != nil {
						return
					}
				}
				q := new(mdns.Msg)
				if q.Unpack(buf[:n]) != nil || len(q.Question) != 1 {
					return
				}
				r := synthAnswer(q)
				wire, err := r.Pack()
				if err != nil {
					return
				}
				if !datagram {
					wire = append(binary.BigEndian.AppendUint16(nil, uint16(len(wire))), wire...)
				}
				if _, err := server.Write(wire); err != nil {
					return
				}
			}
		}()
		return client, nil
	}
}

func synthAnswer(q *mdns.Msg) *mdns.Msg {
	r := new(mdns.Msg)
	r.SetReply(q)
	name := q.Question[0].Name
	h := func(t uint16, ttl uint32) mdns.RR_Header {
		return mdns.RR_Header{Name: name, Rrtype: t, Class: mdns.ClassINET, Ttl: ttl}
	}
	switch len(name) % 4 {
	case 0:
		r.Rcode = mdns.RcodeNameError
		r.Ns = []mdns.RR{&mdns.SOA{Hdr: h(mdns.TypeSOA, 30), Ns: "ns.example.", Mbox: "h.example.", Minttl: 5}}
	case 1:
		r.Rcode = mdns.RcodeServerFailure
	default:
		r.Answer = []mdns.RR{
			&mdns.A{Hdr: h(mdns.TypeA, 60), A: net.IPv4(192, 0, 2, byte(len(name)))},
			&mdns.AAAA{Hdr: h(mdns.TypeAAAA, 60), AAAA: net.ParseIP("2001:db8::1")},
			&mdns.MX{Hdr: h(mdns.TypeMX, 60), Preference: 10, Mx: "mail.example."},
			&mdns.TXT{Hdr: h(mdns.TypeTXT, uint32(len(name))), Txt: []string{strings.Repeat("x", len(name))}},
		}
		r.Extra = []mdns.RR{&mdns.A{Hdr: mdns.RR_Header{Name: "mail.example.", Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 25)}}
	}
	return r
}

// fuzzSeeds are the queries FuzzHandle starts from, besides testdata/fuzz/FuzzHandle.
func fuzzSeeds() [][]byte {
	var out [][]byte
	add := func(m *mdns.Msg) {
		if w, err := m.Pack(); err == nil {
			out = append(out, w)
		}
	}
	for _, qt := range []uint16{mdns.TypeA, mdns.TypeAAAA, mdns.TypeHTTPS, mdns.TypeMX, mdns.TypePTR, mdns.TypeTXT, mdns.TypeANY} {
		add(query("example.com.", qt))
	}
	add(query("1.0.18.198.in-addr.arpa.", mdns.TypePTR))
	add(query("printer.lan.", mdns.TypeA))
	add(query("localhost.", mdns.TypeAAAA))
	add(query("127.0.0.1.", mdns.TypeA))
	add(query("0x7f.1.", mdns.TypeA))
	add(query(reverseName(netip.MustParseAddr("::ffff:198.18.0.1")), mdns.TypePTR))
	edns := query("Example.COM.", mdns.TypeA)
	edns.SetEdns0(4096, true)
	add(edns)
	chaos := query("version.bind.", mdns.TypeTXT)
	chaos.Question[0].Qclass = mdns.ClassCHAOS
	add(chaos)
	return out
}

// FuzzHandle feeds arbitrary bytes to the query path of both modes, over "UDP" and "TCP", from
// a source picked by the query's id. Properties: no panic; a reply is nil or unpacks, answers
// the query's id with QR set, fits the UDP limit; fake A answers are pool addresses that map
// back to the question name, which is no address literal; the pool never maps a literal.
func FuzzHandle(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	c := newClock()
	newServer := func(mode Mode) *Server {
		s, err := New(Config{
			Mode: mode, Pool: netip.MustParsePrefix("198.18.0.0/24"), TTL: time.Second, Linger: time.Second,
			Timeout: 2 * time.Second, DirectNames: []string{"*.lan"}, Now: c.Now,
		}, Dialers{Proxy: pipeResolver(false), Direct: pipeResolver(true), DirectResolver: "192.0.2.1:53"}, nil)
		if err != nil {
			f.Fatal(err)
		}
		return s
	}
	servers := []*Server{newServer(ModeFakeIP), newServer(ModeProxy)}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		c.Advance(time.Second)
		for _, s := range servers {
			for _, udp := range []bool{true, false} {
				var src Source
				if len(data) >= 2 {
					src.Addr = netip.AddrFrom4([4]byte{10, 0, 0, data[1] % 4})
				}
				out := s.HandleWireFrom(ctx, src, data, udp)
				if out == nil {
					continue
				}
				r := new(mdns.Msg)
				if err := r.Unpack(out); err != nil {
					t.Fatalf("reply does not unpack: %v\n%x", err, out)
				}
				if r.Id != binary.BigEndian.Uint16(data) || !r.Response {
					t.Fatalf("reply id %d QR %v, query id %d", r.Id, r.Response, binary.BigEndian.Uint16(data))
				}
				if udp && len(out) > udpSize {
					t.Fatalf("udp reply of %d bytes", len(out))
				}
				if s.Mode() != ModeFakeIP || r.Rcode != mdns.RcodeSuccess || len(r.Question) != 1 {
					continue
				}
				for _, rr := range r.Answer {
					a, ok := rr.(*mdns.A)
					qn := canonical(r.Question[0].Name)
					if !ok || underOrAt(qn, "localhost") || s.direct.match(qn) {
						continue
					}
					addr, _ := netip.AddrFromSlice(a.A)
					name, known := s.NameFor(addr.Unmap())
					if IsIPLiteral(r.Question[0].Name) || IsIPLiteral(name) {
						t.Fatalf("fake A %v for the address literal %q", addr, r.Question[0].Name)
					}
					if !s.InPool(addr.Unmap()) || !known || name != canonical(r.Question[0].Name) {
						t.Fatalf("fake A %v for %q: in pool %v, maps to %q", addr, r.Question[0].Name, s.InPool(addr.Unmap()), name)
					}
				}
			}
			// The message path too, when the bytes unpack.
			q := new(mdns.Msg)
			if q.Unpack(data) == nil {
				if r := s.Handle(ctx, q); r != nil {
					if _, err := r.Pack(); err != nil {
						t.Fatalf("Handle reply does not pack: %v", err)
					}
				}
			}
		}
	})
}
