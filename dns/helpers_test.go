package dns

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/agentcage/router/internal/clock/clocktest"
	"github.com/agentcage/router/internal/wait"
)

// newClock returns a clock for Config.Now that moves only when the test advances it.
func newClock() *clocktest.Clock { return clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) }

// failDial is a dialer that must never be called.
func failDial(t *testing.T, which string) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		t.Errorf("%s dialer called: %s %s", which, network, addr)
		return nil, errors.New("unexpected dial")
	}
}

// query builds a query for name and type, RD set, class IN.
func query(name string, qtype uint16) *mdns.Msg {
	m := new(mdns.Msg)
	m.SetQuestion(name, qtype)
	return m
}

// rrStrings normalises zone-text records through mdns.NewRR, so that expectations can be
// written as zone file lines.
func rrStrings(t *testing.T, zone ...string) []string {
	t.Helper()
	out := []string{}
	for _, z := range zone {
		rr, err := mdns.NewRR(z)
		if err != nil || rr == nil {
			t.Fatalf("bad zone text %q: %v", z, err)
		}
		out = append(out, rr.String())
	}
	return out
}

func sectionStrings(rrs []mdns.RR) []string {
	out := []string{}
	for _, rr := range rrs {
		if rr.Header().Rrtype == mdns.TypeOPT {
			continue
		}
		out = append(out, rr.String())
	}
	return out
}

// want is an expected reply written as zone text.
type want struct {
	rcode  int
	answer []string
	ns     []string
	extra  []string // without the OPT record
}

// soaText is the SOA the server puts in authority of its own negative answers (TTL 10 s).
const soaText = ". 10 IN SOA router.invalid. hostmaster.router.invalid. 1 3600 600 86400 10"

func nodata() want { return want{rcode: mdns.RcodeSuccess, ns: []string{soaText}} }
func nxdomain() want {
	return want{rcode: mdns.RcodeNameError, ns: []string{soaText}}
}

// check compares a reply with w section by section, and checks that it packs and answers req.
func check(t *testing.T, req, got *mdns.Msg, w want) {
	t.Helper()
	if got == nil {
		t.Fatalf("reply = nil, want rcode %s", mdns.RcodeToString[w.rcode])
	}
	if got.Rcode != w.rcode {
		t.Errorf("rcode = %s, want %s", mdns.RcodeToString[got.Rcode], mdns.RcodeToString[w.rcode])
	}
	if got.Id != req.Id || !got.Response {
		t.Errorf("id %d response %v, want id %d response true", got.Id, got.Response, req.Id)
	}
	if len(req.Question) == 1 && (len(got.Question) != 1 || got.Question[0] != req.Question[0]) {
		t.Errorf("question = %v, want %v", got.Question, req.Question)
	}
	for _, sec := range []struct {
		name      string
		got, want []string
	}{
		{"answer", sectionStrings(got.Answer), rrStrings(t, w.answer...)},
		{"authority", sectionStrings(got.Ns), rrStrings(t, w.ns...)},
		{"additional", sectionStrings(got.Extra), rrStrings(t, w.extra...)},
	} {
		if !slices.Equal(sec.got, sec.want) {
			t.Errorf("%s section:\n got %s\nwant %s", sec.name, strings.Join(sec.got, "\n    "), strings.Join(sec.want, "\n    "))
		}
	}
	if _, err := got.Copy().Pack(); err != nil {
		t.Errorf("reply does not pack: %v", err)
	}
}

// zone is a tiny authoritative server for tests: records by canonical name and type, written
// as zone text; a name it does not know gets NXDOMAIN with a SOA (TTL 3600, minimum 60).
type zone struct {
	t       *testing.T
	records map[string][]string // key "name TYPE", e.g. "example.com A"

	mu      sync.Mutex
	queries map[string]int // by key
	total   int
}

func newZone(t *testing.T, records map[string][]string) *zone {
	return &zone{t: t, records: records, queries: make(map[string]int)}
}

func (z *zone) count(key string) int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.queries[key]
}

func (z *zone) totalQueries() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.total
}

func (z *zone) ServeDNS(w mdns.ResponseWriter, r *mdns.Msg) {
	q := r.Question[0]
	key := canonical(q.Name) + " " + mdns.Type(q.Qtype).String()
	z.mu.Lock()
	z.queries[key]++
	z.total++
	z.mu.Unlock()
	m := new(mdns.Msg)
	m.SetReply(r)
	recs, ok := z.records[key]
	switch {
	case ok && len(recs) == 1 && recs[0] == "SERVFAIL":
		m.Rcode = mdns.RcodeServerFailure
	case ok:
		for _, s := range recs {
			rr, err := mdns.NewRR(s)
			if err != nil {
				z.t.Errorf("zone record %q: %v", s, err)
				continue
			}
			if rr.Header().Rrtype == q.Qtype || rr.Header().Rrtype == mdns.TypeCNAME {
				m.Answer = append(m.Answer, rr)
			} else {
				m.Extra = append(m.Extra, rr)
			}
		}
		if _, isUDP := w.LocalAddr().(*net.UDPAddr); isUDP {
			m.Truncate(maxUDPReply(r))
		}
	default:
		m.Rcode = mdns.RcodeNameError
		if len(z.records[canonical(q.Name)+" "+"A"]) > 0 {
			m.Rcode = mdns.RcodeSuccess // the name exists: NODATA
		}
		soa, _ := mdns.NewRR("example. 3600 IN SOA ns.example. host.example. 1 3600 600 86400 60")
		m.Ns = []mdns.RR{soa}
	}
	w.WriteMsg(m)
}

// startTCP runs h on a loopback TCP listener until the test ends and returns its address.
func startTCP(t *testing.T, h mdns.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen tcp: %v", err)
	}
	srv := &mdns.Server{Listener: ln, Handler: h}
	startMiekg(t, srv)
	return ln.Addr().String()
}

// startUDPTCP runs h on loopback UDP and TCP sockets of the same port.
func startUDPTCP(t *testing.T, h mdns.Handler) string {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen udp: %v", err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err != nil {
			pc.Close()
			continue
		}
		startMiekg(t, &mdns.Server{PacketConn: pc, Handler: h})
		startMiekg(t, &mdns.Server{Listener: ln, Handler: h})
		return pc.LocalAddr().String()
	}
	t.Fatal("no free loopback port for udp and tcp")
	return ""
}

func startMiekg(t *testing.T, srv *mdns.Server) {
	t.Helper()
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	done := make(chan error, 1)
	go func() { done <- srv.ActivateAndServe() }()
	wait.Started(t, "the test dns server", 5*time.Second, started, done)
	t.Cleanup(func() {
		srv.Shutdown()
		<-done
	})
}

// redirect is a dialer that checks the address the server asks for and connects to a loopback
// server instead, counting dials.
type redirect struct {
	t           *testing.T
	wantNetwork []string // accepted networks
	wantAddr    string
	to          string

	mu    sync.Mutex
	dials int
}

func (r *redirect) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if !slices.Contains(r.wantNetwork, network) || addr != r.wantAddr {
		r.t.Errorf("dial %s %s, want %v %s", network, addr, r.wantNetwork, r.wantAddr)
		return nil, errors.New("unexpected dial")
	}
	r.mu.Lock()
	r.dials++
	r.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, network, r.to)
}

func (r *redirect) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dials
}
