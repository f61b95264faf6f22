package daemon

import (
	"sync/atomic"
	"testing"

	"github.com/agentcage/router/router/capture/capturetest"
	"github.com/agentcage/router/router/control"
)

// countingCage is a fake platform whose kernel cages a process, and that counts the walks
// of the host's processes that finding it takes.
type countingCage struct {
	*capturetest.Platform
	walks atomic.Int32
}

func (c *countingCage) KernelCaged() ([]control.KernelCagedStat, []string) {
	c.walks.Add(1)
	return []control.KernelCagedStat{{PID: 100}}, nil
}

// TestConsoleStatusSkipsProcessWalk: the control channel's status walks the host's
// processes for the kernel cage; the console's, polled every second and showing no kernel
// cage, does not (its cost would grow with the host's processes, not the router's flows).
func TestConsoleStatusSkipsProcessWalk(t *testing.T) {
	s := newScene(t)
	s.write(s.text("127.0.0.0/8", ""))
	pf := &countingCage{Platform: &capturetest.Platform{}}
	d := s.daemon(pf, nil)
	s.start(d)
	if st := d.status.Status(); pf.walks.Load() != 1 || len(st.KernelCaged) != 1 {
		t.Fatalf("the control channel's status: %d walks, kernel caged %+v; want 1 and the qemu process", pf.walks.Load(), st.KernelCaged)
	}
	st := consoleHandler{d.status}.Status()
	if pf.walks.Load() != 1 || st.KernelCaged != nil {
		t.Errorf("the console's status: %d walks in all, kernel caged %+v; want no walk more", pf.walks.Load(), st.KernelCaged)
	}
	if len(st.Rules) == 0 || st.PID == 0 {
		t.Errorf("the console's status lacks the rest: %+v", st)
	}
}
