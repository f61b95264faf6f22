//go:build linux

package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/agentcage/router/internal/lab"
	"github.com/agentcage/router/internal/wait"
)

// TestSockmapCarriesTheBytes: with the sockmap on, a proxied download's
// bytes move in the kernel: the router's eBPF cookie map holds
// the flow's two sockets, and its shared counters count the redirected bytes; the guest
// gets every byte in order, and nothing leaks.
func TestSockmapCarriesTheBytes(t *testing.T) {
	cfg := strings.Replace(config(lab.GoSocksAddr, ""), "[relay]\n", "[relay]\nsockmap = true\n", 1)
	s := newScene(t, cfg)
	ln, err := s.lab.Inet().Listen(s.ctx, "tcp", lab.ServiceAddr+":9050")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const size = 64 << 20
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(9, 9))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		// The server sends only when asked: a flow enters the sockmap at its start, when
		// neither direction has bytes on the way (a download already streaming when the
		// relay starts stays spliced, which on a loaded machine is a matter of timing).
		c.SetReadDeadline(time.Now().Add(time.Minute))
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			return
		}
		c.Write(data)
	}()
	c, err := s.lab.Guest().Dial(s.ctx, "tcp", lab.ServiceAddr+":9050")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	// The flow is in the sockmap: its two sockets are in the router's map (cookie -> slot).
	var maps map[string]*ebpf.Map
	wait.For(t, "the flow's sockets in the router's sockmap (its maps router_cookies, router_state and router_socks)", 10*time.Second, func() bool {
		maps = routerMaps(t, s.router.PID())
		return maps != nil && countEntries(t, maps["router_cookies"]) == 2
	})
	if _, err := c.Write([]byte{'g'}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 0, size)
	buf := make([]byte, 4<<20)
	for len(got) < size {
		n, err := io.ReadFull(c, buf[:min(len(buf), size-len(got))])
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := c.Read(buf); n != 0 {
		t.Fatalf("%d bytes more than sent", n)
	}
	if len(got) != size || sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("the guest got %d of %d bytes, or changed ones", len(got), size)
	}
	// The kernel moved bytes (how many depends on how often the reader here, which
	// pauses to look at the maps, fell behind: the router copies those stretches).
	red := uint64(0)
	if maps != nil {
		red = redirected(t, maps["router_state"])
	}
	if red == 0 {
		t.Error("the kernel redirected nothing")
	}
	t.Logf("the kernel redirected %d KiB of %d KiB", red>>10, size>>10)
	s.wantNoLeak("sockmap download")
}

// routerMaps opens the eBPF maps the process pid holds, by name; nil until it holds all three of
// the router's (it loads them at its first flow).
func routerMaps(t *testing.T, pid int) map[string]*ebpf.Map {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*ebpf.Map{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		for line := range bytes.Lines(b) {
			k, v, ok := strings.Cut(string(line), ":")
			if !ok || k != "map_id" {
				continue
			}
			id, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				continue
			}
			m, err := ebpf.NewMapFromID(ebpf.MapID(id))
			if err != nil {
				continue
			}
			t.Cleanup(func() { m.Close() })
			if info, err := m.Info(); err == nil {
				out[info.Name] = m
			}
		}
	}
	for _, name := range []string{"router_cookies", "router_state", "router_socks"} {
		if out[name] == nil {
			return nil // not loaded yet, or not all yet: the first flow to enter loads them
		}
	}
	return out
}

func countEntries(t *testing.T, m *ebpf.Map) int {
	t.Helper()
	var k uint64
	var v uint32
	n := 0
	it := m.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// redirected sums the redirected-bytes counter (the first 8 bytes) of every socket.
func redirected(t *testing.T, m *ebpf.Map) uint64 {
	t.Helper()
	var k uint32
	var v []byte
	var sum uint64
	it := m.Iterate()
	for it.Next(&k, &v) {
		sum += binary.NativeEndian.Uint64(v)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return sum
}
