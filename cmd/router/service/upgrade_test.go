package service

import (
	"errors"
	"strings"
	"testing"
)

// fakeMachine is the service and its guard: the running service holds permits; the
// guard's persistent blocks are what Guarded reports. removed says whether any step took
// the guard away.
type fakeMachine struct {
	steps   []string
	guard   bool
	running bool
	binary  string
	failPut bool
}

func (m *fakeMachine) upgrade(newBinary string) UpgradeSteps {
	return UpgradeSteps{
		Stop: func() error { m.steps = append(m.steps, "stop"); m.running = false; return nil },
		Place: func() error {
			m.steps = append(m.steps, "place")
			if m.running {
				return errors.New("router.exe in use")
			}
			if m.failPut {
				return errors.New("disk full")
			}
			m.binary = newBinary
			return nil
		},
		Start:   func() error { m.steps = append(m.steps, "start"); m.running = true; return nil },
		Guarded: func() (bool, error) { m.steps = append(m.steps, "guarded?"); return m.guard, nil },
	}
}

// TestUpgradeKeepsTheGuard: stop, replace, start, with the guard checked before and after
// each step and never removed; without a guard nothing is done.
func TestUpgradeKeepsTheGuard(t *testing.T) {
	m := &fakeMachine{guard: true, running: true, binary: "v1"}
	if err := Upgrade(m.upgrade("v2")); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(m.steps, " "), "guarded? stop guarded? place guarded? start guarded?"; got != want {
		t.Errorf("steps %q, want %q", got, want)
	}
	if !m.guard || !m.running || m.binary != "v2" {
		t.Errorf("after the upgrade: guard %v, running %v, binary %s", m.guard, m.running, m.binary)
	}

	m = &fakeMachine{running: true, binary: "v1"}
	if err := Upgrade(m.upgrade("v2")); err == nil || !strings.Contains(err.Error(), "guard is not installed") {
		t.Errorf("without a guard: %v, want refused", err)
	}
	if len(m.steps) != 1 || !m.running || m.binary != "v1" {
		t.Errorf("without a guard the service was touched: %q", m.steps)
	}

	m = &fakeMachine{guard: true, running: true, binary: "v1", failPut: true}
	if err := Upgrade(m.upgrade("v2")); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("failed copy: %v", err)
	}
	if !m.running || m.binary != "v1" || !m.guard {
		t.Errorf("after a failed copy: running %v, binary %s, guard %v; want the old one running, guarded", m.running, m.binary, m.guard)
	}
}
