package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeLog is a router's output written by the test.
type fakeLog struct {
	mu     sync.Mutex
	s      string
	exited chan struct{}
}

func (f *fakeLog) Log() string             { f.mu.Lock(); defer f.mu.Unlock(); return f.s }
func (f *fakeLog) Exited() <-chan struct{} { return f.exited }
func (f *fakeLog) write(s string)          { f.mu.Lock(); f.s += s; f.mu.Unlock() }

func TestRouterLogPrintsEachLineOnce(t *testing.T) {
	src := &fakeLog{exited: make(chan struct{})}
	var out strings.Builder
	l := &routerLog{src: src, w: &out, prefix: "> "}
	src.write("one\ntw")
	l.printNew(false)
	src.write("o\nthree")
	l.printNew(false)
	l.printNew(false)
	l.printNew(true)
	l.printNew(true)
	if want := "> one\n> two\n> three\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}

func TestRouterLogFollowUntilExit(t *testing.T) {
	src := &fakeLog{exited: make(chan struct{})}
	var out strings.Builder
	l := &routerLog{src: src, w: &out, prefix: "> "}
	done := make(chan bool)
	go func() { done <- l.follow(context.Background(), time.Millisecond) }()
	src.write("started\n")
	src.write("stopped")
	close(src.exited)
	select {
	case exited := <-done:
		if !exited {
			t.Error("follow did not report the exit")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not return after the router exited")
	}
	if want := "> started\n> stopped\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}

func TestRouterLogFollowUntilCancel(t *testing.T) {
	src := &fakeLog{exited: make(chan struct{})}
	src.write("started\npartial")
	var out strings.Builder
	l := &routerLog{src: src, w: &out, prefix: "> "}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if l.follow(ctx, time.Hour) {
		t.Error("follow reported an exit")
	}
	if want := "> started\n"; out.String() != want {
		t.Errorf("got %q, want %q (the partial line waits for the stop)", out.String(), want)
	}
}
