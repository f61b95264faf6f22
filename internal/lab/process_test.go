//go:build linux

package lab

import (
	"os/exec"
	"testing"
	"time"
)

func TestProcessStopsByPID(t *testing.T) {
	p, err := StartProcess("sleep", exec.Command("sleep", "30"))
	if err != nil {
		t.Fatal(err)
	}
	if done, _ := p.Exited(); done {
		t.Fatal("exited at once")
	}
	start := time.Now()
	if err := p.Stop(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	if done, _ := p.Exited(); !done || time.Since(start) > 3*time.Second {
		t.Errorf("not stopped promptly (done %v after %v)", done, time.Since(start))
	}
	if err := p.Stop(time.Second); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}
