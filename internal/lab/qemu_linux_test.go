//go:build linux

package lab

import (
	"bytes"
	"compress/gzip"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/roottest"
)

// TestWriteInitramfs reads the archive back header by header: the members in order, their
// modes, sizes, data and the 4-byte alignment the kernel's unpacker needs.
func TestWriteInitramfs(t *testing.T) {
	entries := []CPIOEntry{
		{Name: "bin", Mode: fs.ModeDir | 0o755},
		{Name: "dev/console", Mode: fs.ModeDevice | fs.ModeCharDevice | 0o600, Major: 5, Minor: 1},
		{Name: "/bin/sh", Mode: 0o755, Data: []byte("#!x\n")},
		{Name: "init", Mode: 0o755, Data: []byte("12345")},
	}
	var buf bytes.Buffer
	if err := WriteInitramfs(&buf, entries); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	want := []struct {
		name  string
		mode  uint64
		data  string
		minor uint64
	}{
		{"bin", 0o040755, "", 0},
		{"dev/console", 0o020600, "", 1},
		{"bin/sh", 0o100755, "#!x\n", 0},
		{"init", 0o100755, "12345", 0},
		{"TRAILER!!!", 0, "", 0},
	}
	field := func(h []byte, i int) uint64 {
		v, err := strconv.ParseUint(string(h[6+8*i:6+8*i+8]), 16, 32)
		if err != nil {
			t.Fatalf("header field %d: %v", i, err)
		}
		return v
	}
	off := 0
	for _, w := range want {
		if off%4 != 0 || len(b) < off+110 || string(b[off:off+6]) != "070701" {
			t.Fatalf("member %s: no newc header at %d", w.name, off)
		}
		h := b[off : off+110]
		size, namesize := int(field(h, 6)), int(field(h, 11))
		name := string(b[off+110 : off+110+namesize-1])
		if name != w.name || field(h, 1) != w.mode || field(h, 10) != w.minor {
			t.Errorf("member %q mode %o minor %d; want %q %o %d", name, field(h, 1), field(h, 10), w.name, w.mode, w.minor)
		}
		off += 110 + namesize
		off += (4 - off%4) % 4
		if got := string(b[off : off+size]); got != w.data {
			t.Errorf("member %s: data %q, want %q", name, got, w.data)
		}
		off += size
		off += (4 - off%4) % 4
	}
	if off != len(b) {
		t.Errorf("%d bytes after the trailer", len(b)-off)
	}
	for _, bad := range []CPIOEntry{{Name: ""}, {Name: "../x", Mode: 0o644}, {Name: "l", Mode: fs.ModeSymlink | 0o777}, {Name: "d", Mode: fs.ModeDir, Data: []byte("x")}} {
		if err := WriteInitramfs(&bytes.Buffer{}, []CPIOEntry{bad}); err == nil {
			t.Errorf("member %+v: no error", bad)
		}
	}
}

// TestQEMUGuest boots a real QEMU guest (TCG) behind its user networking in a lab without a
// router: it takes QEMU's lease, runs commands with their output and status, has its script
// killed at its timeout, and reaches the echo server, which sees the host's own address.
func TestQEMUGuest(t *testing.T) {
	roottest.Require(t, append(labTools, QEMUBinary, "busybox")...)
	l := newTestLab(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g, err := l.StartQEMUGuest(ctx, QEMUOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("boot to lease: %v", g.Boot)
	if g.Addr != QEMUGuestAddr || g.Gateway != QEMUGateway || g.DNS != QEMUDNS {
		t.Errorf("lease %s via %s dns %s; want %s via %s dns %s", g.Addr, g.Gateway, g.DNS, QEMUGuestAddr, QEMUGateway, QEMUDNS)
	}
	if !strings.HasPrefix(g.Addr6, "fec0::") {
		t.Errorf("IPv6 address %q; want one in fec0::/64 from QEMU's router advertisement", g.Addr6)
	}
	out, code, err := g.Run(ctx, 5*time.Second, "echo one; echo two >&2; exit 3")
	if err != nil || code != 3 || out != "one\ntwo\n" {
		t.Errorf("Run: %q, exit %d, %v; want \"one\\ntwo\\n\", exit 3", out, code, err)
	}
	if _, code, err := g.Run(ctx, time.Second, "sleep 30"); err != nil || code != 137 {
		t.Errorf("Run past its timeout: exit %d, %v; want 137 (killed)", code, err)
	}
	out, code, err = g.Run(ctx, 10*time.Second, "wget -q -O - "+EchoURL)
	if err != nil || code != 0 || strings.TrimSpace(out) != HostUplinkAddr {
		t.Errorf("wget %s: %q, exit %d, %v; want the host's %s", EchoURL, out, code, err, HostUplinkAddr)
	}
	if _, _, err := g.Run(ctx, time.Second, strings.Repeat("x", maxGuestScript+1)); err == nil {
		t.Error("Run took a script over the limit")
	}
	if t.Failed() {
		t.Logf("serial:\n%s", g.Serial())
	}
}

// TestModuleChain: a module's file comes last, after what it needs in the reverse of
// modules.dep's order (what it needs nearest first), names compared with - as _.
func TestModuleChain(t *testing.T) {
	dir := t.TempDir()
	dep := "kernel/drivers/net/virtio_net.ko.xz: kernel/drivers/net/net_failover.ko.xz kernel/net/core/failover.ko.xz kernel/drivers/virtio/virtio.ko\n" +
		"kernel/drivers/net/ethernet/intel/e1000/e1000.ko:\n" +
		"kernel/drivers/x/snd-hda.ko.zst:\n"
	if err := os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(dep), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]string{
		"virtio_net": {"kernel/drivers/virtio/virtio.ko", "kernel/net/core/failover.ko.xz", "kernel/drivers/net/net_failover.ko.xz", "kernel/drivers/net/virtio_net.ko.xz"},
		"e1000":      {"kernel/drivers/net/ethernet/intel/e1000/e1000.ko"},
		"snd_hda":    {"kernel/drivers/x/snd-hda.ko.zst"},
	} {
		got, err := moduleChain(dir, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i := range want {
			want[i] = filepath.Join(dir, want[i])
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	if _, err := moduleChain(dir, "e100"); err == nil {
		t.Error("e100: no error for a module modules.dep does not list")
	}
}

// TestReadModule reads a module plain and compressed as the distributions ship them (with
// the xz and zstd tools, which scripts/test installs).
func TestReadModule(t *testing.T) {
	roottest.Require(t, "xz", "zstd")
	dir := t.TempDir()
	want := bytes.Repeat([]byte("\x7fELF module "), 100)
	plain := filepath.Join(dir, "m.ko")
	if err := os.WriteFile(plain, want, 0o644); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(want)
	zw.Close()
	if err := os.WriteFile(plain+".gz", gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tool := range [][]string{{"xz", "-k", plain}, {"zstd", "-q", "-k", plain}} {
		if out, err := exec.Command(tool[0], tool[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", tool, err, out)
		}
	}
	for _, f := range []string{plain, plain + ".gz", plain + ".xz", plain + ".zst"} {
		got, err := readModule(context.Background(), f)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, %v; want the %d bytes of the module", filepath.Base(f), len(got), err, len(want))
		}
	}
	if _, err := readModule(context.Background(), filepath.Join(dir, "m.ko.bz2")); err == nil {
		t.Error("m.ko.bz2: no error")
	}
}
