package redirect

import (
	"bufio"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentcage/router/internal/winetest"
	"github.com/agentcage/router/router/auditlog"
	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy/policytest"
)

// TestRefusalInFlowLog: a flow the engine refuses at its first packet (a caged app to a
// DoH resolver) is written to the flow log for audits, with its reason, as the router
// writes the ones it refuses.
func TestRefusalInFlowLog(t *testing.T) {
	path := filepath.Join(winetest.TempDir(t), "flows.jsonl")
	audit := auditlog.New(auditlog.Options{})
	if err := audit.Open(path); err != nil {
		t.Fatal(err)
	}
	src, dst := netip.MustParseAddrPort("192.168.1.10:40001"), netip.MustParseAddrPort("8.8.8.8:443")
	lk := &fakeLookup{owners: map[netip.AddrPort]rules.Owner{src: {PID: 7, App: policytest.Hypervisor}}}
	e, dev, _ := newTest(t, true, parsePolicy(t, "shared.toml", policytest.Config, "linux"), Options{Lookup: lk.lookup, Audit: audit})
	send(e, tcpPkt(src, dst, syn, 1, 0, ""), outMeta)
	dev.take()
	if err := audit.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var got []map[string]any
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	if len(got) != 1 || got[0]["event"] != "refused" || got[0]["reason"] != "doh" || got[0]["dst"] != dst.String() ||
		got[0]["app"] != policytest.Hypervisor || got[0]["network"] != "tcp" || got[0]["src"] != src.String() {
		t.Errorf("flow log = %v", got)
	}
}
