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
)

// TestSockmapCarriesTheBytes: with the default config (sockmap on), a proxied download's
// bytes move in the kernel: while it runs, the router's eBPF cookie map holds the flow's
// two sockets, and its shared counters count the redirected bytes; the guest gets every
// byte in order.
func TestSockmapCarriesTheBytes(t *testing.T) {
	s := newScene(t, config(lab.GoSocksAddr, ""))
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
		c.Write(data)
	}()
	c, err := s.lab.Guest().Dial(s.ctx, "tcp", lab.ServiceAddr+":9050")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	got := make([]byte, 0, size)
	buf := make([]byte, 1<<20)
	n, err := io.ReadFull(c, buf)
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, buf[:n]...)
	// Mid-way: the flow's sockets are in the router's map.
	maps := routerMaps(t, s.router.PID())
	if k := countEntries(t, maps["router_cookies"]); k != 2 {
		t.Errorf("the router's sockmap holds %d sockets mid-download, want the flow's 2", k)
	}
	rest, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, rest...)
	if len(got) != size || sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("the guest got %d of %d bytes, or changed ones", len(got), size)
	}
	// Most of the download went through the kernel (the first bytes may have been
	// spliced before the flow entered the map).
	if red := redirected(t, maps["router_state"]); red < size/2 {
		t.Errorf("the kernel redirected %d bytes of a %d-byte download", red, size)
	}
	s.wantNoLeak("sockmap download")
}

// routerMaps opens the eBPF maps the process pid holds, by name.
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
			t.Fatalf("the router holds no eBPF map %s (it holds %d maps)", name, len(out))
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
