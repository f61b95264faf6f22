package windiverttest

import (
	"errors"
	"testing"
	"time"

	"github.com/agentcage/router/internal/clock/clocktest"
	"github.com/agentcage/router/windivert"
)

// ipv4 is a minimal IPv4 packet with a one-byte mark in its payload.
func ipv4(mark byte) []byte {
	return []byte{0x45, 0, 0, 21, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, mark}
}

func open(t *testing.T, d *Driver, flags windivert.Flag) (uintptr, *Handle) {
	t.Helper()
	hv, err := d.Open("true", windivert.LayerNetwork, 0, flags)
	if err != nil {
		t.Fatal(err)
	}
	return hv, d.Handles()[len(d.Handles())-1]
}

// queued opens a handle on a driver whose clock moves only when the test advances it, with
// packets 1, 2, … queued on it, as old as ages says (the oldest first), and returns the
// driver, its clock and the handle's value.
func queued(t *testing.T, ages ...time.Duration) (*Driver, *clocktest.Clock, uintptr) {
	t.Helper()
	c := clocktest.New(time.Unix(1000, 0))
	d := NewDriver()
	d.Now = c.Now
	hv, h := open(t, d, 0)
	for i, age := range ages {
		if i > 0 {
			c.Advance(ages[i-1] - age)
		}
		h.Deliver(ipv4(byte(i+1)), windivert.Address{})
	}
	if len(ages) > 0 {
		c.Advance(ages[len(ages)-1])
	}
	return d, c, hv
}

// TestLastCloseReinjectsYoungPackets: the driver's cleanup re-injects the queued packets
// younger than QUEUE_TIME and drops the older ones; a SNIFF handle's are all dropped.
func TestLastCloseReinjectsYoungPackets(t *testing.T) {
	d, _, hv := queued(t, 2500*time.Millisecond, time.Second)
	cv, err := d.Copy(hv)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(hv); err != nil {
		t.Fatal(err)
	}
	if got := d.Reinjected(); len(got) != 0 {
		t.Fatalf("re-injected %d packets while a copy holds the object", len(got))
	}
	d.Close(cv)
	got := d.Reinjected()
	if len(got) != 1 || got[0].Packet[20] != 2 {
		t.Fatalf("re-injected %v, want packet 2 alone", got)
	}

	shv, sh := open(t, d, windivert.FlagSniff)
	sh.Deliver(ipv4(3), windivert.Address{})
	d.Close(shv)
	if n := len(d.Reinjected()); n != 1 {
		t.Errorf("a SNIFF handle's close re-injected packets (%d in all)", n)
	}
}

// TestShortestQueueTimeExpires: ExpireQueue's shortest QUEUE_TIME and wait make the last
// close drop the queue.
func TestShortestQueueTimeExpires(t *testing.T) {
	d, c, hv := queued(t, 0)
	if err := windivert.ExpireQueue(d, hv, c.Advance); err != nil {
		t.Fatal(err)
	}
	d.Close(hv)
	if got := d.Reinjected(); len(got) != 0 {
		t.Errorf("re-injected %d packets after the queue expired", len(got))
	}
}

// TestExpiredPacketsAreNotReceived: a receive drops the packets older than QUEUE_TIME.
func TestExpiredPacketsAreNotReceived(t *testing.T) {
	d, _, hv := queued(t, 3*time.Second, 0)
	buf := make([]byte, 100)
	n, err := d.Recv(hv, buf, nil)
	if err != nil || n != 21 || buf[20] != 2 {
		t.Fatalf("Recv = %d %v mark %d, want packet 2", n, err, buf[20])
	}
}

// TestShutdownActsOnTheSharedObject: a shutdown through one copy stops the object
// diverting for every copy.
func TestShutdownActsOnTheSharedObject(t *testing.T) {
	d := NewDriver()
	hv, h := open(t, d, 0)
	cv, err := d.Copy(hv)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(cv)
	if !h.Diverting() {
		t.Fatal("a new handle is not diverting")
	}
	d.Shutdown(hv, windivert.ShutdownBoth)
	d.Close(hv)
	if h.Closed() || h.Diverting() || !h.Orphan() {
		t.Errorf("held after a shutdown and the opener's close: closed=%v diverting=%v orphan=%v, want open, not diverting, orphan", h.Closed(), h.Diverting(), h.Orphan())
	}
	h.Deliver(ipv4(1), windivert.Address{})
	if h.Queued() != 0 {
		t.Error("a shut-down object queued a packet")
	}
}

// TestCloseOfOneCopyLeavesReceiversBlocked: closing a value while a copy keeps the
// object does not end a receive in progress; CancelIO does, and a Shared Handle's Close
// uses it and leaves the object diverting.
func TestCloseOfOneCopyLeavesReceiversBlocked(t *testing.T) {
	d := NewDriver()
	wh, err := windivert.Open(d, "true", windivert.LayerNetwork, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	h := d.Handles()[0]
	cv, err := d.Copy(wh.Raw())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(cv)
	if err := wh.Share(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := wh.Recv(make([]byte, 100), nil)
		done <- err
	}()
	if !h.WaitReceivers(1, 5*time.Second) {
		t.Fatal("the receive did not start")
	}
	if err := wh.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, windivert.ErrShutdown) {
			t.Errorf("the cancelled receive returned %v, want ErrShutdown", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close of a shared handle left its receive blocked")
	}
	if !h.Diverting() {
		t.Error("Close of a shared handle stopped the holder's copy diverting")
	}
}
