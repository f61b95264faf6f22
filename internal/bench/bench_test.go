package bench

import (
	"context"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/upstream/socks5/socks5test"
)

// Loopback tests: the sink and its clients, the /proc parsers and the statistics.

func startSink(t *testing.T) (*Sink, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewSink()
	s.ReadTimeout = 10 * time.Second
	go s.Serve(ln)
	t.Cleanup(func() { ln.Close() })
	return s, ln.Addr().String()
}

func TestGet(t *testing.T) {
	_, addr := startSink(t)
	for _, n := range []int64{0, 1, sinkChunk + 7, 3 << 20} {
		res, err := Get(context.Background(), Dialer{}, addr, n)
		if err != nil {
			t.Fatalf("get %d: %v", n, err)
		}
		if got, want := res.Bytes, n; got != want {
			t.Errorf("get %d: got %d bytes", n, got)
		}
		if res.Seconds <= 0 {
			t.Errorf("get %d: %v seconds", n, res.Seconds)
		}
	}
}

func TestGetThroughSocks(t *testing.T) {
	_, addr := startSink(t)
	proxy := socks5test.Start(t, socks5test.Options{})
	d := Dialer{Socks: proxy.Addr.String(), Src: netip.MustParseAddr("127.0.0.1")}
	res, err := Get(context.Background(), d, addr, 1<<20)
	if err != nil || res.Bytes != 1<<20 {
		t.Fatalf("got %+v, %v; want 1 MiB", res, err)
	}
}

func TestRate(t *testing.T) {
	_, addr := startSink(t)
	res := Rate(context.Background(), Dialer{}, addr, 200, 8, 1024)
	if res.Count != 200 || res.Errors != 0 {
		t.Fatalf("got %+v, want 200 connections without error", res)
	}
	if !(0 < res.P50 && res.P50 <= res.P90 && res.P90 <= res.P99 && res.P99 <= res.Max) {
		t.Errorf("percentiles out of order: %+v", res)
	}
	// A dead target: every connection fails and is counted.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	res = Rate(context.Background(), Dialer{Timeout: time.Second}, deadAddr, 10, 2, 1024)
	if res.Errors != 10 || res.FirstError == "" {
		t.Errorf("dead target: got %+v, want 10 errors", res)
	}
}

func TestIdleParksAtTheSink(t *testing.T) {
	s, addr := startSink(t)
	set, err := Idle(context.Background(), Dialer{}, addr, 50, 8)
	if err != nil {
		t.Fatal(err)
	}
	dial := func(network, a string) (net.Conn, error) { return net.Dial(network, a) }
	_ = wait.Poll(5*time.Second, func() bool { return s.Parked() >= 50 }) // Stat says below
	if got, err := Stat(dial, addr); err != nil || got != 50 {
		t.Fatalf("stat = %d, %v; want 50 parked", got, err)
	}
	if set.Len() != 50 {
		t.Errorf("Len = %d", set.Len())
	}
	set.Close()
	_ = wait.Poll(5*time.Second, func() bool { return s.Parked() == 0 })
	if got := s.Parked(); got != 0 {
		t.Errorf("after Close: %d parked", got)
	}
}

func TestSinkRefusesGarbage(t *testing.T) {
	_, addr := startSink(t)
	for _, req := range []string{"PUT 5\n", "GET -1\n", "GET x\n", string(make([]byte, 100))} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte(req))
		n, _ := c.Read(make([]byte, 16))
		c.Close()
		if n != 0 {
			t.Errorf("request %q: got %d bytes, want none", req, n)
		}
	}
}

func TestParseStatCPU(t *testing.T) {
	line := "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 7 3 20 0 1 0 100 1000 10 18446744073709551615\n"
	got, err := parseStatCPU([]byte(line))
	if want := 210 * clockTick; err != nil || got != want {
		t.Errorf("got %v, %v; want %v", got, err, want)
	}
	if got := parsePPID([]byte(line)); got != 1 {
		t.Errorf("ppid = %d, want 1", got)
	}
	if _, err := parseStatCPU([]byte("1 (x) S 1 2")); err == nil {
		t.Error("short line: no error")
	}
}

func TestParseMachineCPU(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	got, err := parseMachineCPU([]byte("cpu  100 5 20 999 7 1 2 3 4 0\ncpu0 1 2 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := MachineCPU{User: 100 * clockTick, Nice: 5 * clockTick, System: 20 * clockTick, Idle: 999 * clockTick,
		IOWait: 7 * clockTick, IRQ: 1 * clockTick, SoftIRQ: 2 * clockTick, Steal: 3 * clockTick}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	// Busy leaves out idle and iowait; guest is inside user already.
	if b := got.Busy(); b != 131*clockTick {
		t.Errorf("Busy = %v, want %v", b, 131*clockTick)
	}
	// An old kernel's line without steal is refused rather than read short.
	for _, bad := range []string{"", "cpu 1 2 3", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3 4 5 6 7 x", "cpu 1 2 3 4 5 6 7 -1", "cpu 1 2 3 4 5 6 7 99999999999999999"} {
		if _, err := parseMachineCPU([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestMachineCPUDelta(t *testing.T) {
	before := MachineCPU{User: 10, Nice: 1, System: 5, Idle: 100, IOWait: 9, IRQ: 1, SoftIRQ: 2, Steal: 0}
	after := MachineCPU{User: 40, Nice: 1, System: 25, Idle: 150, IOWait: 8, IRQ: 2, SoftIRQ: 12, Steal: 1}
	d := after.Sub(before)
	want := MachineCPU{User: 30, System: 20, Idle: 50, IOWait: -1, IRQ: 1, SoftIRQ: 10, Steal: 1}
	if d != want {
		t.Errorf("Sub = %+v, want %+v", d, want)
	}
	// The busy delta is the delta of busy: softirq and steal count, iowait running back does not.
	if got := d.Busy(); got != 62 || got != after.Busy()-before.Busy() {
		t.Errorf("Busy of the delta = %v, want 62", got)
	}
}

func TestParseMapType(t *testing.T) {
	fdinfo := "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nmap_type:\t15\nkey_size:\t4\nvalue_size:\t4\nmax_entries:\t65535\n"
	if typ, ok := parseMapType([]byte(fdinfo)); !ok || typ != 15 {
		t.Errorf("got %d, %v; want 15", typ, ok)
	}
	if _, ok := parseMapType([]byte("pos:\t0\nflags:\t02\n")); ok {
		t.Error("no map_type line: ok")
	}
}

func TestProcFSOnAFakeTree(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "7", "fd"), 0o755))
	must(os.WriteFile(filepath.Join(root, "7", "status"), []byte("Name:\tx\nVmHWM:\t  900 kB\nVmRSS:\t  800 kB\nThreads:\t3\n"), 0o644))
	must(os.Symlink("pipe:[1]", filepath.Join(root, "7", "fd", "0")))
	must(os.Symlink("socket:[2]", filepath.Join(root, "7", "fd", "1")))
	must(os.Symlink("/dev/null", filepath.Join(root, "7", "fd", "2")))
	must(os.WriteFile(filepath.Join(root, "stat"), []byte("cpu  1 0 1 0 0 0 3 0 0 0\n"), 0o644))
	// Two eBPF maps, one of them a sockhash; a bpf program is not a map.
	must(os.MkdirAll(filepath.Join(root, "7", "fdinfo"), 0o755))
	must(os.Symlink("anon_inode:bpf-map", filepath.Join(root, "7", "fd", "3")))
	must(os.Symlink("anon_inode:bpf-map", filepath.Join(root, "7", "fd", "4")))
	must(os.Symlink("anon_inode:bpf-prog", filepath.Join(root, "7", "fd", "5")))
	must(os.WriteFile(filepath.Join(root, "7", "fdinfo", "3"), []byte("pos:\t0\nmap_type:\t18\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "7", "fdinfo", "4"), []byte("pos:\t0\nmap_type:\t2\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "7", "fdinfo", "5"), []byte("pos:\t0\nprog_type:\t15\n"), 0o644))
	p := ProcFS{Root: root}
	m, err := p.Mem(7)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Mem{RSSKiB: 800, HWMKiB: 900, Threads: 3, FDs: 6, Pipes: 1, Sockets: 1}); m != want {
		t.Errorf("Mem = %+v, want %+v", m, want)
	}
	if got, err := p.Machine(); err != nil || got.SoftIRQ != 3*clockTick || got.Busy() != 5*clockTick {
		t.Errorf("Machine = %+v, %v", got, err)
	}
	if n, err := p.SockMaps(7); err != nil || n != 1 {
		t.Errorf("SockMaps = %d, %v; want 1", n, err)
	}
}

func TestStats(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"median odd", Median([]float64{3, 1, 2}), 2},
		{"median even", Median([]float64{4, 1, 2, 3}), 2.5},
		{"median skips NaN", Median([]float64{nan, 5, nan}), 5},
		{"paired ratio", PairedRatio([]float64{2, 9, 4}, []float64{1, 3, 4}), 2},
		{"paired ratio skips missing rounds", PairedRatio([]float64{2, nan, 6}, []float64{1, 1, 0}), 2},
		{"paired diff", PairedDiff([]float64{10, 20, 30}, []float64{1, 2, 3}), 18},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("median of nothing is not NaN")
	}
	if lo, hi := Range([]float64{3, nan, 1, 2}); lo != 1 || hi != 3 {
		t.Errorf("Range = %v, %v", lo, hi)
	}
	if got, want := SpreadOf([]float64{1.2, nan, 1.0, 1.5}), (Spread{Median: 1.2, Min: 1.0, Max: 1.5, N: 3}); got != want {
		t.Errorf("SpreadOf = %+v, want %+v", got, want)
	}
	if s := SpreadOf([]float64{nan}); s.N != 0 || !math.IsNaN(s.Median) || !math.IsNaN(s.Min) || !math.IsNaN(s.Max) {
		t.Errorf("SpreadOf(NaN) = %+v", s)
	}
	// Per-round ratios keep the rounds in place; a missing side or a zero base is NaN.
	r := PairedRatios([]float64{2, nan, 6, 3}, []float64{1, 1, 0, 2, 9})
	if len(r) != 4 || r[0] != 2 || !math.IsNaN(r[1]) || !math.IsNaN(r[2]) || r[3] != 1.5 {
		t.Errorf("PairedRatios = %v", r)
	}
	d := PairedDiffs([]float64{10, nan, 30}, []float64{1, 2, 3})
	if len(d) != 3 || d[0] != 9 || !math.IsNaN(d[1]) || d[2] != 27 {
		t.Errorf("PairedDiffs = %v", d)
	}
}

// TestRateWithHost: the sink answers the HTTP/1.1 form of a request as the line.
func TestRateWithHost(t *testing.T) {
	_, addr := startSink(t)
	res := RateRequest(context.Background(), Dialer{}, addr, Request(1000, "sink.test"), 20, 4, 1000)
	if res.Errors != 0 || res.Count != 20 {
		t.Fatalf("%+v", res)
	}
}

func startFileServer(t *testing.T) (addr string, ca []byte) {
	t.Helper()
	cert, key, err := SelfSigned("files.test", netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewFileServer(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return ln.Addr().String(), cert
}

// TestFetch: every file arrives whole over HTTPS, directly and through SOCKS5, on a new
// connection each (no keep-alive); a client that trusts another certificate fails every
// fetch.
func TestFetch(t *testing.T) {
	addr, ca := startFileServer(t)
	sizes := FetchSizes(60, 2<<10, 200<<10, 1)
	var want int64
	for _, n := range sizes {
		want += int64(n)
	}
	proxy := socks5test.Start(t, socks5test.Options{})
	for _, d := range []Dialer{{}, {Socks: proxy.Addr.String()}} {
		res, err := Fetch(context.Background(), d, addr, "files.test", ca, sizes, 4)
		if err != nil || res.Errors != 0 || res.Count != 60 || res.Bytes != want {
			t.Errorf("socks %q: %+v, %v; want 60 fetches, %d bytes", d.Socks, res, err, want)
		}
		if !(res.P50 > 0 && res.P99 >= res.P50 && res.Seconds > 0) {
			t.Errorf("socks %q: figures %+v", d.Socks, res)
		}
	}
	other, _, err := SelfSigned("files.test")
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := Fetch(context.Background(), Dialer{}, addr, "files.test", other, sizes[:3], 1); res.Errors != 3 {
		t.Errorf("an untrusted server: %+v, want 3 errors", res)
	}
}

// TestFetchSizes: the same seed draws the same sizes, within the bounds, small ones more
// often than large ones.
func TestFetchSizes(t *testing.T) {
	a, b := FetchSizes(1000, 2<<10, 200<<10, 7), FetchSizes(1000, 2<<10, 200<<10, 7)
	small := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("size %d: %d and %d from the same seed", i, a[i], b[i])
		}
		if a[i] < 2<<10 || a[i] > 200<<10 {
			t.Fatalf("size %d: %d out of bounds", i, a[i])
		}
		if a[i] < 20<<10 {
			small++
		}
	}
	if small < 400 || small > 600 {
		t.Errorf("%d of 1000 sizes under 20 KiB; log-uniform wants about half", small)
	}
}

// TestStream: every stream's events arrive, with their gaps about the server's.
func TestStream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go StreamServer{Events: 10, Gap: 2 * time.Millisecond}.Serve(ln)
	res, err := Stream(context.Background(), Dialer{}, ln.Addr().String(), 3)
	if err != nil {
		t.Fatal(err)
	}
	if res.Streams != 3 || res.Events != 10 {
		t.Errorf("got %+v, want 3 streams of 10 events", res)
	}
	if res.GapP50 < 1500 || res.TTFBP50 <= 0 || res.LatP50 <= 0 || res.LatP99 < res.LatP50 {
		t.Errorf("figures %+v: want gaps of about 2000 µs", res)
	}
}
