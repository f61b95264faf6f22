package auditlog

import (
	"bufio"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/winetest"
)

func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// TestRecords: a flow and a refusal as the schema in docs/config.md writes them.
func TestRecords(t *testing.T) {
	path := filepath.Join(winetest.TempDir(t), "flows.jsonl")
	l := New(Options{})
	if err := l.Open(path); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)
	l.Add(Record{Time: at, Event: EventFlow, ID: 7, Network: "tcp", Src: netip.MustParseAddrPort("10.0.2.15:40000"),
		Name: "registry.npmjs.org", NameFrom: "dns", Dst: netip.MustParseAddrPort("198.18.0.5:443"), Rule: "npm",
		Action: "proxy", Upstream: "exit", Up: 517, Down: 4096, Duration: 1500 * time.Microsecond})
	l.Add(Record{Time: at, Event: EventRefused, Src: netip.MustParseAddrPort("10.0.2.15:40001"), Name: "dns.google", DstPort: 443,
		Rule: "(dns over https: past the router)", Action: "block", Reason: "doh"})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got := readLines(t, path)
	if len(got) != 2 {
		t.Fatalf("%d lines: %v", len(got), got)
	}
	want := map[string]any{"time": "2026-12-01T23:00:00Z", "event": "flow", "id": 7.0, "network": "tcp", "src": "10.0.2.15:40000",
		"name": "registry.npmjs.org", "name_from": "dns", "dst": "198.18.0.5:443", "rule": "npm", "action": "proxy",
		"upstream": "exit", "up": 517.0, "down": 4096.0, "duration_ms": 1.5}
	for k, v := range want {
		if got[0][k] != v {
			t.Errorf("flow %s = %v, want %v", k, got[0][k], v)
		}
	}
	if len(got[0]) != len(want) {
		t.Errorf("flow record has keys %v, want %v", got[0], want)
	}
	if got[1]["reason"] != "doh" || got[1]["dst"] != "dns.google:443" || got[1]["event"] != "refused" {
		t.Errorf("refusal = %v", got[1])
	}
	// (Windows has no mode bits: there the file takes its folder's ACL.)
	if st, err := os.Stat(path); runtime.GOOS != "windows" && (err != nil || st.Mode().Perm() != 0o600) {
		t.Errorf("mode %v, %v; want 0600", st.Mode(), err)
	}
}

// TestRotate: past MaxSize the file is renamed .1, older ones shift, at most Keep are kept.
func TestRotate(t *testing.T) {
	path := filepath.Join(winetest.TempDir(t), "flows.jsonl")
	l := New(Options{MaxSize: 1000, Keep: 2})
	if err := l.Open(path); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		l.Add(Record{Time: time.Now(), Event: EventFlow, ID: uint64(i + 1), Rule: strings.Repeat("r", 50)})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var ids []float64
	for _, p := range []string{path + ".2", path + ".1", path} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 1000 {
			t.Errorf("%s is %d bytes, over 1000", p, st.Size())
		}
		for _, m := range readLines(t, p) {
			ids = append(ids, m["id"].(float64))
		}
	}
	if _, err := os.Stat(path + ".3"); err == nil {
		t.Error("a third old file was kept")
	}
	if ids[len(ids)-1] != 40 {
		t.Errorf("the last record is %v, want 40", ids[len(ids)-1])
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] != ids[i-1]+1 {
			t.Fatalf("records out of order or lost: %v", ids)
		}
	}
}

// TestOffAndDropped: without a file nothing is queued; a full queue drops and says so.
func TestOffAndDropped(t *testing.T) {
	l := New(Options{})
	l.Add(Record{Event: EventFlow}) // no file: dropped silently, not counted
	if n := l.dropped.Load(); n != 0 {
		t.Errorf("dropped %d with no file", n)
	}
	path := filepath.Join(winetest.TempDir(t), "flows.jsonl")
	l.mu.Lock() // the writer waits: the queue fills
	l.path = path
	if err := l.openFile(); err != nil {
		t.Fatal(err)
	}
	l.on.Store(true)
	for range QueueSize + 10 {
		l.Add(Record{Time: time.Now(), Event: EventFlow})
	}
	l.mu.Unlock()
	l.Add(Record{Time: time.Now(), Event: EventFlow})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var dropped float64
	for _, m := range readLines(t, path) {
		if m["event"] == EventDropped {
			dropped += m["count"].(float64)
		}
	}
	if dropped < 9 {
		t.Errorf("dropped lines count %v, want at least 9", dropped)
	}
}

// BenchmarkWrite is the writer's throughput: records added and written to a file (the
// queue's drops count as lost work, reported).
func BenchmarkWrite(b *testing.B) {
	path := filepath.Join(b.TempDir(), "flows.jsonl")
	l := New(Options{})
	if err := l.Open(path); err != nil {
		b.Fatal(err)
	}
	r := Record{Time: time.Now(), Event: EventFlow, ID: 7, Network: "tcp", Src: netip.MustParseAddrPort("10.0.2.15:40000"),
		Name: "registry.npmjs.org", NameFrom: "dns", Dst: netip.MustParseAddrPort("198.18.0.5:443"), Rule: "npm",
		Action: "proxy", Upstream: "exit", Up: 517, Down: 4096, Duration: 1500 * time.Microsecond}
	var lost uint64
	for b.Loop() {
		for len(l.queue) == cap(l.queue) {
			runtime.Gosched() // the writer drains: measure it, not drops
		}
		l.Add(r)
	}
	lost = l.dropped.Load()
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(lost), "dropped")
}

// TestRecordRoundTrip: a line reads back into the record that wrote it (router learn reads
// the log this way).
func TestRecordRoundTrip(t *testing.T) {
	for _, r := range []Record{
		{Time: time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC), Event: EventFlow, ID: 7, Network: "tcp", Caged: true,
			Src: netip.MustParseAddrPort("10.0.2.15:40000"), Dst: netip.MustParseAddrPort("198.18.0.5:443"),
			Name: "registry.npmjs.org", NameFrom: "dns", Rule: "r", Action: "proxy", Upstream: "exit", Up: 1, Down: 2, Duration: 1500 * time.Microsecond},
		{Time: time.Date(2026, 12, 1, 22, 0, 1, 0, time.UTC), Event: EventRefused, Name: "dns.google", DstPort: 443, Reason: "doh"},
	} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var got Record
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if got != r {
			t.Errorf("%s read back as %+v; want %+v", b, got, r)
		}
	}
}

// TestFiles: the rotated files that exist, oldest first, then the log itself.
func TestFiles(t *testing.T) {
	dir := winetest.TempDir(t)
	path := filepath.Join(dir, "flows.jsonl")
	if got := Files(path); len(got) != 1 || got[0] != path {
		t.Errorf("no rotated file: %q", got)
	}
	for _, i := range []int{1, 2} {
		if err := os.WriteFile(rotated(path, i), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{path + ".2", path + ".1", path}
	if got := Files(path); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("Files = %q; want %q", got, want)
	}
}
