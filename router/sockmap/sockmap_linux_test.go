package sockmap

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentcage/router/internal/roottest"
	"github.com/agentcage/router/internal/wait"
)

// Tests of the program on loopback sockets (root: ROUTER_E2E=1). The relay's use of it is
// tested in package router.

func tcpPair(t *testing.T) (dialed, accepted *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan *net.TCPConn, 1)
	go func() {
		c, _ := ln.AcceptTCP()
		ch <- c
	}()
	d, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	a := <-ch
	if a == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { d.Close(); a.Close() })
	return d, a
}

func fdOf(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	rc.Control(func(s uintptr) { fd = int(s) })
	return fd
}

func load(t *testing.T, budget uint32) *Map {
	t.Helper()
	roottest.Require(t)
	m, err := Load(Config{Pairs: 16, Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestRedirectsBothWays: app ⇄ [a | sockmap | b] ⇄ peer. Bytes a held before Add go out
// after a Kick, then everything both ways, counted, and Drained says when b took them.
func TestRedirectsBothWays(t *testing.T) {
	m := load(t, 0)
	app, a := tcpPair(t)
	b, peer := tcpPair(t)
	app.Write([]byte("early"))
	wait.For(t, "the early bytes in a's receive queue", 5*time.Second, func() bool { return inq(t, a) == len("early") })
	f, err := m.Add(0, fdOf(t, a), fdOf(t, b))
	if err != nil {
		t.Fatal(err)
	}
	if passed, err := Kick(fdOf(t, a)); err != nil || passed {
		t.Fatalf("kick: passed %v, %v", passed, err)
	}
	data := append([]byte("early"), bytes.Repeat([]byte("0123456789abcdef"), 1<<16)...)
	go app.Write(data[5:])
	peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(data))
	if _, err := io.ReadFull(peer, got); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("peer got %d bytes (equal %v), %v", len(got), bytes.Equal(got, data), err)
	}
	if ok, err := f.Drained(0, 0); !ok || err != nil || f.Redirected(0) != uint64(len(data)) || f.Passed(0) != 0 {
		t.Errorf("drained %v %v, redirected %d, passed %d; want true, %d, 0", ok, err, f.Redirected(0), f.Passed(0), len(data))
	}
	peer.Write([]byte("back"))
	app.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(app, got[:4]); err != nil || string(got[:4]) != "back" || f.Redirected(1) != 4 {
		t.Errorf("back: %q, %v, redirected %d", got[:4], err, f.Redirected(1))
	}
	f.Release()
}

// TestBudgetStopsRedirecting: toward a reader that reads nothing, the program redirects
// up to its budget, then passes (reported once on the ring buffer), and the sender's
// window closes: what a keeps is what the program passed.
func TestBudgetStopsRedirecting(t *testing.T) {
	m := load(t, 1<<20)
	app, a := tcpPair(t)
	b, _ := tcpPair(t)
	f, err := m.Add(3, fdOf(t, a), fdOf(t, b))
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan [2]int, 4)
	go func() {
		for {
			p, s, err := m.Event()
			if err != nil {
				return
			}
			events <- [2]int{p, s}
		}
	}()
	app.SetWriteDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 1<<20)
	var total int
	for {
		n, err := app.Write(buf)
		total += n
		if err != nil {
			break // the window closed: the write timed out
		}
	}
	select {
	case ev := <-events:
		if ev != [2]int{3, 0} {
			t.Errorf("event %v, want pair 3 side 0", ev)
		}
	case <-time.After(time.Second):
		t.Fatal("no event")
	}
	if !f.Passing(0) || f.Trips(0) != 1 {
		t.Errorf("passing %v trips %d, want true 1", f.Passing(0), f.Trips(0))
	}
	queued := f.Redirected(0) - f.Taken(0)
	if queued > 1<<20+256<<10 {
		t.Errorf("b's psock queues %d bytes, over the budget", queued)
	}
	if total > 64<<20 {
		t.Errorf("the sender got %d bytes in toward a reader that reads nothing", total)
	}
	t.Logf("sent %d KiB: redirected %d, passed %d, psock queue %d KiB", total>>10, f.Redirected(0), f.Passed(0), queued>>10)
}

// inq is how many bytes wait in c's receive queue (SIOCINQ).
func inq(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	n, err := unix.IoctlGetInt(fdOf(t, c), unix.SIOCINQ)
	if err != nil {
		t.Fatalf("SIOCINQ: %v", err)
	}
	return n
}
