package tally

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentcage/router/internal/syncbuf"
)

func TestSummary(t *testing.T) {
	var buf bytes.Buffer
	s := New(slog.New(slog.NewTextHandler(&buf, nil)), time.Hour, Options{Message: "refused (summary)", Unit: "flows", PerKind: 2})
	var logged int
	for i := range 10 {
		if s.Add("no-rule", "10.0.2.15", func() string { return fmt.Sprint("first ", i) }) {
			logged++
		}
	}
	for i := range MaxSources + 5 {
		s.Add("limit", fmt.Sprintf("10.0.3.%d", i), nil)
	}
	if n := s.Count("no-rule"); n != 10 {
		t.Errorf("Count = %d, want 10", n)
	}
	if logged != 2 {
		t.Errorf("%d to log one by one, want 2", logged)
	}
	s.Flush()
	line := buf.String()
	for _, want := range []string{"refused (summary)", "no-rule=10", `no-rule_example="first 0"`, "limit=69", "total=79", "not_logged_one_by_one=75",
		"sources=64", "top_source=10.0.2.15", "top_source_flows=10", "other_sources_flows=6"} {
		if !strings.Contains(line, want) {
			t.Errorf("summary lacks %s: %s", want, line)
		}
	}
	buf.Reset()
	s.Flush()
	if buf.Len() != 0 {
		t.Errorf("an empty interval logged %q", buf.String())
	}
}

// TestSummaryTimer: the line goes out by itself an interval after the first event.
func TestSummaryTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		buf := &syncbuf.Buffer{}
		s := New(slog.New(slog.NewTextHandler(buf, nil)), time.Minute, Options{Message: "summary", Unit: "events"})
		s.Add("x", "a", nil)
		time.Sleep(59 * time.Second) // not ordering: the bubble's fake clock, just short of the interval
		synctest.Wait()
		if buf.String() != "" {
			t.Fatalf("logged before the interval: %q", buf.String())
		}
		time.Sleep(2 * time.Second) // not ordering: the bubble's fake clock, past the interval
		synctest.Wait()
		if !strings.Contains(buf.String(), "x=1") {
			t.Fatalf("no line after the interval: %q", buf.String())
		}
	})
}
