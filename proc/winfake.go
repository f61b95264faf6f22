package proc

import (
	"fmt"
	"time"
)

// FakeProcess is one entry of FakeProcesses.
type FakeProcess struct {
	Created time.Time
	Path    string
}

// FakeProcesses is a ProcessQuerier over a fixed table, for tests of code that attributes
// flows on Windows (it runs on any OS). Do not modify the map while it is in use.
type FakeProcesses map[uint32]FakeProcess

// Created implements ProcessQuerier.
func (f FakeProcesses) Created(pid uint32) (time.Time, error) {
	p, ok := f[pid]
	if !ok {
		return time.Time{}, ErrNoProcess
	}
	return p.Created, nil
}

// ImagePath implements ProcessQuerier.
func (f FakeProcesses) ImagePath(pid uint32) (string, error) {
	p, ok := f[pid]
	if !ok {
		return "", fmt.Errorf("image path: %w", ErrNoProcess)
	}
	return p.Path, nil
}

// FakeServices is a ServiceEnumerator over a fixed table (PID -> service names). Do not
// modify the map while it is in use.
type FakeServices map[uint32][]string

// ServicesByPID implements ServiceEnumerator; it returns a copy.
func (f FakeServices) ServicesByPID() (map[uint32][]string, error) {
	out := make(map[uint32][]string, len(f))
	for k, v := range f {
		out[k] = append([]string(nil), v...)
	}
	return out, nil
}
