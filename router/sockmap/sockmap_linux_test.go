package sockmap

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/agentcage/router/internal/roottest"
)

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

func TestExperimentRedirect(t *testing.T) {
	m := load(t, 0)
	app, a := tcpPair(t)
	b, peer := tcpPair(t)
	app.Write([]byte("early"))
	time.Sleep(10 * time.Millisecond)
	f, err := m.Add(0, fdOf(t, a), fdOf(t, b))
	if err != nil {
		t.Fatal(err)
	}
	passed, err := Kick(fdOf(t, a))
	t.Logf("kick: passed=%v err=%v", passed, err)
	peer.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 5)
	if _, err := io.ReadFull(peer, buf); err != nil {
		t.Fatalf("early bytes: %v", err)
	}
	data := bytes.Repeat([]byte("x"), 1<<20)
	go app.Write(data)
	got := make([]byte, len(data))
	if _, err := io.ReadFull(peer, got); err != nil {
		t.Fatal(err)
	}
	t.Logf("redirected %d passed %d", f.Redirected(0), f.Passed(0))
	ok, err := f.Drained(0, 0)
	t.Logf("drained %v %v", ok, err)
	peer.Write([]byte("back"))
	app.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(app, buf[:4]); err != nil {
		t.Fatal(err)
	}
	t.Logf("down redirected %d", f.Redirected(1))
	app.CloseWrite()
	time.Sleep(20 * time.Millisecond)
	n, err := Unread(fdOf(t, a))
	t.Logf("unread after fin %d %v", n, err)
}

func TestExperimentSlowReader(t *testing.T) {
	m := load(t, 1<<20)
	app, a := tcpPair(t)
	b, _ := tcpPair(t)
	f, err := m.Add(0, fdOf(t, a), fdOf(t, b))
	if err != nil {
		t.Fatal(err)
	}
	evc := make(chan [2]int, 1)
	go func() {
		p, s, err := m.Event()
		if err == nil {
			evc <- [2]int{p, s}
		}
	}()
	app.SetWriteDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 1<<20)
	var total int
	for {
		n, err := app.Write(buf)
		total += n
		if err != nil {
			break
		}
	}
	select {
	case ev := <-evc:
		t.Logf("event %v", ev)
	case <-time.After(time.Second):
		t.Error("no event")
	}
	un, _ := Unread(fdOf(t, a))
	w, _ := Written(fdOf(t, b))
	t.Logf("wrote %d; redirected %d passed %d passing %v; unread at a %d; written b %d", total, f.Redirected(0), f.Passed(0), f.Passing(0), un, w)
}
