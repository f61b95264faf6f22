package service

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestSummarizeFlows: a thousand flow records become one summary per period; other
// records, and a failed flow's Warn record, pass one by one.
func TestSummarizeFlows(t *testing.T) {
	var buf bytes.Buffer
	clock := time.Unix(1000, 0)
	h, flush := SummarizeFlows(slog.NewTextHandler(&buf, nil), time.Minute, func() time.Time { return clock })
	log := slog.New(h).With("component", "router")
	log.Info("started")
	for i := 0; i < 1000; i++ {
		log.Info("flow open", "action", "proxy")
		action := "proxy"
		if i%4 == 0 {
			action = "direct"
		}
		log.Info("flow", "rule", "r", "action", action)
		clock = clock.Add(50 * time.Millisecond) // 50 s in all
	}
	log.Warn("flow", "action", "proxy", "err", "reset")
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Fatalf("%d records before the period ended, want 2 (started, the failed flow):\n%s", n, buf.String())
	}
	clock = clock.Add(20 * time.Second)
	log.Info("flow", "action", "proxy") // the first after the period: writes the summary
	flush()
	out := buf.String()
	for _, want := range []string{`msg=flows component=router ended=1000 by_action="direct=250 proxy=750" opened=1000`, `msg=flows ended=1 by_action="proxy=1" opened=0`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 4 {
		t.Errorf("%d records, want 4:\n%s", n, out)
	}
}
