package router

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/agentcage/router/internal/wait"
	"github.com/agentcage/router/router/upstream"
	"github.com/agentcage/router/rules/refusal"
)

// sizedReturn records the length and bytes of each reply, and fails those longer than max
// as a capture that cannot give them back would (EMSGSIZE).
type sizedReturn struct {
	max     int
	replies chan []byte
}

func (s *sizedReturn) Reply(_, _ netip.AddrPort, p []byte) error {
	if len(p) > s.max {
		return fmt.Errorf("fake capture: %d bytes: %w", len(p), upstream.ErrTooLarge)
	}
	s.replies <- append([]byte(nil), p...)
	return nil
}

func (s *sizedReturn) Release(_, _ netip.AddrPort) {}

// TestUDPAnswersNeverCut: answers of every size up to the largest datagram come back whole
// (the 16,636-byte cut is gone); an answer the return path cannot carry, and a datagram the
// association cannot send, are dropped whole and counted as udp-oversize.
func TestUDPAnswersNeverCut(t *testing.T) {
	e := newUDPEnv(t, nil, nil, proxyAll)
	ret := &sizedReturn{max: upstream.MaxDatagram, replies: make(chan []byte, 64)}
	e.r.HandleUDP(Datagram{Src: guest, Dst: echo, Payload: []byte("ping")}, ret)
	a := e.association(0)
	sent(t, a, ipAddr(echo), "ping")
	for _, size := range []int{1, 1472, 16384, 16636, 16637, 16898, 30000, 65000, upstream.MaxDatagram} {
		want := bytes.Repeat([]byte{byte(size)}, size)
		a.Deliver(ipAddr(echo), want)
		select {
		case got := <-ret.replies:
			if !bytes.Equal(got, want) {
				t.Errorf("answer of %d bytes came back as %d bytes", size, len(got))
			}
		case <-time.After(waitFor):
			t.Fatalf("answer of %d bytes never came back", size)
		}
	}
	if n := e.r.book.Count(refusal.Oversize); n != 0 {
		t.Errorf("%d udp-oversize refusals for datagrams that fit", n)
	}

	// The capture cannot give back more than 65,507 bytes (an IPv4 client): dropped, counted.
	a.Deliver(ipAddr(echo), make([]byte, upstream.MaxDatagram+20))
	waitCount(t, e.r.book, refusal.Oversize, 1)
	select {
	case got := <-ret.replies:
		t.Errorf("a %d-byte reply went back; want none", len(got))
	case <-time.After(50 * time.Millisecond):
	}
	// The association cannot send it: dropped, counted, and the flow goes on.
	a.WriteErr(fmt.Errorf("fake: %w", upstream.ErrTooLarge))
	e.r.HandleUDP(Datagram{Src: guest, Dst: echo, Payload: []byte("too big")}, ret)
	waitCount(t, e.r.book, refusal.Oversize, 2)
	a.Deliver(ipAddr(echo), []byte("still here"))
	select {
	case got := <-ret.replies:
		if string(got) != "still here" {
			t.Errorf("reply %q; want %q", got, "still here")
		}
	case <-time.After(waitFor):
		t.Fatal("the flow ended with the drops")
	}
}

func waitCount(t *testing.T, b *refusal.Book, r refusal.Reason, want uint64) {
	t.Helper()
	if !wait.Poll(waitFor, func() bool { return b.Count(r) >= want }) {
		t.Fatalf("%s refusals %d; want %d", r, b.Count(r), want)
	}
}
