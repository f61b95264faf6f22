package checkip

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRunEcho(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"plain", plainEcho},
		{"json", jsonEcho},
		{"trace", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte("fl=1\nh=x\nip=" + remoteIP(r) + "\nts=2\n"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, tt.handler)
			d, _ := deps()
			rep := run(t, quiet(s.URL), d)
			if got, want := rep.Exit.Address, mustAddr("127.0.0.1"); got != want {
				t.Errorf("exit address = %v, want %v (detail %q)", got, want, rep.Exit.Detail)
			}
			if rep.Exit.Status != Pass || rep.Exit.URL != s.URL || rep.ExitCode() != ExitOK {
				t.Errorf("got status %v url %q code %d, want pass %q 0", rep.Exit.Status, rep.Exit.URL, rep.ExitCode(), s.URL)
			}
			if !strings.Contains(rep.Exit.Detail, "127.0.0.1 via "+s.URL) {
				t.Errorf("detail %q does not name the address and endpoint", rep.Exit.Detail)
			}
		})
	}
}

func TestRunEchoTriesInOrder(t *testing.T) {
	down := newServer(t, fixedAnswer(http.StatusServiceUnavailable, "try later"))
	garbage := newServer(t, fixedAnswer(http.StatusOK, "<html>hello</html>"))
	big := newServer(t, huge(10<<20))
	good := newServer(t, plainEcho)
	after := newServer(t, plainEcho)
	d, _ := deps()
	rep := run(t, quiet(down.URL, garbage.URL, big.URL, good.URL, after.URL), d)

	if rep.Exit.Status != Pass || rep.Exit.URL != good.URL {
		t.Fatalf("exit = %v via %q, want pass via %q", rep.Exit.Status, rep.Exit.URL, good.URL)
	}
	var gotURLs []string
	for _, a := range rep.Exit.Attempts {
		gotURLs = append(gotURLs, a.URL)
	}
	if want := []string{down.URL, garbage.URL, big.URL, good.URL}; !slices.Equal(gotURLs, want) {
		t.Errorf("attempts = %q, want %q", gotURLs, want)
	}
	wantErr := []string{"503", "not an address", "larger than 65536 bytes", ""}
	for i, a := range rep.Exit.Attempts {
		if !strings.Contains(a.Err, wantErr[i]) || (wantErr[i] == "") != (a.Err == "") {
			t.Errorf("attempt %d error = %q, want it to contain %q", i, a.Err, wantErr[i])
		}
	}
	if n := after.hits.Load(); n != 0 {
		t.Errorf("the endpoint after the one that answered got %d requests, want 0", n)
	}
	if !strings.HasSuffix(rep.Exit.Detail, "127.0.0.1 via "+good.URL+" (after 3 endpoints failed)") {
		t.Errorf("detail %q does not say that earlier endpoints failed", rep.Exit.Detail)
	}
}

func TestRunExitCodes(t *testing.T) {
	echo := newServer(t, plainEcho)
	broken := newServer(t, fixedAnswer(http.StatusInternalServerError, ""))
	tests := []struct {
		name       string
		echo       string
		expect     string
		expectNot  string
		model      string // "" none, "bad" an unanswered model
		wantCode   int
		wantStatus Status
	}{
		{"no expectation", echo.URL, "", "", "", ExitOK, Pass},
		{"expect matches", echo.URL, "127.0.0.1", "", "", ExitOK, Pass},
		{"expect mapped form matches", echo.URL, "::ffff:127.0.0.1", "", "", ExitOK, Pass},
		{"expect differs", echo.URL, "198.51.100.7", "", "", ExitFail, Fail},
		{"expect-not matches", echo.URL, "", "127.0.0.1", "", ExitFail, Fail},
		{"expect-not differs", echo.URL, "", "192.0.2.1", "", ExitOK, Pass},
		{"both fine", echo.URL, "127.0.0.1", "192.0.2.1", "", ExitOK, Pass},
		{"nothing answered", broken.URL, "127.0.0.1", "", "", ExitNoAnswer, Unknown},
		{"nothing answered and model fails", broken.URL, "", "", "bad", ExitFail, Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := quiet(tt.echo)
			if tt.expect != "" {
				opts.Expect = mustAddr(tt.expect)
			}
			if tt.expectNot != "" {
				opts.ExpectNot = mustAddr(tt.expectNot)
			}
			if tt.model == "bad" {
				opts.Model = broken.URL
			}
			d, _ := deps()
			rep := run(t, opts, d)
			if got := rep.ExitCode(); got != tt.wantCode {
				t.Errorf("ExitCode() = %d, want %d (exit: %s)", got, tt.wantCode, rep.Exit.Detail)
			}
			if rep.Exit.Status != tt.wantStatus {
				t.Errorf("exit status = %v, want %v (%s)", rep.Exit.Status, tt.wantStatus, rep.Exit.Detail)
			}
		})
	}
}

func TestRunTimeoutIsBounded(t *testing.T) {
	slow := newServer(t, hang(t))
	good := newServer(t, jsonEcho)
	d, _ := deps()
	opts := quiet(slow.URL, slow.URL, good.URL)
	opts.Timeout = 200 * time.Millisecond
	start := time.Now()
	rep := run(t, opts, d)
	took := time.Since(start)
	if rep.Exit.Status != Pass || rep.Exit.URL != good.URL {
		t.Errorf("exit = %v via %q, want pass via the third endpoint", rep.Exit.Status, rep.Exit.URL)
	}
	if got := rep.Exit.Attempts[0].Err; got != "no answer within 200ms" {
		t.Errorf("first attempt error = %q, want %q", got, "no answer within 200ms")
	}
	if took > 3*time.Second {
		t.Errorf("run took %v with two hanging endpoints and a 200ms timeout", took)
	}
}

func TestRunCancelled(t *testing.T) {
	slow := newServer(t, hang(t))
	d, _ := deps()
	opts := quiet(slow.URL, slow.URL)
	opts.Timeout = 10 * time.Second
	udp := udpUsable(t)
	if udp {
		opts.NoUDP = false
		opts.STUN = []string{udpServer(t, func([]byte, netip.AddrPort) []byte { return nil })}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	rep, err := Run(ctx, opts, d)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("a cancelled run took %v", took)
	}
	if rep.Exit.Status != Unknown || udp && rep.UDP.Status != Unknown {
		t.Errorf("exit %v (%s), udp %v (%s); want both unknown", rep.Exit.Status, rep.Exit.Detail, rep.UDP.Status, rep.UDP.Detail)
	}
	if rep.ExitCode() != ExitNoAnswer {
		t.Errorf("ExitCode() = %d, want %d", rep.ExitCode(), ExitNoAnswer)
	}
}

func TestRunModel(t *testing.T) {
	openai := `{"object":"list","data":[{"id":"qwen2.5-coder-32b-instruct","object":"model"},{"id":"nomic-embed"}]}`
	tests := []struct {
		name       string
		path, body string // what the server serves
		model      string // --model, relative to the server's URL
		wantStatus Status
		wantIDs    []string
		wantDetail string
	}{
		{"base url", "/v1/models", openai, "", Pass, []string{"qwen2.5-coder-32b-instruct", "nomic-embed"}, "qwen2.5-coder-32b-instruct, nomic-embed in "},
		{"v1 url", "/v1/models", openai, "/v1", Pass, []string{"qwen2.5-coder-32b-instruct", "nomic-embed"}, "/v1/models"},
		{"full url", "/v1/models", openai, "/v1/models", Pass, []string{"qwen2.5-coder-32b-instruct", "nomic-embed"}, ""},
		{"ollama tags", "/api/tags", `{"models":[{"name":"llama3:8b"}]}`, "/api/tags", Pass, []string{"llama3:8b"}, "llama3:8b"},
		{"many ids", "/v1/models", `{"data":[{"id":"a"},{"id":"b"},{"id":"c"},{"id":"d"},{"id":"e"},{"id":"f"},{"id":"g"}]}`, "", Pass,
			[]string{"a", "b", "c", "d", "e", "f", "g"}, "a, b, c, d, e and 2 more in "},
		{"wrong path", "/other", openai, "", Fail, nil, `"404 Not Found"`},
		{"no models", "/v1/models", `{"data":[]}`, "", Fail, nil, "lists no model"},
		{"garbage", "/v1/models", `<html>`, "", Fail, nil, "not json"},
		{"escape sequences", "/v1/models", `{"data":[{"id":"evil\u001b[2J"}]}`, "", Pass, []string{"evil\x1b[2J"}, "evil\uFFFD[2J"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := modelServer(t, tt.path, tt.body)
			echo := newServer(t, plainEcho)
			opts := quiet(echo.URL)
			opts.Model = m.URL + tt.model
			d, _ := deps()
			rep := run(t, opts, d)
			got := rep.Model
			if got.Status != tt.wantStatus || !slices.Equal(got.IDs, tt.wantIDs) {
				t.Errorf("model = %v %q, want %v %q (detail %q)", got.Status, got.IDs, tt.wantStatus, tt.wantIDs, got.Detail)
			}
			if !strings.Contains(got.Detail, tt.wantDetail) {
				t.Errorf("detail %q does not contain %q", got.Detail, tt.wantDetail)
			}
			if got.Elapsed <= 0 || got.URL == "" {
				t.Errorf("elapsed %v, url %q: want both set", got.Elapsed, got.URL)
			}
			wantCode := ExitOK
			if tt.wantStatus == Fail {
				wantCode = ExitFail
			}
			if rep.ExitCode() != wantCode {
				t.Errorf("ExitCode() = %d, want %d", rep.ExitCode(), wantCode)
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens there now
		echo := newServer(t, plainEcho)
		opts := quiet(echo.URL)
		opts.Model = addr
		d, _ := deps()
		rep := run(t, opts, d)
		if rep.Model.Status != Fail || rep.ExitCode() != ExitFail {
			t.Errorf("model %v code %d, want fail 1 (%s)", rep.Model.Status, rep.ExitCode(), rep.Model.Detail)
		}
	})
}

func TestRunDNS(t *testing.T) {
	const name = "whoami.test"
	echo := newServer(t, plainEcho) // exit address 127.0.0.1
	tests := []struct {
		name       string
		addrs      []string
		txt        []string
		expect     string
		expectNot  string
		wantStatus Status
		wantDetail string
	}{
		{"leak to home", []string{"192.0.2.1"}, nil, "", "192.0.2.1", Fail, "the --expect-not address: DNS leaks"},
		{"egress is expect", []string{"198.51.100.7"}, nil, "198.51.100.7", "", Pass, "leave through the exit"},
		{"egress is the exit", []string{"127.0.0.1"}, nil, "", "", Pass, "leave through the exit"},
		{"fake ip", []string{"198.18.0.5"}, nil, "", "192.0.2.1", Pass, "answered locally"},
		{"private", []string{"10.0.2.3"}, nil, "", "", Pass, "answered locally"},
		{"other public", []string{"203.0.113.53"}, nil, "198.51.100.7", "192.0.2.1", Fail, "another path"},
		{"google txt", nil, []string{"203.0.113.53"}, "198.51.100.7", "", Fail, "203.0.113.53"},
		{"txt edns", nil, []string{"edns0-client-subnet 192.0.2.0/24", "198.51.100.7"}, "198.51.100.7", "", Pass, "198.51.100.7"},
		{"mixed: one leaks", []string{"198.51.100.7", "192.0.2.1"}, nil, "198.51.100.7", "192.0.2.1", Fail, "DNS leaks"},
		{"aaaa leak", []string{"2001:db8::1"}, nil, "198.51.100.7", "2001:db8::1", Fail, "DNS leaks"},
		{"not found", nil, nil, "", "", Fail, "did not resolve"},
		{"txt without address", nil, []string{"hello"}, "", "", Fail, "holds no address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := fakeResolver{addrs: map[string][]netip.Addr{}, txt: map[string][]string{}}
			for _, a := range tt.addrs {
				res.addrs[name] = append(res.addrs[name], mustAddr(a))
			}
			if tt.txt != nil {
				res.txt[name] = tt.txt
			}
			opts := quiet(echo.URL)
			opts.DNSWhoami = name
			if tt.expect != "" {
				opts.Expect = mustAddr(tt.expect)
			}
			if tt.expectNot != "" {
				opts.ExpectNot = mustAddr(tt.expectNot)
			}
			d, _ := deps()
			d.Resolver = res
			rep := run(t, opts, d)
			if rep.DNS.Status != tt.wantStatus || !strings.Contains(rep.DNS.Detail, tt.wantDetail) {
				t.Errorf("dns = %v %q, want %v containing %q", rep.DNS.Status, rep.DNS.Detail, tt.wantStatus, tt.wantDetail)
			}
		})
	}
	t.Run("slow resolver is bounded", func(t *testing.T) {
		opts := quiet(echo.URL)
		opts.DNSWhoami = name
		opts.Timeout = 150 * time.Millisecond
		d, _ := deps()
		d.Resolver = fakeResolver{delay: time.Minute}
		start := time.Now()
		rep := run(t, opts, d)
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("took %v", took)
		}
		if rep.DNS.Status != Fail || !strings.Contains(rep.DNS.Detail, "no answer within 150ms") {
			t.Errorf("dns = %v %q, want a timeout failure", rep.DNS.Status, rep.DNS.Detail)
		}
	})
}

func TestRunUDP(t *testing.T) {
	if !udpUsable(t) {
		assertUDPUndecided(t)
		return
	}
	echo := newServer(t, plainEcho) // exit 127.0.0.1
	silent := func([]byte, netip.AddrPort) []byte { return nil }
	tests := []struct {
		name       string
		targets    func(t *testing.T) []string
		expectNot  string
		wantStatus Status
		wantDetail string
		wantMapped string
	}{
		{"silence", func(t *testing.T) []string { return []string{udpServer(t, silent)} }, "", Pass,
			"no answer from 1 STUN address within 300ms (silence only means nothing answered)", ""},
		{"stun sees another address", func(t *testing.T) []string {
			return []string{udpServer(t, stunAs(netip.MustParseAddrPort("192.0.2.1:40000")))}
		}, "", Fail, "UDP gets out directly: STUN 127.0.0.1:", "192.0.2.1:40000"},
		{"stun sees the home address", func(t *testing.T) []string {
			return []string{udpServer(t, stunAs(netip.MustParseAddrPort("192.0.2.1:40000")))}
		}, "192.0.2.1", Fail, "the --expect-not address", "192.0.2.1:40000"},
		{"stun sees the exit", func(t *testing.T) []string { return []string{udpServer(t, stunAs(netip.AddrPort{}))} }, "", Pass,
			"UDP goes through the exit", ""},
		{"plain udp echo", func(t *testing.T) []string {
			return []string{udpServer(t, func(b []byte, _ netip.AddrPort) []byte { return append([]byte(nil), b...) })}
		}, "", Fail, "replied with 20 bytes that are not STUN", ""},
		{"one silent, one answers", func(t *testing.T) []string {
			return []string{udpServer(t, silent), udpServer(t, stunAs(netip.MustParseAddrPort("192.0.2.1:1")))}
		}, "", Fail, "UDP gets out directly", "192.0.2.1:1"},
		{"closed port", func(t *testing.T) []string {
			pc, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatalf("listen: %v", err)
			}
			addr := pc.LocalAddr().String()
			pc.Close()
			return []string{addr}
		}, "", Pass, "", ""}, // "refused" on Linux; Windows ignores ICMP on UDP sockets: silence
		{"unresolvable", func(t *testing.T) []string { return []string{"stun.invalid:3478"} }, "", Unknown, "not probed", ""},
		{"no route", func(t *testing.T) []string { return []string{"192.0.2.10:3478"} }, "", Pass, "no route", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := quiet(echo.URL)
			opts.NoUDP = false
			opts.STUN = tt.targets(t)
			opts.Timeout = 300 * time.Millisecond
			if tt.expectNot != "" {
				opts.ExpectNot = mustAddr(tt.expectNot)
			}
			d, dialer := deps()
			start := time.Now()
			rep, err := Run(context.Background(), opts, d)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("took %v", took)
			}
			if tt.name != "no route" && len(dialer.Refused()) > 0 {
				t.Errorf("non-loopback dials: %q", dialer.Refused())
			}
			if rep.UDP.Status != tt.wantStatus || !strings.Contains(rep.UDP.Detail, tt.wantDetail) {
				t.Errorf("udp = %v %q, want %v containing %q", rep.UDP.Status, rep.UDP.Detail, tt.wantStatus, tt.wantDetail)
			}
			if got := addrPortString(rep.UDP.Mapped); tt.wantMapped != "" && got != tt.wantMapped {
				t.Errorf("mapped = %q, want %q", got, tt.wantMapped)
			}
		})
	}
}

func TestRunUDPRetransmits(t *testing.T) {
	if !udpUsable(t) {
		assertUDPUndecided(t)
		return
	}
	echo := newServer(t, plainEcho)
	n := 0 // only the server goroutine touches it
	target := udpServer(t, func(b []byte, from netip.AddrPort) []byte {
		if n++; n < 2 {
			return nil // the first request is "lost"
		}
		return stunAs(netip.MustParseAddrPort("192.0.2.1:2"))(b, from)
	})
	opts := quiet(echo.URL)
	opts.NoUDP = false
	opts.STUN = []string{target}
	d, _ := deps()
	rep := run(t, opts, d)
	if rep.UDP.Status != Fail || addrPortString(rep.UDP.Mapped) != "192.0.2.1:2" {
		t.Errorf("udp = %v %q mapped %v, want fail with 192.0.2.1:2", rep.UDP.Status, rep.UDP.Detail, rep.UDP.Mapped)
	}
}

func TestRunUDPReplyEndsTheWait(t *testing.T) {
	if !udpUsable(t) {
		assertUDPUndecided(t)
		return
	}
	echo := newServer(t, plainEcho)
	silent := func([]byte, netip.AddrPort) []byte { return nil }
	opts := quiet(echo.URL)
	opts.NoUDP = false
	opts.STUN = []string{udpServer(t, silent), udpServer(t, stunAs(netip.MustParseAddrPort("192.0.2.1:1")))}
	opts.Timeout = 5 * time.Second
	d, _ := deps()
	start := time.Now()
	rep := run(t, opts, d)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("a reply should end the wait; the run took %v with a %v timeout", took, opts.Timeout)
	}
	if rep.UDP.Status != Fail {
		t.Errorf("udp = %v %q, want fail", rep.UDP.Status, rep.UDP.Detail)
	}
}

func TestRunIPv6(t *testing.T) {
	echo := newServer(t, plainEcho) // over IPv4: exit 127.0.0.1
	// An IPv6 loopback echo server: what a direct IPv6 exit looks like from the guest.
	l6, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatalf("listen on [::1]: %v (the test needs IPv6 loopback)", err)
	}
	srv6 := &http.Server{Handler: http.HandlerFunc(plainEcho)}
	go srv6.Serve(l6)
	t.Cleanup(func() { srv6.Close() })
	url6 := "http://" + l6.Addr().String() + "/"
	// An IPv6 server that reports the exit address, as if IPv6 went through the proxy.
	l6b, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatalf("listen on [::1]: %v", err)
	}
	srv6b := &http.Server{Handler: fixedAnswer(http.StatusOK, "127.0.0.1\n")}
	go srv6b.Serve(l6b)
	t.Cleanup(func() { srv6b.Close() })
	url6b := "http://" + l6b.Addr().String() + "/"

	loop6 := netip.MustParseAddrPort("[::1]:9")
	udp := udpUsable(t) // the route lookup is a UDP connect
	tests := []struct {
		name       string
		route      netip.AddrPort // zero: the default, which the loopback dialer has no route for
		echo6      []string
		wantStatus Status
		wantDetail string
		wantRoute  bool
	}{
		{"no route", netip.AddrPort{}, []string{url6}, Pass, "no IPv6 route", false},
		{"direct ipv6 exit", loop6, []string{url6}, Fail, "IPv6 gets out directly: " + url6 + " saw ::1, not the exit", true},
		{"ipv6 through the exit", loop6, []string{url6b}, Pass, "IPv6 goes out as 127.0.0.1, the exit address", true},
		{"endpoint without ipv6", loop6, []string{echo.URL}, Unknown, "no echo endpoint has an IPv6 address", true},
		{"ipv6 endpoint down then up", loop6, []string{"http://[::1]:1/", url6}, Fail, "gets out directly", true},
		{"nothing answers", loop6, []string{"http://[::1]:1/"}, Pass, "but no echo endpoint answered over IPv6", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := quiet(echo.URL)
			opts.NoIPv6 = false
			opts.IPv6Route = tt.route
			opts.Echo6 = tt.echo6
			d, _ := deps()
			rep := run(t, opts, d)
			if rep.IPv6.Status != tt.wantStatus || !strings.Contains(rep.IPv6.Detail, tt.wantDetail) {
				t.Errorf("ipv6 = %v %q, want %v containing %q", rep.IPv6.Status, rep.IPv6.Detail, tt.wantStatus, tt.wantDetail)
			}
			if rep.IPv6.Route != (tt.wantRoute && udp) {
				t.Errorf("route = %v, want %v", rep.IPv6.Route, tt.wantRoute)
			}
		})
	}
	t.Run("with --expect, an exit that itself leaks over IPv6 fails both", func(t *testing.T) {
		opts := quiet(url6)
		opts.NoIPv6 = false
		opts.IPv6Route = loop6
		opts.Expect = mustAddr("198.51.100.7")
		d, _ := deps()
		rep := run(t, opts, d)
		if rep.Exit.Status != Fail || rep.IPv6.Status != Fail || !strings.Contains(rep.IPv6.Detail, "saw ::1, not the exit") {
			t.Errorf("exit %v, ipv6 %v %q; want both to fail", rep.Exit.Status, rep.IPv6.Status, rep.IPv6.Detail)
		}
	})
	t.Run("echo6 defaults to the echo list", func(t *testing.T) {
		opts := quiet(url6)
		opts.NoIPv6 = false
		opts.IPv6Route = loop6
		d, _ := deps()
		rep := run(t, opts, d)
		// Over the dual-stack path the exit is ::1 as well, so IPv6 "goes through the exit".
		if rep.IPv6.Status != Pass || rep.IPv6.URL != url6 {
			t.Errorf("ipv6 = %v %q via %q, want pass via %q", rep.IPv6.Status, rep.IPv6.Detail, rep.IPv6.URL, url6)
		}
	})
}

func TestRunInvalidOptions(t *testing.T) {
	tests := []struct {
		name string
		opts Options
	}{
		{"echo scheme", Options{Echo: []string{"ftp://example.test/"}}},
		{"echo no host", Options{Echo: []string{"http://"}}},
		{"echo6", Options{Echo6: []string{"gopher://x/"}}},
		{"model", Options{Model: "ftp://x"}},
		{"stun no port", Options{STUN: []string{"stun.test"}}},
		{"stun bad port", Options{STUN: []string{"stun.test:70000"}}},
		{"stun no host", Options{STUN: []string{":3478"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, dialer := deps()
			if _, err := Run(context.Background(), tt.opts, d); err == nil {
				t.Error("Run accepted invalid options")
			}
			if got := dialer.Refused(); len(got) > 0 {
				t.Errorf("Run dialed before validating: %q", got)
			}
		})
	}
}

func TestIsPublic(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"203.0.113.7", true}, {"8.8.8.8", true}, {"2001:db8::1", true}, {"2606:4700::1", true},
		{"10.0.2.3", false}, {"192.168.1.1", false}, {"172.16.0.1", false}, {"100.64.0.1", false},
		{"100.127.255.255", false}, {"100.128.0.1", true}, {"198.18.0.1", false}, {"198.19.255.1", false},
		{"198.20.0.1", true}, {"127.0.0.1", false}, {"169.254.1.1", false}, {"fd00::1", false},
		{"fe80::1", false}, {"::1", false}, {"::ffff:10.0.0.1", false}, {"::ffff:203.0.113.7", true},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			if got := isPublic(mustAddr(tt.addr)); got != tt.want {
				t.Errorf("isPublic(%s) = %v, want %v", tt.addr, got, tt.want)
			}
		})
	}
}

func TestRunEchoHTTPS(t *testing.T) {
	s := httptest.NewTLSServer(http.HandlerFunc(plainEcho))
	t.Cleanup(s.Close)
	t.Run("trusted", func(t *testing.T) {
		d, _ := deps()
		d.TLS = &tls.Config{RootCAs: s.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
		rep := run(t, quiet(s.URL), d)
		if rep.Exit.Status != Pass || rep.Exit.Address != mustAddr("127.0.0.1") {
			t.Errorf("exit = %v %q, want pass 127.0.0.1", rep.Exit.Status, rep.Exit.Detail)
		}
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		d, _ := deps()
		d.TLS = &tls.Config{RootCAs: x509.NewCertPool()}
		rep := run(t, quiet(s.URL), d)
		if rep.Exit.Status != Unknown || !strings.Contains(rep.Exit.Detail, "certificate") {
			t.Errorf("exit = %v %q, want unknown with a certificate error", rep.Exit.Status, rep.Exit.Detail)
		}
	})
}
