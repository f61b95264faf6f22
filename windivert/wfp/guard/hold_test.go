package guard

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/windivert/wfp/wfptest"
)

// TestHoldAcrossACrashAndRestart: the router (PID 100) crashes and the BFE is slow to run
// its session down; the service manager starts the next router (PID 200), whose Arm deletes
// the dead one's permits by key and adds its own. The holder of the first waits for the
// first's permits only, and returns once they are gone, the second's still armed.
func TestHoldAcrossACrashAndRestart(t *testing.T) {
	eng := newMachine()
	plan := mustPlan(t, baseEnv())
	first := eng.Process("router 100")
	g := NewFor(first, nil, 100)
	if _, err := g.Install(plan); err != nil {
		t.Fatal(err)
	}
	if err := g.Arm(); err != nil {
		t.Fatal(err)
	}
	if n, err := Permits(eng, 100); err != nil || n != len(plan.Dynamic) {
		t.Fatalf("Permits(100) = %d, %v; want %d", n, err, len(plan.Dynamic))
	}
	parent := make(chan struct{})
	held := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		held <- Hold(ctx, HoldConfig{WFP: eng.Process("holder"), Owner: 100, Poll: time.Millisecond, Parent: parent, Stop: make(chan struct{})})
	}()
	first.Crash()
	close(parent)
	select {
	case err := <-held:
		t.Fatalf("Hold returned (%v) while the dead router's permits are in force", err)
	case <-time.After(20 * time.Millisecond):
	}
	second := NewFor(eng.Process("router 200"), nil, 200)
	if _, err := second.Install(plan); err != nil {
		t.Fatal(err)
	}
	if err := second.Arm(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-held:
		if err != nil {
			t.Fatalf("Hold: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Hold never returned")
	}
	if n, _ := Permits(eng, 100); n != 0 {
		t.Errorf("%d permits of the dead router left", n)
	}
	if n, _ := Permits(eng, 200); n != len(plan.Dynamic) {
		t.Errorf("%d permits of the new router, want %d", n, len(plan.Dynamic))
	}
	for _, f := range eng.Filters() {
		if f.Lifetime == wfptest.Dynamic && !strings.HasSuffix(f.Name, "[pid 200]") {
			t.Errorf("dynamic filter %q is not the new router's", f.Name)
		}
	}
	eng.Rundown() // the BFE gets to the dead session at last: nothing of it is left to delete
	if n, _ := Permits(eng, 200); n != len(plan.Dynamic) {
		t.Errorf("after the rundown: %d permits of the new router, want %d", n, len(plan.Dynamic))
	}
}

// TestSealRefusesArm: a sealed Guard stays disarmed.
func TestSealRefusesArm(t *testing.T) {
	eng := newMachine()
	g := NewFor(eng, nil, 7)
	if _, err := g.Install(mustPlan(t, baseEnv())); err != nil {
		t.Fatal(err)
	}
	if err := g.Arm(); err != nil {
		t.Fatal(err)
	}
	if err := g.Seal(); err != nil {
		t.Fatal(err)
	}
	if err := g.Arm(); err == nil || g.Armed() {
		t.Errorf("Arm after Seal = %v, armed=%v; want refused", err, g.Armed())
	}
	if n, _ := Permits(eng, 7); n != 0 {
		t.Errorf("%d permits after Seal", n)
	}
}
