package platform

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentcage/router/router/capture/capturetest"
	"github.com/agentcage/router/rules/policy"
)

// TestWindowsWarnsSIDTypeNone: a caged service whose SID type is NONE is warned of at
// start, with the command that fixes it: the guard blocks services by their service SID,
// which its processes do not carry.
func TestWindowsWarnsSIDTypeNone(t *testing.T) {
	s := newWindowsScene(t)
	var buf bytes.Buffer
	s.p.log = slog.New(slog.NewTextHandler(&buf, nil))
	s.p.deps.SIDTypeNone = func(name string) (bool, error) { return strings.EqualFold(name, "legacysvc"), nil }
	cfg := capturetest.ParseWindows(t, windowsCfg+"[[rule]]\nname = \"svcs\"\nservices = [\"LegacySvc\", \"Dnscache\"]\naction = \"block\"\n")
	if err := s.p.Install(cfg, policy.New(cfg, s.p.Env()), nil); err != nil {
		t.Fatal(err)
	}
	defer s.p.Close()
	out := buf.String()
	if !strings.Contains(out, "SID type is NONE") || !strings.Contains(out, "sc.exe sidtype legacysvc unrestricted") {
		t.Errorf("log lacks the SID-type NONE warning for legacysvc:\n%s", out)
	}
	if strings.Contains(out, "sidtype dnscache") {
		t.Errorf("Dnscache warned of:\n%s", out)
	}
}
