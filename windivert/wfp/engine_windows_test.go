//go:build windows

package wfp

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"

	"github.com/tailscale/wf"
	"golang.org/x/sys/windows"

	"github.com/agentcage/router/internal/winetest"
)

// TestEngineHandle: wf.Session still keeps the engine handle where engineHandle reads it.
func TestEngineHandle(t *testing.T) {
	if _, err := engineHandle(&wf.Session{}); err != nil {
		t.Fatal(err)
	}
}

// TestGUID: keys convert to Windows GUIDs field by field, as their text forms say.
func TestGUID(t *testing.T) {
	k, err := ParseKey("{C38D57D1-05A7-4C33-904F-7FBCEEE60E82}") // FWPM_LAYER_ALE_AUTH_CONNECT_V4
	if err != nil {
		t.Fatal(err)
	}
	if g := guid(k); g != windows.GUID(wf.LayerALEAuthConnectV4) {
		t.Errorf("got %v", g)
	}
	if keyOf(guid(k)) != k {
		t.Error("no round trip")
	}
}

// wineStubException is the exception (and exit) code of a process that called a function
// Wine only declares (EXCEPTION_WINE_STUB); Wine prints "unimplemented function" to its
// own stderr, which the child's output does not get.
const wineStubException = 0x80000100

// stubHelper is set in the environment of a child test process: the name of the
// fwpuclnt.dll function it calls.
const stubHelper = "WFP_TEST_CALL_STUB"

// TestCallStub is the child's body; in the parent it does nothing.
func TestCallStub(t *testing.T) {
	switch os.Getenv(stubHelper) {
	case "":
		return
	case "FwpmTransactionBegin0":
		fwpmTransactionBegin0(0, 0)
	case "FwpmGetAppIdFromFileName0":
		wf.AppID(`C:\windows\system32\notepad.exe`)
	}
	t.Fatal("the stub returned")
}

// TestWine pins down what Wine's fwpuclnt.dll implements, so a Wine upgrade that changes
// it shows up here: FwpmEngineOpen0 is implemented and refuses (RPC_S_CANNOT_SUPPORT, no
// handle), so our engine reports ErrUnavailable; the transaction calls and
// FwpmGetAppIdFromFileName0 are bare stubs that abort the process when called.
func TestWine(t *testing.T) {
	if !winetest.UnderWine() {
		t.Log("not under Wine: TestRealEngine covers Windows")
		return
	}
	var s [72]byte // FWPM_SESSION0, zeroed
	var h windows.Handle
	r, _, _ := procFwpmEngineOpen0.Call(0, 0xa, 0, uintptr(unsafe.Pointer(&s)), uintptr(unsafe.Pointer(&h)))
	if Code(r) != CodeCannotSupport || h != 0 {
		t.Errorf("FwpmEngineOpen0: %#x, handle %#x; Wine 8 answers RPC_S_CANNOT_SUPPORT (0x6e4) and no handle", r, h)
	}
	if _, err := NewEngine().Open(SessionOptions{Dynamic: true}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Open: %v, want ErrUnavailable", err)
	}
	// FwpmFilterCreateEnumHandle0 is implemented: on no engine it refuses the same way.
	if _, err := enumFilters(0, &windows.GUID{Data1: 1}, windows.GUID(wf.LayerALEAuthConnectV4)); !errors.Is(codeOf(err), ErrUnavailable) {
		t.Errorf("enumerate filters without an engine: %v", err)
	}
	for _, fn := range []string{"FwpmTransactionBegin0", "FwpmGetAppIdFromFileName0"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCallStub$", "-test.v")
		cmd.Env = append(os.Environ(), stubHelper+"="+fn)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || uint32(exit.ExitCode()) != wineStubException || bytes.Contains(out, []byte("stub returned")) {
			t.Errorf("%s: exit %v, output %q; want Wine's stub exception %#x", fn, err, out, wineStubException)
		}
	}
}

// TestRealEngine runs on Windows (elevated): a dynamic session, so nothing outlives it.
// It adds a provider, a sublayer and a filter with every condition the guard uses in one
// transaction, lists them back, checks an aborted transaction leaves nothing, and closes.
func TestRealEngine(t *testing.T) {
	if winetest.UnderWine() {
		t.Log("under Wine: TestWine covers what Wine has")
		return
	}
	eng := NewEngine()
	s, err := eng.Open(SessionOptions{Name: "router wfp test", Dynamic: true})
	if err != nil {
		t.Fatalf("open (run the test elevated): %v", err)
	}
	defer s.Close()
	ns := Key{0x72, 0x6f, 0x75, 0x74, 0x65, 0x72}
	prov, sub := NameKey(ns, "test provider"), NameKey(ns, "test sublayer")
	exe, _ := os.Executable()
	f := Filter{Key: NameKey(ns, "test filter"), Name: "router wfp test", Provider: prov, Sublayer: sub, Layer: LayerConnectV4,
		Weight: 7, Action: Block, Digest: []byte("digest"), Conditions: []Condition{
			App(exe), User("S-1-5-18"), Protocol(ProtoTCP), RemotePort(PortRange{1, 2}), LocalPort(Port(9)),
			RemoteAddr(netip.MustParsePrefix("192.0.2.0/24")), LocalAddr(netip.MustParsePrefix("198.51.100.1/32")), FlagsSet(FlagLoopback),
		}}
	if err := s.Begin(); err != nil {
		t.Fatal(err)
	}
	for _, step := range []error{
		s.AddProvider(Provider{Key: prov, Name: "router wfp test"}),
		s.AddSublayer(Sublayer{Key: sub, Provider: prov, Name: "router wfp test", Weight: 1}),
		s.AddFilter(f),
	} {
		if step != nil {
			s.Abort()
			t.Fatal(step)
		}
	}
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	fs, err := s.Filters(prov)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].Key != f.Key || fs[0].Weight != 7 || fs[0].Action != Block || !bytes.Equal(fs[0].Digest, f.Digest) || fs[0].Layer != LayerConnectV4 {
		t.Errorf("listed %+v", fs)
	}
	if err := s.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteFilter(f.Key); err != nil {
		t.Fatal(err)
	}
	if err := s.Abort(); err != nil {
		t.Fatal(err)
	}
	if fs, _ := s.Filters(prov); len(fs) != 1 {
		t.Errorf("abort did not keep the filter: %v", fs)
	}
	if err := s.DeleteSublayer(sub); !errors.Is(err, ErrInUse) {
		t.Errorf("delete a sublayer in use: %v", err)
	}
	if err := s.AddFilter(f); !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("add twice: %v", err)
	}
	if _, err := eng.AppID(`C:\no such dir\none.exe`); err == nil || !strings.Contains(err.Error(), "none.exe") {
		t.Errorf("app id of a missing file: %v", err)
	}
}
