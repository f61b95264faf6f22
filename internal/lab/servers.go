package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/agentcage/router/internal/netaddr"
)

// maxRecords bounds every server log; when full, the older half is dropped.
const maxRecords = 20000

// record is a mutex-guarded, bounded log of T.
type record[T any] struct {
	mu    sync.Mutex // guards items
	items []T
}

func (r *record[T]) add(v T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.items) >= maxRecords {
		r.items = append(r.items[:0], r.items[len(r.items)/2:]...)
	}
	r.items = append(r.items, v)
}

// snapshot returns a copy the caller owns.
func (r *record[T]) snapshot() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]T(nil), r.items...)
}

func (r *record[T]) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.items = nil
}

// HTTPRequest is one request the IP-echo server answered.
type HTTPRequest struct {
	Time   time.Time
	Remote netip.AddrPort // the client as the server saw it
	Host   string         // the Host header
	Method string
	Path   string
	Query  string // the raw query
	Auth   string // the Authorization header
}

func (r HTTPRequest) String() string {
	return fmt.Sprintf("%s http %s %s Host=%q %s", r.Time.Format("15:04:05.000"), r.Remote, r.Method, r.Host, r.Path)
}

// DNSQuery is one question the lab DNS server received.
type DNSQuery struct {
	Time      time.Time
	Source    netip.AddrPort // who asked
	Name      string         // lower case, fully qualified ("echo.lab.test.")
	Type      string         // "A", "AAAA", "HTTPS", ...
	Transport string         // "udp" or "tcp"
}

func (q DNSQuery) String() string {
	return fmt.Sprintf("%s dns %s/%s %s %s", q.Time.Format("15:04:05.000"), q.Source, q.Transport, q.Name, q.Type)
}

// UDPPacket is one datagram the UDP echo server answered.
type UDPPacket struct {
	Time   time.Time
	Source netip.AddrPort
	Len    int
}

func (p UDPPacket) String() string {
	return fmt.Sprintf("%s udp-echo %s len=%d", p.Time.Format("15:04:05.000"), p.Source, p.Len)
}

// ModelStream is one streamed chat completion the model server sent.
type ModelStream struct {
	Remote  netip.AddrPort
	Started time.Time
	// Sent[i] is when event i was written and flushed; the last event is "data: [DONE]".
	// Event i (i < len(Sent)-1) carries the content "lab-event-<i>".
	Sent []time.Time
}

func (s ModelStream) String() string {
	return fmt.Sprintf("%s model stream %s events=%d", s.Started.Format("15:04:05.000"), s.Remote, len(s.Sent))
}

func unmap(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// echoHandler answers the client's address: "/json" as {"ip": "..."}, any other path as the
// bare address and a newline. Every request is logged to rec.
func echoHandler(rec *record[HTTPRequest]) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		remote, _ := netip.ParseAddrPort(r.RemoteAddr)
		remote = unmap(remote)
		rec.add(HTTPRequest{Time: time.Now(), Remote: remote, Host: r.Host, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Auth: r.Header.Get("Authorization")})
		ip := remote.Addr().String()
		if r.URL.Path == "/json" {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]string{"ip": ip})
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, ip)
	})
}

// The lab.test zone.
const (
	zone      = "lab.test."
	echoFQDN  = EchoName + "."
	whoFQDN   = WhoamiName + "."
	zoneTTL   = 60
	zoneNS    = "ns.lab.test."
	zoneAdmin = "hostmaster.lab.test."
)

// dnsHandler answers the lab.test zone (see EchoName and WhoamiName) and logs every question.
func dnsHandler(rec *record[DNSQuery], names map[string]netip.Addr) dns.Handler {
	return dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		src := netaddr.AddrPort(w.RemoteAddr())
		transport := "udp"
		if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
			transport = "tcp"
		}
		m := new(dns.Msg)
		m.SetReply(req)
		m.Authoritative = true
		if len(req.Question) != 1 {
			m.Rcode = dns.RcodeFormatError
			_ = w.WriteMsg(m)
			return
		}
		q := req.Question[0]
		name := strings.ToLower(q.Name)
		rec.add(DNSQuery{Time: time.Now(), Source: src, Name: name, Type: typeName(q.Qtype), Transport: transport})
		if dns.IsSubDomain(SilentZone, name) {
			return // never answered: the asker waits for its timeout
		}
		if a, ok := names[strings.TrimSuffix(name, ".")]; ok {
			if q.Qtype == dns.TypeA && a.Is4() {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: zoneTTL}, A: a.AsSlice()})
			}
			_ = w.WriteMsg(m)
			return
		}
		if !dns.IsSubDomain(zone, name) {
			m.Authoritative = false
			m.Rcode = dns.RcodeRefused
			_ = w.WriteMsg(m)
			return
		}
		if rr := loopAnswer(q); rr != nil {
			m.Answer = append(m.Answer, rr)
			_ = w.WriteMsg(m)
			return
		}
		hdr := func(t uint16) dns.RR_Header {
			return dns.RR_Header{Name: q.Name, Rrtype: t, Class: dns.ClassINET, Ttl: zoneTTL}
		}
		switch {
		case name == echoFQDN && q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr(dns.TypeA), A: net.ParseIP(ServiceAddr).To4()})
		case name == whoFQDN && q.Qtype == dns.TypeA && src.Addr().Is4():
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr(dns.TypeA), A: src.Addr().AsSlice()})
		case name == whoFQDN && q.Qtype == dns.TypeAAAA && src.Addr().Is6():
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: src.Addr().AsSlice()})
		case name == whoFQDN && q.Qtype == dns.TypeTXT:
			m.Answer = append(m.Answer, &dns.TXT{Hdr: hdr(dns.TypeTXT), Txt: []string{src.String()}})
		case name == zone && q.Qtype == dns.TypeNS:
			m.Answer = append(m.Answer, &dns.NS{Hdr: hdr(dns.TypeNS), Ns: zoneNS})
		case name == zone && q.Qtype == dns.TypeSOA:
			m.Answer = append(m.Answer, soa())
		case name == echoFQDN || name == whoFQDN || name == zone || HomeNames[strings.TrimSuffix(name, ".")] != "":
			m.Ns = append(m.Ns, soa()) // the name exists, the type does not: NODATA
		default:
			m.Rcode = dns.RcodeNameError
			m.Ns = append(m.Ns, soa())
		}
		_ = w.WriteMsg(m)
	})
}

func soa() *dns.SOA {
	return &dns.SOA{
		Hdr: dns.RR_Header{Name: zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: zoneTTL},
		Ns:  zoneNS, Mbox: zoneAdmin, Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: zoneTTL,
	}
}

func typeName(t uint16) string {
	if s, ok := dns.TypeToString[t]; ok {
		return s
	}
	return fmt.Sprintf("TYPE%d", t)
}

// SizedAnswer is the n bytes the UDP echo answers "size:N" with: a pattern that shows a
// datagram cut or shifted.
func SizedAnswer(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i ^ i>>8 ^ n)
	}
	return b
}

// serveUDPEcho answers every datagram on pc with the sender's address ("ip:port"), or
// "size:N" with SizedAnswer(N), until pc is closed.
func serveUDPEcho(pc net.PacketConn, rec *record[UDPPacket]) {
	buf := make([]byte, 65536)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		src := netaddr.AddrPort(from)
		rec.add(UDPPacket{Time: time.Now(), Source: src, Len: n})
		if size, ok := strings.CutPrefix(string(buf[:min(n, 16)]), "size:"); ok {
			if n, err := strconv.Atoi(size); err == nil && n >= 1 && n <= 65507 {
				_, _ = pc.WriteTo(SizedAnswer(n), from)
			}
			continue
		}
		_, _ = pc.WriteTo([]byte(src.String()+"\n"), from)
	}
}

// modelConfig shapes the fake model server's streamed answers.
type modelConfig struct {
	gap    time.Duration // pause after each content event
	events int           // content events per stream (then [DONE])
}

// modelHandler is a small OpenAI-compatible and Ollama-like server: GET /v1/models lists
// ModelID; POST /v1/chat/completions answers a fixed completion, or with "stream": true
// server-sent events "lab-event-0".."lab-event-<n-1>" and "[DONE]", each flushed, cfg.gap
// apart; POST /api/chat answers one NDJSON line. Every other request (Ollama's management
// calls among them) answers 200 {"status":"success"}, as a server that did what it was
// asked. Streams are logged to rec, every request received to reqs.
func modelHandler(cfg modelConfig, rec *record[ModelStream], reqs *record[HTTPRequest]) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"status": "success"})
	})
	mux.HandleFunc("POST /api/chat", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintf(w, `{"model":%q,"message":{"role":"assistant","content":"hello from the lab"},"done":true}`+"\n", ModelID)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{
			"object": "list",
			"data":   []any{map[string]any{"id": ModelID, "object": "model", "owned_by": "lab"}},
		})
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
			http.Error(w, `{"error":{"message":"bad request body"}}`, http.StatusBadRequest)
			return
		}
		created := time.Now().Unix()
		if !req.Stream {
			writeJSON(w, map[string]any{
				"id": "chatcmpl-lab", "object": "chat.completion", "created": created, "model": ModelID,
				"choices": []any{map[string]any{
					"index":         0,
					"message":       map[string]any{"role": "assistant", "content": "hello from the lab"},
					"finish_reason": "stop",
				}},
			})
			return
		}
		flusher, ok := w.(http.Flusher)
		if !ok {
			http.Error(w, "streaming unsupported", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		flusher.Flush()
		s := ModelStream{Remote: unmap(mustAddrPort(r.RemoteAddr)), Started: time.Now()}
		defer func() { rec.add(s) }()
		for i := 0; i <= cfg.events; i++ {
			payload := "[DONE]"
			if i < cfg.events {
				chunk, _ := json.Marshal(map[string]any{
					"id": "chatcmpl-lab", "object": "chat.completion.chunk", "created": created, "model": ModelID,
					"choices": []any{map[string]any{
						"index":         0,
						"delta":         map[string]any{"content": fmt.Sprintf("lab-event-%d", i)},
						"finish_reason": nil,
					}},
				})
				payload = string(chunk)
			}
			if _, err := fmt.Fprintf(w, "data: %s\n\n", payload); err != nil {
				return
			}
			flusher.Flush()
			s.Sent = append(s.Sent, time.Now())
			if i == cfg.events {
				return
			}
			select {
			case <-time.After(cfg.gap):
			case <-r.Context().Done():
				return
			}
		}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		remote, _ := netip.ParseAddrPort(r.RemoteAddr)
		reqs.add(HTTPRequest{Time: time.Now(), Remote: unmap(remote), Host: r.Host, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Auth: r.Header.Get("Authorization")})
		mux.ServeHTTP(w, r)
	})
}

func mustAddrPort(s string) netip.AddrPort {
	ap, _ := netip.ParseAddrPort(s)
	return ap
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
