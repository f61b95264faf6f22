package platform

import (
	"io"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/windows"

	"github.com/agentcage/router/windivert"
	"github.com/agentcage/router/windivert/wfp/wfptest"
)

// TestHolderHelper is the holder's process in TestHolderKeepsTheHandle (it does nothing
// in a normal run): runHolder over an engine where no permit exists.
func TestHolderHelper(t *testing.T) {
	hv, parent := os.Getenv("ROUTER_TEST_HOLD_HANDLE"), os.Getenv("ROUTER_TEST_HOLD_PARENT")
	if hv == "" {
		t.Skip("the holder's helper process")
	}
	h, _ := strconv.ParseUint(hv, 10, 64)
	p, _ := strconv.ParseUint(parent, 10, 32)
	if os.Getenv("ROUTER_TEST_HOLD_RELAY") != "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHolderHelper$")
		cmd.Env = append(os.Environ(), "ROUTER_TEST_HOLD_RELAY=")
		if err := relayHolder(cmd, uintptr(h)); err != nil {
			t.Fatal(err)
		}
		os.Exit(0) // as `router hold --relay`: nothing on stdout (no PASS line)
	}
	if err := runHolder(wfptest.New(), pipeDriver{}, uintptr(h), uint32(p), os.Stdin, os.Stdout); err != nil {
		t.Fatal(err)
	}
}

// pipeDriver stands for WinDivert.dll in the holder's helper: the handle is a pipe's, so
// the queue time is not set and Close is CloseHandle.
type pipeDriver struct{ windivert.Driver }

func (pipeDriver) SetParam(uintptr, windivert.Param, uint64) error { return nil }
func (pipeDriver) Close(h uintptr) error                           { return windows.CloseHandle(windows.Handle(h)) }

// TestHolderKeepsTheHandle: the holder, started through a relay that exits at once,
// inherits a handle and keeps it open after its opener closed its own, until the opener
// lets it go. The handle is a pipe's write end:
// its read end sees the end only once no process holds it.
func TestHolderKeepsTheHandle(t *testing.T) {
	var r, w windows.Handle
	if err := windows.CreatePipe(&r, &w, nil, 0); err != nil {
		t.Fatal(err)
	}
	// (r is closed through rf below.)
	start := startHolderCmd(func(hv uintptr, owner uint32) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHolderHelper$")
		cmd.Env = append(os.Environ(), "ROUTER_TEST_HOLD_HANDLE="+strconv.FormatUint(uint64(hv), 10), "ROUTER_TEST_HOLD_PARENT="+strconv.FormatUint(uint64(owner), 10), "ROUTER_TEST_HOLD_RELAY=1")
		return cmd
	})
	release, err := start(nil, uintptr(w), uint32(os.Getpid()))
	if err != nil {
		windows.CloseHandle(w)
		windows.CloseHandle(r)
		t.Fatal(err)
	}
	windows.CloseHandle(w) // the opener's own handle: the holder's keeps the pipe open
	rf := os.NewFile(uintptr(r), "pipe")
	defer rf.Close()
	eof := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(rf)
		eof <- err
	}()
	select {
	case err := <-eof:
		t.Fatalf("the pipe ended (%v) while the holder should hold it", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := release(); err != nil {
		t.Fatalf("release: %v", err)
	}
	select {
	case <-eof:
	case <-time.After(10 * time.Second):
		t.Fatal("the holder kept the handle after it was let go")
	}
}
