// Package proctest provides fakes of the two seams of proc's Windows attribution
// (proc.ProcessQuerier and proc.ServiceEnumerator) over fixed tables, so code that attributes
// flows to Windows processes and services is tested on any OS.
package proctest

import (
	"fmt"
	"time"

	"github.com/agentcage/router/router/proc"
)

// Process is one entry of Processes.
type Process struct {
	Created time.Time
	Path    string
}

// Processes is a proc.ProcessQuerier over a fixed table keyed by PID. Do not modify the
// map while it is in use.
type Processes map[uint32]Process

// Created implements proc.ProcessQuerier; an unknown PID gives proc.ErrNoProcess.
func (f Processes) Created(pid uint32) (time.Time, error) {
	p, ok := f[pid]
	if !ok {
		return time.Time{}, proc.ErrNoProcess
	}
	return p.Created, nil
}

// ImagePath implements proc.ProcessQuerier; an unknown PID gives an error wrapping
// proc.ErrNoProcess.
func (f Processes) ImagePath(pid uint32) (string, error) {
	p, ok := f[pid]
	if !ok {
		return "", fmt.Errorf("image path: %w", proc.ErrNoProcess)
	}
	return p.Path, nil
}

// Services is a proc.ServiceEnumerator over a fixed table (PID -> service names). Do not
// modify the map while it is in use.
type Services map[uint32][]string

// ServicesByPID implements proc.ServiceEnumerator; it returns a copy.
func (f Services) ServicesByPID() (map[uint32][]string, error) {
	out := make(map[uint32][]string, len(f))
	for k, v := range f {
		out[k] = append([]string(nil), v...)
	}
	return out, nil
}

var (
	_ proc.ProcessQuerier    = Processes{}
	_ proc.ServiceEnumerator = Services{}
)
