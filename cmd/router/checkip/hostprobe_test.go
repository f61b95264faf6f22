package checkip

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hostPorts returns a loopback port something listens on (open: the system completes a
// probe's connection in the listener's backlog; nothing need accept it) and one nothing
// listens on (closed: a listener opened and closed again).
func hostPorts(t *testing.T) (open, closed uint16) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	gone, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := gone.Addr().(*net.TCPAddr).Port
	gone.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port), uint16(closedPort)
}

func hostOptions(ports ...uint16) Options {
	o := quiet("http://127.0.0.1:1/") // the exit check fails fast: nothing listens on port 1
	o.HostProbe = true
	o.HostPorts = ports
	return o
}

func loopbackHost(why string) func() ([]Target, []netip.Addr) {
	return func() ([]Target, []netip.Addr) {
		return []Target{{Addr: mustAddr("127.0.0.1"), Why: why}}, []netip.Addr{mustAddr("10.0.2.15")}
	}
}

// TestHostProbeOpenAndClosed: an open host port is reported **open** and fails the run; a
// closed one is refused.
func TestHostProbeOpenAndClosed(t *testing.T) {
	open, closed := hostPorts(t)
	d, _ := deps()
	d.HostTargets = loopbackHost("default gateway")
	rep := run(t, hostOptions(open, closed), d)
	if rep.Host.Status != Fail || rep.ExitCode() != ExitFail {
		t.Fatalf("host = %v %q, exit %d; want fail, 1", rep.Host.Status, rep.Host.Detail, rep.ExitCode())
	}
	states := map[uint16]PortState{}
	for _, p := range rep.Host.Probes {
		states[p.Addr.Port()] = p.State
	}
	if states[open] != PortOpen || states[closed] != PortRefused {
		t.Errorf("states %v, want %d open and %d refused", states, open, closed)
	}
	if got := rep.Host.Open(); len(got) != 1 || got[0].Addr.Port() != open {
		t.Errorf("open %v", got)
	}
	var b bytes.Buffer
	if err := WriteText(&b, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"✗ host  1 of 2 host ports on 1 addresses are **open** to the guest: 127.0.0.1:" + strconv.Itoa(int(open)),
		"127.0.0.1 (default gateway): **open** " + strconv.Itoa(int(open)) + "; refused " + strconv.Itoa(int(closed)),
		"verdict: FAIL (host)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := WriteJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	var j struct {
		Host struct {
			Status string
			Probes []struct{ Address, State string }
		}
	}
	if err := json.Unmarshal(b.Bytes(), &j); err != nil || j.Host.Status != "fail" || len(j.Host.Probes) != 2 {
		t.Errorf("json %v: %s", err, b.String())
	}
}

// TestHostProbeAllowed: the forwards and inbounds the guest may reach (--allow, the --model
// server) answer without a finding; the same port elsewhere is still one.
func TestHostProbeAllowed(t *testing.T) {
	open, closed := hostPorts(t)
	for _, tc := range []struct {
		name  string
		allow []Allowed
		model string
		want  Status
	}{
		{"allow addr:port", []Allowed{{Addr: mustAddr("127.0.0.1"), Port: open}}, "", Pass},
		{"allow :port", []Allowed{{Port: open}}, "", Pass},
		{"allow another address", []Allowed{{Addr: mustAddr("127.0.0.2"), Port: open}}, "", Fail},
		{"model", nil, "127.0.0.1:" + strconv.Itoa(int(open)), Pass},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := deps()
			d.HostTargets = loopbackHost("gateway")
			o := hostOptions(open, closed)
			o.Allow = tc.allow
			o.Model = tc.model
			rep := run(t, o, d)
			if rep.Host.Status != tc.want {
				t.Errorf("host = %v %q, want %v", rep.Host.Status, rep.Host.Detail, tc.want)
			}
			if tc.want == Pass && !strings.Contains(rep.Host.Detail, "but the allowed 127.0.0.1:"+strconv.Itoa(int(open))) {
				t.Errorf("detail %q does not name the allowed endpoint", rep.Host.Detail)
			}
		})
	}
}

// silentDialer never answers: every connect waits for its deadline (a silent drop).
type silentDialer struct{}

func (silentDialer) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestHostProbeNoAnswer: silent ports are "no answer", the probe passes, and the whole run
// is bounded by a few timeouts however many connects it makes.
func TestHostProbeNoAnswer(t *testing.T) {
	o := hostOptions()
	o.Timeout = 200 * time.Millisecond
	d := Deps{Dialer: silentDialer{}, Resolver: fakeResolver{}, HostTargets: func() ([]Target, []netip.Addr) {
		return []Target{{Addr: mustAddr("10.0.2.2"), Why: "default gateway"}, {Addr: mustAddr("192.168.56.1"), Why: "first address of 192.168.56.0/24"},
			{Addr: mustAddr("10.0.2.15"), Why: "resolver"}, {Addr: MetadataAddr, Why: "metadata service", Ports: []uint16{80}}}, []netip.Addr{mustAddr("10.0.2.15")}
	}}
	start := time.Now()
	rep, err := Run(context.Background(), o, d)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("took %v", el)
	}
	if want := 2*len(DefaultHostPorts()) + 1; len(rep.Host.Probes) != want {
		t.Errorf("%d probes, want %d (two addresses on the default ports, the metadata service on 80; the guest's own left out)", len(rep.Host.Probes), want)
	}
	for _, p := range rep.Host.Probes {
		if p.State != PortNoAnswer {
			t.Errorf("%v: %v", p.Addr, p.State)
		}
	}
	if rep.Host.Status != Pass {
		t.Errorf("host = %v %q", rep.Host.Status, rep.Host.Detail)
	}
}

func TestHostProbeCLI(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"--allow", "10.0.2.2:47831"}, &out, &errOut, Deps{}); code != ExitUsage || !strings.Contains(errOut.String(), "need --host-probe") {
		t.Errorf("exit %d: %s", code, errOut.String())
	}
	for _, bad := range [][]string{{"--host-probe", "--allow", "host:80"}, {"--host-probe", "--allow", "10.0.2.2"}, {"--host-probe", "--host-port", "0"}, {"--host-probe", "--host", "x"}} {
		errOut.Reset()
		if code := Main(context.Background(), bad, &out, &errOut, Deps{}); code != ExitUsage {
			t.Errorf("%v: exit %d", bad, code)
		}
	}
	opts, _, err := parseArgs([]string{"--host-probe", "--allow", ":1080", "--allow", "[fe80::1%eth0]:47831", "--host", "192.168.56.1", "--host-port", "22"}, &errOut)
	if err != nil || !opts.HostProbe || len(opts.Allow) != 2 || opts.Allow[0].String() != ":1080" || opts.Allow[1].String() != "[fe80::1]:47831" || len(opts.Hosts) != 1 || len(opts.HostPorts) != 1 {
		t.Errorf("%+v %v", opts, err)
	}
	if !strings.Contains(Help(), "--host-probe") || !strings.Contains(Help(), "22, 445, 1080") {
		t.Error("help does not document the host probe")
	}
}

func TestHostAddrParsers(t *testing.T) {
	route := "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
		"eth0\t00000000\t0202000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n" +
		"eth0\t0002000A\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n"
	if got := ParseProcRoute([]byte(route)); len(got) != 1 || got[0] != mustAddr("10.0.2.2") {
		t.Errorf("route: %v", got)
	}
	v6 := "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000002 00000400 00000001 00000000 00450003 eth0\n" +
		"fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001 eth0\n"
	if got := ParseProcIPv6Route([]byte(v6)); len(got) != 1 || got[0].String() != "fe80::2%eth0" {
		t.Errorf("ipv6_route: %v", got)
	}
	if got := ParseResolvConf([]byte("# x\nnameserver 10.0.2.3\nnameserver 127.0.0.53\nsearch lan\n")); len(got) != 1 || got[0] != mustAddr("10.0.2.3") {
		t.Errorf("resolv.conf: %v", got)
	}
	ts := SubnetTargets([]netip.Prefix{netip.MustParsePrefix("192.168.56.101/24"), netip.MustParsePrefix("192.168.56.1/24"), netip.MustParsePrefix("169.254.3.4/16"), netip.MustParsePrefix("fd00::5/64"), netip.MustParsePrefix("10.1.2.3/32")})
	if len(ts) != 1 || ts[0].Addr != mustAddr("192.168.56.1") || ts[0].Why != "first address of 192.168.56.0/24" {
		t.Errorf("subnets: %+v", ts)
	}
}
