package router

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/agentcage/router/rules/modelapi"

	"github.com/agentcage/router/rules"
)

// BenchmarkModelForward measures what the HTTP forward costs a model client, paired in one
// run: the model server alone, the raw TCP forward (api = "tcp"), the HTTP forward (the
// default api) and a caged process's flow to the model's address that the transparent
// listener hands to the HTTP forward's gate (forward_gate.go), back to back in each round, the order rotated every round. Per path: the
// time to the first streamed event of a chat completion on a keep-alive connection (TTFB),
// the latency of each later event (from the server's write to the client's read, stamped in
// the event), and requests/s of GET /v1/models on one keep-alive connection. It prints the
// figures side by side, with the added p50 over the server alone as the median of the
// rounds' own differences. The body check's own cost shows in the last pair: a chat
// carrying a 256 KiB inline image, to the server alone and through the HTTP forward, which
// reads all of it before the request is whole.
//
//	go test -run '^$' -bench BenchmarkModelForward -benchtime 1x ./router/
func BenchmarkModelForward(b *testing.B) {
	const (
		rounds   = 5
		streams  = 60 // per round and path
		events   = 20 // per stream
		gap      = time.Millisecond
		rpsSpell = 300 * time.Millisecond
	)
	srv := startStampServer(b, events, gap)
	r, err := New(Settings{IdleTimeout: time.Minute, ConnectTimeout: 2 * time.Second}, Options{
		Original: func(c *net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
			return netip.AddrPort{}, netip.AddrPort{}, fmt.Errorf("no transparent flows here")
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); r.Wait(); r.Close() }()
	api, _ := modelapi.New(modelapi.Default(), nil)
	listen := func(f Forward) string {
		f.Listen, f.Connect = netip.MustParseAddrPort("127.0.0.1:0"), netip.MustParseAddrPort(srv)
		f.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		ln, err := r.ListenForward(ctx, f)
		if err != nil {
			b.Fatal(err)
		}
		go r.ServeForward(ctx, ln, func() *Forward { return &f })
		return ln.Addr().String()
	}
	httpFwd := listen(Forward{Name: "http", API: api, MaxBody: 64 << 20})
	small := `{"model":"bench","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	image := `{"model":"bench","stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"what is it?"},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + strings.Repeat("QUJD", 64<<10) + `"}}]}]}`
	paths := []struct {
		name, addr, body string
		base             int // the path its +p50 is measured against
	}{
		{"server alone", srv, small, 0},
		{"raw TCP forward", listen(Forward{Name: "raw"}), small, 0},
		{"HTTP forward", httpFwd, small, 0},
		{"gated caged flow", gatedListener(b, ctx, srv), small, 0},
		{"server alone, 256K image", srv, image, 4},
		{"HTTP forward, 256K image", httpFwd, image, 4},
	}
	type figures struct {
		ttfb, chunk, gaps []time.Duration
		ttfbP50           []time.Duration // per round
		chunkP50          []time.Duration // per round
		rps               []float64       // per round
	}
	got := make([]figures, len(paths))
	b.ResetTimer()
	for round := range rounds {
		for k := range paths {
			i := (k + round) % len(paths)
			ttfb, chunk, gaps := streamRound(b, paths[i].addr, paths[i].body, streams)
			got[i].ttfb = append(got[i].ttfb, ttfb...)
			got[i].chunk = append(got[i].chunk, chunk...)
			got[i].gaps = append(got[i].gaps, gaps...)
			got[i].ttfbP50 = append(got[i].ttfbP50, pct(ttfb, 50))
			got[i].chunkP50 = append(got[i].chunkP50, pct(chunk, 50))
			got[i].rps = append(got[i].rps, keepAliveRPS(b, paths[i].addr, rpsSpell))
		}
	}
	b.StopTimer()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "path\tTTFB p50\tp99\t+p50 vs server\tevent latency p50\tp99\t+p50 vs server\tgap p50\tp99\treq/s keep-alive\t\n")
	for i, p := range paths {
		var dT, dC []time.Duration
		for k := range rounds {
			dT = append(dT, got[i].ttfbP50[k]-got[p.base].ttfbP50[k])
			dC = append(dC, got[i].chunkP50[k]-got[p.base].chunkP50[k])
		}
		fmt.Fprintf(tw, "%s\t%v\t%v\t%+v\t%v\t%v\t%+v\t%v\t%v\t%.0f\t\n", p.name,
			us(pct(got[i].ttfb, 50)), us(pct(got[i].ttfb, 99)), us(pct(dT, 50)),
			us(pct(got[i].chunk, 50)), us(pct(got[i].chunk, 99)), us(pct(dC, 50)),
			us(pct(got[i].gaps, 50)), us(pct(got[i].gaps, 99)), median(got[i].rps))
		tag := strings.ReplaceAll(p.name, " ", "-")
		b.ReportMetric(float64(pct(got[i].ttfb, 50).Microseconds()), tag+"-ttfb-p50-µs")
	}
	tw.Flush()
	fmt.Printf("(%d rounds × %d streams of %d events %v apart per path; +p50 is the median of the rounds' own differences from the server alone with the same body)\n", rounds, streams, events, gap)
}

// startStampServer serves POST /v1/chat/completions as server-sent events, each stamped
// with the time it was written ("data: <unix ns>"), and GET /v1/models.
func startStampServer(b *testing.B, events int, gap time.Duration) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"bench"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := 0; i <= events; i++ {
			if i > 0 {
				time.Sleep(gap) // not ordering: the stream's pace, what the benchmark measures
			}
			fmt.Fprintf(w, "data: %d\n\n", time.Now().UnixNano())
			if rc.Flush() != nil {
				return
			}
		}
	})
	s := &http.Server{Handler: mux}
	go s.Serve(ln)
	b.Cleanup(func() { s.Close() })
	return ln.Addr().String()
}

// streamRound runs n streamed completions of body one after another on one keep-alive
// connection and returns each one's time to its first event, each later event's latency and the gaps
// between events as the client saw them.
func streamRound(b *testing.B, addr, body string, n int) (ttfb, chunk, gaps []time.Duration) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	req := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
	for range n {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		if _, err := io.WriteString(c, req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		ev := bufio.NewReader(resp.Body)
		var last time.Time
		for i := 0; ; i++ {
			line, err := ev.ReadString('\n')
			if err != nil {
				break
			}
			stamp, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
			if !ok {
				i--
				continue
			}
			now := time.Now()
			if i == 0 {
				ttfb = append(ttfb, now.Sub(start))
			} else {
				ns, _ := strconv.ParseInt(stamp, 10, 64)
				chunk = append(chunk, now.Sub(time.Unix(0, ns)))
				gaps = append(gaps, now.Sub(last))
			}
			last = now
		}
		resp.Body.Close()
	}
	return ttfb, chunk, gaps
}

// keepAliveRPS returns the requests/s of GET /v1/models one after another on one
// keep-alive connection during d.
func keepAliveRPS(b *testing.B, addr string, d time.Duration) float64 {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	req := "GET /v1/models HTTP/1.1\r\nHost: " + addr + "\r\n\r\n"
	start := time.Now()
	n := 0
	for time.Since(start) < d {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		n++
	}
	return float64(n) / time.Since(start).Seconds()
}

func pct(xs []time.Duration, p int) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// us rounds d to the microsecond for printing.
func us(d time.Duration) time.Duration { return d.Round(time.Microsecond) }

// gatedListener starts a router whose transparent listener takes every connection as a
// caged process's (slirp4netns) flow to the model server at srv, which the forward's gate
// serves (GateConfig with srv's port), and returns the listener's address.
func gatedListener(b *testing.B, ctx context.Context, srv string) string {
	model := netip.MustParseAddrPort(srv)
	s := gateSettingsAt(b, model.Port())
	s.IdleTimeout, s.ConnectTimeout = time.Minute, 2*time.Second
	r, err := New(s, Options{
		Original: func(c *net.TCPConn) (netip.AddrPort, netip.AddrPort, error) {
			return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 40000), model, nil
		},
		Owner: func(*net.TCPConn, netip.AddrPort, netip.AddrPort) (rules.Owner, error) {
			return rules.Owner{PID: 7, App: "slirp4netns"}, nil
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	go r.Serve(ctx, ln)
	b.Cleanup(func() { ln.Close(); r.Wait(); r.Close() })
	return ln.Addr().String()
}
