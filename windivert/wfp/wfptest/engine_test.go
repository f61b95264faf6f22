package wfptest

import (
	"errors"
	"net/netip"
	"sync"
	"testing"

	"github.com/agentcage/router/windivert/wfp"
)

var ns = wfp.Key{1, 2, 3}

func key(name string) wfp.Key { return wfp.NameKey(ns, name) }

const app = `C:\vm\vm.exe`

func flowTo(remote string) Flow {
	return Flow{Dir: Outbound, App: app, Proto: wfp.ProtoTCP, Local: netip.MustParseAddrPort("10.0.0.1:5000"), Remote: netip.MustParseAddrPort(remote)}
}

// setup adds a provider and sublayers "hi" (weight 200) and "lo" (weight 100).
func setup(t *testing.T, e *Engine) wfp.Session {
	t.Helper()
	s, err := e.Open(wfp.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.AddProvider(wfp.Provider{Key: key("p"), Name: "p", Persistent: true}))
	must(t, s.AddSublayer(wfp.Sublayer{Key: key("hi"), Provider: key("p"), Name: "hi", Weight: 200, Persistent: true}))
	must(t, s.AddSublayer(wfp.Sublayer{Key: key("lo"), Provider: key("p"), Name: "lo", Weight: 100, Persistent: true}))
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type rule struct {
	sub    string
	weight uint64
	action wfp.Action
	hard   bool
	conds  []wfp.Condition
}

func TestArbitration(t *testing.T) {
	any := []wfp.Condition(nil)
	port443 := []wfp.Condition{wfp.RemotePort(wfp.Port(443))}
	cases := []struct {
		name  string
		rules []rule
		flow  string
		want  wfp.Action
	}{
		{"nothing matches: permit", nil, "1.1.1.1:443", wfp.Permit},
		{"within a sublayer the heavier filter decides (permit)", []rule{{"lo", 5, wfp.Permit, false, port443}, {"lo", 1, wfp.Block, false, any}}, "1.1.1.1:443", wfp.Permit},
		{"within a sublayer the heavier filter decides (block)", []rule{{"lo", 1, wfp.Permit, false, port443}, {"lo", 5, wfp.Block, false, any}}, "1.1.1.1:443", wfp.Block},
		{"a soft permit above loses to a block below", []rule{{"hi", 1, wfp.Permit, false, any}, {"lo", 1, wfp.Block, false, any}}, "1.1.1.1:443", wfp.Block},
		{"a hard permit above beats a block below", []rule{{"hi", 1, wfp.Permit, true, any}, {"lo", 1, wfp.Block, false, any}}, "1.1.1.1:443", wfp.Permit},
		{"a block above is final over a hard permit below", []rule{{"hi", 1, wfp.Block, false, any}, {"lo", 1, wfp.Permit, true, any}}, "1.1.1.1:443", wfp.Block},
		{"a block above a soft permit", []rule{{"hi", 9, wfp.Block, false, any}, {"lo", 9, wfp.Permit, false, any}}, "1.1.1.1:443", wfp.Block},
		{"a non-matching heavier filter does not decide", []rule{{"lo", 9, wfp.Permit, false, port443}, {"lo", 1, wfp.Block, false, any}}, "1.1.1.1:80", wfp.Block},
		{"same field OR-ed", []rule{{"lo", 1, wfp.Block, false, []wfp.Condition{wfp.RemotePort(wfp.Port(80)), wfp.RemotePort(wfp.Port(443))}}}, "1.1.1.1:443", wfp.Block},
		{"different fields AND-ed", []rule{{"lo", 1, wfp.Block, false, []wfp.Condition{wfp.RemotePort(wfp.Port(443)), wfp.Protocol(wfp.ProtoUDP)}}}, "1.1.1.1:443", wfp.Permit},
		{"app condition", []rule{{"lo", 1, wfp.Block, false, []wfp.Condition{wfp.App(`C:\VM\VM.EXE`)}}}, "1.1.1.1:443", wfp.Block},
		{"other app", []rule{{"lo", 1, wfp.Block, false, []wfp.Condition{wfp.App(`C:\other.exe`)}}}, "1.1.1.1:443", wfp.Permit},
		{"loopback flag on a host address", []rule{{"lo", 1, wfp.Block, false, []wfp.Condition{wfp.FlagsSet(wfp.FlagLoopback)}}}, "192.168.1.10:445", wfp.Block},
		{"loopback flag on 127.0.0.1", []rule{{"lo", 1, wfp.Block, false, []wfp.Condition{wfp.FlagsSet(wfp.FlagLoopback)}}}, "127.0.0.1:22", wfp.Block},
		{"no loopback flag outside", []rule{{"lo", 1, wfp.Block, false, []wfp.Condition{wfp.FlagsSet(wfp.FlagLoopback)}}}, "192.168.1.11:445", wfp.Permit},
		{"remote prefix", []rule{{"lo", 1, wfp.Block, false, []wfp.Condition{wfp.RemoteAddr(netip.MustParsePrefix("1.1.0.0/16"))}}}, "1.1.1.1:443", wfp.Block},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := New()
			e.SetHostAddrs(netip.MustParseAddr("192.168.1.10"))
			s := setup(t, e)
			for i, r := range c.rules {
				must(t, s.AddFilter(wfp.Filter{Key: key(c.name + string(rune('a'+i))), Name: "f", Provider: key("p"), Sublayer: key(r.sub),
					Layer: wfp.LayerConnectV4, Weight: r.weight, Action: r.action, Hard: r.hard, Conditions: r.conds}))
			}
			if got := e.Classify(flowTo(c.flow)); got.Action != c.want {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

func filterIn(sub string, name string, persistent bool) wfp.Filter {
	return wfp.Filter{Key: key(name), Name: name, Provider: key("p"), Sublayer: key(sub), Layer: wfp.LayerConnectV4,
		Weight: 1, Action: wfp.Block, Persistent: persistent, Conditions: []wfp.Condition{wfp.App(app)}}
}

func TestTransactions(t *testing.T) {
	e := New()
	s := setup(t, e)
	other, err := e.Open(wfp.SessionOptions{})
	must(t, err)

	// Abort rolls back; other sessions see nothing before Commit.
	must(t, s.Begin())
	must(t, s.AddFilter(filterIn("lo", "a", true)))
	if fs, _ := s.Filters(key("p")); len(fs) != 1 {
		t.Errorf("the transaction does not see its own filter")
	}
	if fs, _ := other.Filters(key("p")); len(fs) != 0 {
		t.Errorf("another session sees an uncommitted filter")
	}
	if e.Classify(flowTo("1.1.1.1:443")).Action != wfp.Permit {
		t.Error("an uncommitted filter is enforced")
	}
	if err := other.AddFilter(filterIn("lo", "b", true)); !errors.Is(err, wfp.CodeTimeout) {
		t.Errorf("a change during another's transaction: %v, want FWP_E_TIMEOUT", err)
	}
	if err := other.Begin(); !errors.Is(err, wfp.CodeTimeout) {
		t.Errorf("a second transaction: %v, want FWP_E_TIMEOUT", err)
	}
	if err := s.Begin(); !errors.Is(err, wfp.CodeTxnInProgress) {
		t.Errorf("nested begin: %v", err)
	}
	must(t, s.Abort())
	if len(e.Filters()) != 0 {
		t.Error("abort kept the filter")
	}
	if err := s.Commit(); !errors.Is(err, wfp.CodeNoTxn) {
		t.Errorf("commit without a transaction: %v", err)
	}

	// Commit applies everything at once.
	must(t, s.Begin())
	must(t, s.AddFilter(filterIn("lo", "a", true)))
	must(t, s.AddFilter(filterIn("lo", "b", true)))
	must(t, s.Commit())
	if len(e.Filters()) != 2 {
		t.Errorf("commit: %d filters", len(e.Filters()))
	}

	// A failed commit rolls back.
	e.SetFault(func(op Op) error {
		if op.Name == "commit" {
			return errors.New("rpc")
		}
		return nil
	})
	must(t, s.Begin())
	must(t, s.DeleteFilter(key("a")))
	if err := s.Commit(); !errors.Is(err, ErrFault) {
		t.Errorf("commit: %v", err)
	}
	e.SetFault(nil)
	if len(e.Filters()) != 2 {
		t.Error("a failed commit deleted a filter")
	}

	// Closing a session with a transaction open rolls it back and frees the lock.
	must(t, s.Begin())
	must(t, s.DeleteFilter(key("a")))
	must(t, s.Close())
	if len(e.Filters()) != 2 {
		t.Error("closing mid-transaction committed it")
	}
	must(t, other.AddFilter(filterIn("lo", "c", true)))
	if err := s.Begin(); !errors.Is(err, wfp.ErrClosed) {
		t.Errorf("begin after close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

func TestLifetimes(t *testing.T) {
	e := New()
	s := setup(t, e)
	proc := e.Process("daemon")
	dyn, err := proc.Open(wfp.SessionOptions{Dynamic: true})
	must(t, err)

	if err := dyn.AddFilter(filterIn("lo", "persistent in dynamic", true)); !errors.Is(err, wfp.CodeDynamicSession) {
		t.Errorf("persistent filter in a dynamic session: %v", err)
	}
	must(t, dyn.AddFilter(filterIn("lo", "dynamic", false)))
	must(t, s.AddFilter(filterIn("lo", "static", false)))
	must(t, s.AddFilter(filterIn("lo", "persistent", true)))
	boot := filterIn("lo", "boot", false)
	boot.BootTime = true
	must(t, s.AddFilter(boot))

	// A persistent filter may not live in a non-persistent sublayer.
	must(t, s.AddSublayer(wfp.Sublayer{Key: key("tmp"), Provider: key("p"), Name: "tmp", Weight: 1}))
	if err := s.AddFilter(filterIn("tmp", "mismatch", true)); !errors.Is(err, wfp.CodeLifetimeMismatch) {
		t.Errorf("persistent filter in a static sublayer: %v", err)
	}
	if err := s.DeleteSublayer(key("lo")); !errors.Is(err, wfp.ErrInUse) {
		t.Errorf("deleting a sublayer in use: %v", err)
	}
	if err := s.DeleteFilter(key("nope")); !errors.Is(err, wfp.ErrNotFound) {
		t.Errorf("deleting a missing filter: %v", err)
	}
	if err := s.AddFilter(filterIn("lo", "static", false)); !errors.Is(err, wfp.ErrAlreadyExists) {
		t.Errorf("adding a key twice: %v", err)
	}

	names := func() map[string]Lifetime {
		m := map[string]Lifetime{}
		for _, f := range e.Filters() {
			m[f.Name] = f.Lifetime
		}
		return m
	}
	if got := names(); len(got) != 4 || got["dynamic"] != Dynamic || got["boot"] != BootTime {
		t.Errorf("filters %v", got)
	}
	proc.Exit()
	if got := names(); len(got) != 3 || got["dynamic"] != 0 {
		t.Errorf("after the process ended: %v", got)
	}
	if _, err := dyn.Filters(key("p")); !errors.Is(err, wfp.ErrClosed) {
		t.Errorf("a dead process's session: %v", err)
	}
	e.Reboot()
	if got := names(); len(got) != 2 || got["persistent"] != Persistent || got["boot"] != BootTime {
		t.Errorf("after reboot: %v", got)
	}
	if _, err := e.Open(wfp.SessionOptions{}); !errors.Is(err, wfp.ErrUnavailable) {
		t.Errorf("open before the BFE started: %v", err)
	}
	// Boot phase: only the boot-time filter is enforced.
	if v := e.Classify(flowTo("1.1.1.1:443")); v.Name != "boot" {
		t.Errorf("boot phase: decided by %q, want the boot-time filter", v.Name)
	}
	e.Boot()
	if v := e.Classify(flowTo("1.1.1.1:443")); v.Name != "persistent" {
		t.Errorf("running: decided by %q, want the persistent filter", v.Name)
	}
}

// TestDynamicSublayerGoesWithItsFilters: a dynamic session's sublayer goes when the
// session ends, and so do the filters in it.
func TestDynamicSublayerGoesWithItsFilters(t *testing.T) {
	e := New()
	s := setup(t, e)
	dyn, err := e.Open(wfp.SessionOptions{Dynamic: true})
	must(t, err)
	must(t, dyn.AddSublayer(wfp.Sublayer{Key: key("d"), Name: "d", Weight: 5}))
	must(t, s.AddFilter(filterIn("d", "in d", false)))
	must(t, dyn.Close())
	if len(e.Filters()) != 0 || len(e.Sublayers()) != 2 {
		t.Errorf("left: %v, %v", e.Filters(), e.Sublayers())
	}
}

func TestAppID(t *testing.T) {
	e := New()
	if id, err := e.AppID(`C:\VM\VM.exe`); err != nil || id != `c:\vm\vm.exe` {
		t.Errorf("got %q, %v", id, err)
	}
	if _, err := e.AppID(`vm.exe`); err == nil {
		t.Error("a relative path resolved")
	}
	e.SetMissing(app, true)
	if _, err := e.AppID(app); err == nil {
		t.Error("a missing file resolved")
	}
	s := setup(t, e)
	if err := s.AddFilter(filterIn("lo", "missing app", true)); err == nil {
		t.Error("a filter naming a missing app was added")
	}
}

func TestFirewall(t *testing.T) {
	e := New()
	fw := e.WindowsFirewall()
	in := Flow{Dir: Inbound, App: app, Proto: wfp.ProtoTCP, Local: netip.MustParseAddrPort("10.0.0.1:80"), Remote: netip.MustParseAddrPort("1.2.3.4:5000")}
	if v := e.Classify(in); v.Action != wfp.Block {
		t.Errorf("inbound without a rule: %v", v)
	}
	out := flowTo("1.1.1.1:443")
	if v := e.Classify(out); v.Action != wfp.Permit {
		t.Errorf("outbound: %v", v)
	}
	fw.Allow("vm", wfp.LayerAcceptV4, wfp.App(app))
	if v := e.Classify(in); v.Action != wfp.Permit {
		t.Errorf("inbound with an allow rule: %v", v)
	}
	// A user's firewall allow rule does not undo a higher sublayer's block.
	s := setup(t, e)
	must(t, s.AddFilter(wfp.Filter{Key: key("blk"), Name: "blk", Provider: key("p"), Sublayer: key("hi"), Layer: wfp.LayerAcceptV4, Action: wfp.Block}))
	if v := e.Classify(in); v.Action != wfp.Block {
		t.Errorf("our block vs the firewall's allow: %v", v)
	}
}

// TestAcceptLayer: the accept layers classify a connection the process takes (App is the
// listener, Remote the client): the loopback flag when the client is this machine, the
// interface it arrived on, the none-set flag match, and Windows Firewall leaving loopback
// alone.
func TestAcceptLayer(t *testing.T) {
	const luid = 0x0006_0000_0100_0000
	in := func(local, remote string, ifc uint64) Flow {
		return Flow{Dir: Inbound, App: app, Proto: wfp.ProtoTCP, Local: netip.MustParseAddrPort(local), Remote: netip.MustParseAddrPort(remote), Interface: ifc}
	}
	guest := in("192.168.56.1:445", "192.168.56.101:40000", luid)
	own := in("192.168.56.1:445", "192.168.56.1:40001", luid) // this machine to its own adapter address
	lo := in("127.0.0.1:445", "127.0.0.1:40002", 0)
	lan := in("192.168.1.10:445", "192.168.1.20:40003", 0)
	guest6 := in("[fe80::1]:445", "[fe80::a00:27ff:fe4e:66a1]:40004", luid)
	notLo := wfp.FlagsClear(wfp.FlagLoopback)
	for _, c := range []struct {
		name  string
		conds []wfp.Condition
		flow  Flow
		want  wfp.Action
	}{
		{"interface: a guest on the adapter", []wfp.Condition{wfp.Interface(luid)}, guest, wfp.Block},
		{"interface: a LAN client", []wfp.Condition{wfp.Interface(luid)}, lan, wfp.Permit},
		{"interface, not loopback: this machine's own connection", []wfp.Condition{wfp.Interface(luid), notLo}, own, wfp.Permit},
		{"interface, not loopback: the guest", []wfp.Condition{wfp.Interface(luid), notLo}, guest, wfp.Block},
		{"interface: a v6 link-local guest", []wfp.Condition{wfp.Interface(luid), notLo}, guest6, wfp.Block},
		{"not loopback: 127.0.0.1", []wfp.Condition{notLo}, lo, wfp.Permit},
		{"remote subnet, not loopback: own address", []wfp.Condition{wfp.RemoteAddr(netip.MustParsePrefix("192.168.56.0/24")), notLo}, own, wfp.Permit},
		{"remote subnet, not loopback: guest", []wfp.Condition{wfp.RemoteAddr(netip.MustParsePrefix("192.168.56.0/24")), notLo}, guest, wfp.Block},
		// Two conditions on the flags field are OR-ed, whatever their match types.
		{"flags set or clear: always", []wfp.Condition{wfp.FlagsSet(wfp.FlagLoopback), notLo}, lo, wfp.Block},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := New()
			e.SetHostAddrs(netip.MustParseAddr("192.168.1.10"), netip.MustParseAddr("192.168.56.1"))
			s := setup(t, e)
			layer := wfp.LayerAcceptV4
			if c.flow.Remote.Addr().Is6() {
				layer = wfp.LayerAcceptV6
			}
			f := wfp.Filter{Key: key(c.name), Name: "f", Provider: key("p"), Sublayer: key("lo"), Layer: layer, Weight: 1, Action: wfp.Block, Conditions: c.conds}
			must(t, f.Validate())
			must(t, s.AddFilter(f))
			if got := e.Classify(c.flow); got.Action != c.want {
				t.Errorf("%v: got %v, want %v", c.flow, got, c.want)
			}
		})
	}
	e := New()
	e.WindowsFirewall()
	if v := e.Classify(lo); v.Action != wfp.Permit {
		t.Errorf("the firewall on loopback: %v, want permit (it does not filter loopback)", v)
	}
	if v := e.Classify(lan); v.Action != wfp.Block {
		t.Errorf("the firewall on a LAN client no rule allows: %v, want block", v)
	}
	if err := (&wfp.Filter{Key: key("z"), Name: "z", Layer: wfp.LayerAcceptV4, Action: wfp.Block, Conditions: []wfp.Condition{wfp.Interface(0)}}).Validate(); err == nil {
		t.Error("a zero LUID is valid")
	}
	if err := (&wfp.Filter{Key: key("z"), Name: "z", Layer: wfp.LayerForwardV4, Action: wfp.Block, Conditions: []wfp.Condition{wfp.Interface(luid)}}).Validate(); err == nil {
		t.Error("an interface condition at the forward layer is valid")
	}
}

// TestConcurrent exercises the locks (run with -race).
func TestConcurrent(t *testing.T) {
	e := New()
	setup(t, e)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			p := e.Process("p")
			for j := 0; j < 50; j++ {
				s, err := p.Open(wfp.SessionOptions{Dynamic: j%2 == 0})
				if err != nil {
					t.Error(err)
					return
				}
				if s.Begin() == nil {
					s.AddFilter(filterIn("lo", string(rune('a'+i))+string(rune('a'+j%26)), false))
					s.Commit()
				}
				e.Classify(flowTo("1.1.1.1:443"))
				s.Filters(key("p"))
				if j%3 == 0 {
					p.Exit()
				} else {
					s.Close()
				}
			}
		}(i)
	}
	wg.Wait()
}
