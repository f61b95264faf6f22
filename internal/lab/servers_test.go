package lab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Loopback tests of the lab's servers: no root, no namespaces.

func TestDNSHandler(t *testing.T) {
	var rec record[DNSQuery]
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: dnsHandler(&rec, nil)}, {Listener: ln, Handler: dnsHandler(&rec, nil)}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	addr := map[string]string{"udp": pc.LocalAddr().String(), "tcp": ln.Addr().String()}

	tests := []struct {
		name      string
		qname     string
		qtype     uint16
		transport string
		wantRcode int
		want      string // answers, one per line, without TTLs
		wantSOA   bool   // SOA in the authority section
	}{
		{"echo A", "echo.lab.test.", dns.TypeA, "udp", dns.RcodeSuccess, "echo.lab.test. A 203.0.113.10", false},
		{"echo A any case", "ECHO.Lab.Test.", dns.TypeA, "udp", dns.RcodeSuccess, "ECHO.Lab.Test. A 203.0.113.10", false},
		{"echo A over tcp", "echo.lab.test.", dns.TypeA, "tcp", dns.RcodeSuccess, "echo.lab.test. A 203.0.113.10", false},
		{"echo AAAA is empty", "echo.lab.test.", dns.TypeAAAA, "udp", dns.RcodeSuccess, "", true},
		{"echo HTTPS is empty", "echo.lab.test.", dns.TypeHTTPS, "udp", dns.RcodeSuccess, "", true},
		{"echo SVCB is empty", "echo.lab.test.", dns.TypeSVCB, "udp", dns.RcodeSuccess, "", true},
		{"whoami A is the asker", "whoami.lab.test.", dns.TypeA, "udp", dns.RcodeSuccess, "whoami.lab.test. A 127.0.0.1", false},
		{"whoami AAAA is empty for an IPv4 asker", "whoami.lab.test.", dns.TypeAAAA, "udp", dns.RcodeSuccess, "", true},
		{"zone SOA", "lab.test.", dns.TypeSOA, "udp", dns.RcodeSuccess, "lab.test. SOA ns.lab.test. hostmaster.lab.test. 1 3600 600 86400 60", false},
		{"unknown name", "nope.lab.test.", dns.TypeA, "udp", dns.RcodeNameError, "", true},
		{"outside the zone", "example.com.", dns.TypeA, "udp", dns.RcodeRefused, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &dns.Client{Net: tt.transport, Timeout: 2 * time.Second}
			q := new(dns.Msg)
			q.SetQuestion(tt.qname, tt.qtype)
			resp, _, err := c.Exchange(q, addr[tt.transport])
			if err != nil {
				t.Fatal(err)
			}
			if resp.Rcode != tt.wantRcode {
				t.Errorf("rcode = %s, want %s", dns.RcodeToString[resp.Rcode], dns.RcodeToString[tt.wantRcode])
			}
			var got []string
			for _, rr := range resp.Answer {
				h := rr.Header()
				got = append(got, h.Name+" "+dns.TypeToString[h.Rrtype]+" "+strings.TrimPrefix(rr.String(), h.String()))
			}
			if strings.Join(got, "\n") != tt.want {
				t.Errorf("answers = %q, want %q", got, tt.want)
			}
			if gotSOA := len(resp.Ns) == 1 && resp.Ns[0].Header().Rrtype == dns.TypeSOA; gotSOA != tt.wantSOA {
				t.Errorf("authority = %v, want SOA %v", resp.Ns, tt.wantSOA)
			}
			log := rec.snapshot()
			last := log[len(log)-1]
			if last.Name != strings.ToLower(tt.qname) || last.Type != dns.TypeToString[tt.qtype] || last.Transport != tt.transport || last.Source.Addr().String() != "127.0.0.1" {
				t.Errorf("last log entry = %v, want %s %s over %s from 127.0.0.1", last, tt.qname, dns.TypeToString[tt.qtype], tt.transport)
			}
		})
	}

	t.Run("whoami TXT is the asker's address and port", func(t *testing.T) {
		q := new(dns.Msg)
		q.SetQuestion("whoami.lab.test.", dns.TypeTXT)
		resp, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(q, addr["udp"])
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Answer) != 1 {
			t.Fatalf("answers = %v, want 1 TXT", resp.Answer)
		}
		txt, ok := resp.Answer[0].(*dns.TXT)
		if !ok || len(txt.Txt) != 1 || !regexp.MustCompile(`^127\.0\.0\.1:[0-9]+$`).MatchString(txt.Txt[0]) {
			t.Errorf("answer = %v, want TXT 127.0.0.1:port", resp.Answer[0])
		}
	})
}

func TestEchoHandler(t *testing.T) {
	var rec record[HTTPRequest]
	srv := httptest.NewServer(echoHandler(&rec))
	defer srv.Close()
	for _, tt := range []struct{ path, want string }{
		{"/", "127.0.0.1\n"},
		{"/anything", "127.0.0.1\n"},
		{"/json", `{"ip":"127.0.0.1"}` + "\n"},
	} {
		t.Run(tt.path, func(t *testing.T) {
			req, _ := http.NewRequest("GET", srv.URL+tt.path, nil)
			req.Host = "echo.lab.test"
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != tt.want {
				t.Errorf("body = %q, want %q", body, tt.want)
			}
			log := rec.snapshot()
			last := log[len(log)-1]
			if last.Host != "echo.lab.test" || last.Path != tt.path || last.Method != "GET" || last.Remote.Addr().String() != "127.0.0.1" {
				t.Errorf("log entry = %v, want GET %s Host echo.lab.test from 127.0.0.1", last, tt.path)
			}
		})
	}
}

func TestModelHandler(t *testing.T) {
	var rec record[ModelStream]
	srv := httptest.NewServer(modelHandler(modelConfig{gap: 10 * time.Millisecond, events: 3}, &rec, new(record[HTTPRequest])))
	defer srv.Close()

	t.Run("models", func(t *testing.T) {
		resp, err := srv.Client().Get(srv.URL + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got struct {
			Object string `json:"object"`
			Data   []struct {
				ID     string `json:"id"`
				Object string `json:"object"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		if got.Object != "list" || len(got.Data) != 1 || got.Data[0].ID != ModelID || got.Data[0].Object != "model" {
			t.Errorf("models = %+v, want one %s", got, ModelID)
		}
	})

	t.Run("completion", func(t *testing.T) {
		resp, err := srv.Client().Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"x","messages":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got struct {
			Object  string `json:"object"`
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		if got.Object != "chat.completion" || len(got.Choices) != 1 || got.Choices[0].Message.Content == "" {
			t.Errorf("completion = %+v", got)
		}
	})

	t.Run("stream", func(t *testing.T) {
		resp, err := srv.Client().Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"x","stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("content type = %q, want text/event-stream", ct)
		}
		var got []string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var chunk struct {
					Choices []struct {
						Delta struct{ Content string } `json:"delta"`
					} `json:"choices"`
				}
				if p != "[DONE]" {
					if err := json.Unmarshal([]byte(p), &chunk); err != nil || len(chunk.Choices) != 1 {
						t.Fatalf("event %q: %v", p, err)
					}
					p = chunk.Choices[0].Delta.Content
				}
				got = append(got, p)
			}
		}
		if want := "lab-event-0 lab-event-1 lab-event-2 [DONE]"; strings.Join(got, " ") != want {
			t.Errorf("events = %q, want %q", got, want)
		}
		streams := rec.snapshot()
		if len(streams) != 1 || len(streams[0].Sent) != 4 {
			t.Fatalf("model log = %v, want one stream of 4 events", streams)
		}
		for i := 1; i < 4; i++ {
			if gap := streams[0].Sent[i].Sub(streams[0].Sent[i-1]); gap < 10*time.Millisecond {
				t.Errorf("events %d and %d %v apart, want at least 10ms", i-1, i, gap)
			}
		}
	})

	t.Run("bad body", func(t *testing.T) {
		resp, err := srv.Client().Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("status = %d, want 400", resp.StatusCode)
		}
	})
}

func TestUDPEcho(t *testing.T) {
	var rec record[UDPPacket]
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); serveUDPEcho(pc, &rec) }()
	defer func() { pc.Close(); <-done }()

	c, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(buf[:n]), c.LocalAddr().String()+"\n"; got != want {
		t.Errorf("reply = %q, want %q", got, want)
	}
	if log := rec.snapshot(); len(log) != 1 || log[0].Len != 4 || log[0].Source.String() != c.LocalAddr().String() {
		t.Errorf("log = %v, want one 4-byte packet from %s", log, c.LocalAddr())
	}
}

func TestParseLeaks(t *testing.T) {
	counter := func(name string, packets int) string {
		return fmt.Sprintf(`{"counter": {"family": "inet", "name": %q, "table": "rl_leak", "handle": 3, "packets": %d, "bytes": 0}}`, name, packets)
	}
	meta := `{"metainfo": {"version": "1.0.6", "json_schema_version": 1}}`
	all := []string{meta, counter("leak_total", 9), counter("leak_tcp", 4), counter("leak_udp", 3), counter("leak_icmp", 2), counter("leak_ipv6", 1)}
	tests := []struct {
		name    string
		in      string
		want    Leaks
		wantErr bool
	}{
		{"all counters", `{"nftables": [` + strings.Join(all, ", ") + `]}`, Leaks{Packets: 9, TCP: 4, UDP: 3, ICMP: 2, IPv6: 1}, false},
		{"a counter missing", `{"nftables": [` + strings.Join(all[:5], ", ") + `]}`, Leaks{}, true},
		{"foreign counters only", `{"nftables": [` + counter("other", 1) + `]}`, Leaks{}, true},
		{"not json", `table inet rl_leak {`, Leaks{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseLeaks([]byte(tt.in))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseLeaks = %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestLiteralAddress(t *testing.T) {
	tests := []struct {
		network, address string
		emptyHostOK      bool
		wantErr          bool
	}{
		{"tcp", "203.0.113.10:80", false, false},
		{"tcp", "[2001:db8:100::1]:80", false, false},
		{"tcp", ":80", true, false},
		{"tcp", ":80", false, true},
		{"tcp", "echo.lab.test:80", false, true},
		{"tcp", "localhost:80", true, true},
		{"udp", "203.0.113.10", false, true},
		{"ip4:icmp", "203.0.113.10", false, false},
		{"ip4:icmp", "echo.lab.test", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.network+" "+tt.address, func(t *testing.T) {
			if err := literalAddress(tt.network, tt.address, tt.emptyHostOK); (err != nil) != tt.wantErr {
				t.Errorf("literalAddress = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

func TestNamePatterns(t *testing.T) {
	ns := regexp.MustCompile(nsNamePattern)
	tmp := regexp.MustCompile(tmpDirPattern)
	tests := []struct {
		re   *regexp.Regexp
		name string
		want bool
	}{
		{ns, "rl4242-0f3a-inet", true},
		{ns, "rl4242-0f3a-host", true},
		{ns, "rl4242-0f3a-guest", true},
		{ns, "rl4242-0f3a-other", false},
		{ns, "rl4242-0f3a-inet2", false},
		{ns, "pb-inet", false},
		{ns, "rlx-0f3a-inet", false},
		{tmp, "rl4242-0f3a-dante-123", true},
		{tmp, "rl4242-0f3a-inet", false},
	}
	for _, tt := range tests {
		if got := tt.re.MatchString(tt.name); got != tt.want {
			t.Errorf("%s matches %q = %v, want %v", tt.re, tt.name, got, tt.want)
		}
	}
}

func TestTailBuffer(t *testing.T) {
	b := &TailBuffer{Max: 8}
	for _, s := range []string{"abc", "defgh", "ijk"} {
		if _, err := b.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := b.String(), "defghijk"; got != want {
		t.Errorf("tail = %q, want %q", got, want)
	}
}

func TestRecordIsBounded(t *testing.T) {
	var r record[int]
	for i := 0; i < maxRecords+10; i++ {
		r.add(i)
	}
	got := r.snapshot()
	if len(got) > maxRecords || got[len(got)-1] != maxRecords+9 {
		t.Errorf("record holds %d items ending %d, want at most %d ending %d", len(got), got[len(got)-1], maxRecords, maxRecords+9)
	}
	r.reset()
	if got := r.snapshot(); len(got) != 0 {
		t.Errorf("after reset: %d items", len(got))
	}
}
