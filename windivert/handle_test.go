package windivert_test

import (
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentcage/router/windivert"
	"github.com/agentcage/router/windivert/packet"
	"github.com/agentcage/router/windivert/windiverttest"
)

func synPacket(t *testing.T) []byte {
	t.Helper()
	return packet.MustBuild(packet.Spec{
		Src: netip.MustParseAddrPort("192.0.2.10:50000"), Dst: netip.MustParseAddrPort("198.51.100.7:443"),
		Proto: packet.ProtoTCP, TCPFlags: packet.TCPSyn,
	})
}

func TestCheckOpenArgs(t *testing.T) {
	tests := []struct {
		name    string
		layer   windivert.Layer
		prio    int16
		flags   windivert.Flag
		wantErr string
	}{
		{"network divert", windivert.LayerNetwork, 0, 0, ""},
		{"socket sniff", windivert.LayerSocket, 1041, windivert.FlagSniff | windivert.FlagRecvOnly, ""},
		{"flow sniff", windivert.LayerFlow, 0, windivert.FlagSniff | windivert.FlagRecvOnly, ""},
		{"network drop", windivert.LayerNetwork, 30000, windivert.FlagDrop, ""},
		{"fragments network", windivert.LayerNetwork, 0, windivert.FlagFragments, ""},
		{"bad layer", 5, 0, 0, "unknown layer"},
		{"priority high", windivert.LayerNetwork, 30001, 0, "priority 30001 outside"},
		{"priority low", windivert.LayerNetwork, -30001, 0, "outside"},
		{"unknown flag", windivert.LayerNetwork, 0, 0x40, "unknown flags"},
		{"sniff drop", windivert.LayerNetwork, 0, windivert.FlagSniff | windivert.FlagDrop, "SNIFF and DROP"},
		{"recv send only", windivert.LayerNetwork, 0, windivert.FlagRecvOnly | windivert.FlagSendOnly, "RECV_ONLY and SEND_ONLY"},
		{"flow needs sniff", windivert.LayerFlow, 0, windivert.FlagRecvOnly, "needs flags SNIFF and RECV_ONLY"},
		{"reflect needs recv only", windivert.LayerReflect, 0, windivert.FlagSniff, "needs flags SNIFF and RECV_ONLY"},
		{"socket needs recv only", windivert.LayerSocket, 0, windivert.FlagSniff, "needs flag RECV_ONLY"},
		{"fragments at socket", windivert.LayerSocket, 0, windivert.FlagSniff | windivert.FlagRecvOnly | windivert.FlagFragments, "FRAGMENTS needs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := windivert.CheckOpenArgs(tt.layer, tt.prio, tt.flags)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("err = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestOpen(t *testing.T) {
	t.Run("bad args never reach the driver", func(t *testing.T) {
		d := windiverttest.NewDriver()
		_, err := windivert.Open(d, "true", windivert.LayerSocket, 0, 0)
		var we *windivert.Error
		if !errors.As(err, &we) || we.Op != "open" {
			t.Fatalf("err = %v, want *Error with Op open", err)
		}
		if n := len(d.Handles()); n != 0 {
			t.Errorf("driver saw %d opens, want 0", n)
		}
	})
	t.Run("driver error is explained", func(t *testing.T) {
		d := windiverttest.NewDriver()
		d.OpenErr = func(string, windivert.Layer, int16, windivert.Flag) error { return windivert.ErrAccessDenied }
		_, err := windivert.Open(d, "tcp", windivert.LayerNetwork, 5, 0)
		if !errors.Is(err, windivert.ErrAccessDenied) {
			t.Fatalf("err = %v, want ErrAccessDenied", err)
		}
		for _, want := range []string{"windivert: open NETWORK handle (priority 5", "Administrator", "Windows error 5"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("message %q lacks %q", err, want)
			}
		}
	})
	t.Run("old driver refused and closed", func(t *testing.T) {
		d := windiverttest.NewDriver()
		d.Major = 1
		_, err := windivert.Open(d, "tcp", windivert.LayerNetwork, 0, 0)
		if err == nil || !strings.Contains(err.Error(), "driver version 1.x") {
			t.Fatalf("err = %v, want a version error", err)
		}
		if hs := d.Handles(); len(hs) != 1 || !hs[0].Closed() {
			t.Errorf("the probe handle was not closed")
		}
	})
	t.Run("accessors", func(t *testing.T) {
		d := windiverttest.NewDriver()
		h, err := windivert.Open(d, "tcp", windivert.LayerNetwork, -7, windivert.FlagSniff)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		if h.Filter() != "tcp" || h.Layer() != windivert.LayerNetwork || h.Priority() != -7 || h.Flags() != windivert.FlagSniff {
			t.Errorf("accessors = %q %v %d %v", h.Filter(), h.Layer(), h.Priority(), h.Flags())
		}
		if got := h.String(); got != `NETWORK/-7 "tcp"` {
			t.Errorf("String = %q", got)
		}
	})
}

func TestRecvSend(t *testing.T) {
	d := windiverttest.NewDriver()
	h, err := windivert.Open(d, "tcp", windivert.LayerNetwork, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	fh := d.Handles()[0]
	syn := synPacket(t)
	var in windivert.Address
	in.SetOutbound(true)
	in.SetNetwork(windivert.NetworkData{IfIdx: 3})
	fh.Deliver(syn, in)
	fh.Deliver(syn, in)

	t.Run("batch", func(t *testing.T) {
		buf := make([]byte, windivert.MTUMax)
		addrs := make([]windivert.Address, 8)
		n, count, err := h.RecvEx(buf, addrs)
		if err != nil || n != 2*len(syn) || count != 2 {
			t.Fatalf("RecvEx = %d, %d, %v; want %d, 2, nil", n, count, err, 2*len(syn))
		}
		seen, err := packet.SplitBatch(buf[:n], func(i int, p packet.Packet) error {
			if p.DstPort() != 443 || addrs[i].Network().IfIdx != 3 || !addrs[i].Outbound() {
				t.Errorf("packet %d: port %d ifIdx %d outbound %v", i, p.DstPort(), addrs[i].Network().IfIdx, addrs[i].Outbound())
			}
			return nil
		})
		if err != nil || seen != 2 {
			t.Errorf("SplitBatch = %d, %v", seen, err)
		}
		if _, err := h.SendEx(buf[:n], addrs[:count]); err != nil {
			t.Fatalf("SendEx: %v", err)
		}
		if got := fh.Sent(); len(got) != 2 {
			t.Errorf("sent %d packets, want 2", len(got))
		}
	})
	t.Run("batch bounds", func(t *testing.T) {
		if _, _, err := h.RecvEx(make([]byte, 10), nil); err == nil {
			t.Errorf("RecvEx with no addresses succeeded")
		}
		if _, err := h.SendEx(syn, make([]windivert.Address, windivert.BatchMax+1)); err == nil {
			t.Errorf("SendEx with 256 addresses succeeded")
		}
	})
	t.Run("truncation", func(t *testing.T) {
		fh.Deliver(syn, in)
		var a windivert.Address
		n, err := h.Recv(make([]byte, 10), &a)
		if n != 10 || !errors.Is(err, windivert.ErrInsufficientBuffer) {
			t.Errorf("Recv = %d, %v; want 10, ErrInsufficientBuffer", n, err)
		}
	})
	t.Run("params", func(t *testing.T) {
		if err := h.SetParam(windivert.ParamQueueLength, windivert.QueueLengthMax); err != nil {
			t.Fatal(err)
		}
		if v, err := h.GetParam(windivert.ParamQueueLength); err != nil || v != windivert.QueueLengthMax {
			t.Errorf("GetParam = %d, %v", v, err)
		}
		if v, err := h.GetParam(windivert.ParamVersionMinor); err != nil || v != 2 {
			t.Errorf("minor version = %d, %v", v, err)
		}
		for _, c := range []struct {
			p windivert.Param
			v uint64
		}{
			{windivert.ParamQueueLength, windivert.QueueLengthMax + 1},
			{windivert.ParamQueueTime, windivert.QueueTimeMin - 1},
			{windivert.ParamQueueSize, 1},
			{windivert.ParamVersionMajor, 2},
			{9, 1},
		} {
			if err := h.SetParam(c.p, c.v); err == nil {
				t.Errorf("SetParam(%d, %d) accepted", c.p, c.v)
			}
		}
	})
}

func TestShutdownReleasesRecv(t *testing.T) {
	d := windiverttest.NewDriver()
	h, err := windivert.Open(d, "tcp", windivert.LayerNetwork, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh := d.Handles()[0]
	fh.Deliver(synPacket(t), windivert.Address{})
	errc := make(chan error, 1)
	got := make(chan int, 1)
	go func() {
		buf := make([]byte, windivert.MTUMax)
		var a windivert.Address
		n := 0
		for {
			if _, err := h.Recv(buf, &a); err != nil {
				got <- n
				errc <- err
				return
			}
			n++
		}
	}()
	if !fh.WaitReceivers(1, 5*time.Second) { // the loop took the packet and blocks in Recv
		t.Fatal("the receive loop never blocked on the empty queue")
	}
	if err := h.Shutdown(windivert.ShutdownRecv); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, windivert.ErrShutdown) {
			t.Errorf("receive loop ended with %v, want ErrShutdown", err)
		}
		if n := <-got; n != 1 {
			t.Errorf("received %d packets before shutdown, want 1", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Recv still blocked 5 s after Shutdown")
	}
	if err := h.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestCloseContract(t *testing.T) {
	d := windiverttest.NewDriver()
	h, err := windivert.Open(d, "tcp", windivert.LayerNetwork, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh := d.Handles()[0]
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ { // four goroutines blocked in Recv
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := h.RecvEx(make([]byte, 2048), make([]windivert.Address, 4))
			errs <- err
		}()
	}
	if !fh.WaitReceivers(4, 5*time.Second) {
		t.Fatal("the four receivers never blocked")
	}
	done := make(chan error, 1)
	go func() { done <- h.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return within 5 s")
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, windivert.ErrShutdown) {
			t.Errorf("blocked Recv returned %v, want ErrShutdown", err)
		}
	}
	if !fh.Closed() {
		t.Errorf("driver handle not closed")
	}
	var a windivert.Address
	for name, call := range map[string]func() error{
		"Recv":     func() error { _, err := h.Recv(nil, &a); return err },
		"Send":     func() error { _, err := h.Send(synPacket(t), &a); return err },
		"Shutdown": func() error { return h.Shutdown(windivert.ShutdownBoth) },
		"GetParam": func() error { _, err := h.GetParam(windivert.ParamQueueLength); return err },
		"Close":    h.Close,
	} {
		if err := call(); !errors.Is(err, windivert.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}

func TestErrnoMessages(t *testing.T) {
	for _, c := range []struct {
		e    windivert.Errno
		want string
	}{
		{2, "WinDivert64.sys was not found"},
		{5, "Administrator"},
		{87, "filter string"},
		{577, "signature"},
		{654, "incompatible WinDivert version"},
		{1058, "disabled"},
		{1060, "NO_INSTALL"},
		{1275, "blocked"},
		{1753, "Base Filtering Engine"},
		{99999, "Windows error 99999"},
	} {
		if got := c.e.Error(); !strings.Contains(got, c.want) {
			t.Errorf("Errno(%d) = %q, want it to contain %q", uint32(c.e), got, c.want)
		}
	}
}
