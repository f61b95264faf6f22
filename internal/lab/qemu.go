//go:build linux

package lab

import (
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// QEMU guests (StartQEMUGuest): a real virtual machine, Debian's qemu-system-x86_64 under
// TCG (no KVM needed) behind QEMU's own user-space NAT (-netdev user, libslirp inside the
// QEMU process), booting the machine's Debian kernel and an initramfs built here: the static
// busybox, the NIC's driver modules and an init that takes a DHCP lease and then runs the
// commands the test sends on the serial line. QEMU runs in the lab's host namespace, so its
// NAT connects out as the qemu process itself, as on a workstation.
const (
	QEMUBinary = "qemu-system-x86_64"
	// QEMUNIC is the guest's network card; its driver is a module of Debian's kernel.
	QEMUNIC = "e1000"
	// QEMUGuestAddr, QEMUGateway and QEMUDNS are QEMU's user networking defaults: the
	// guest's leased address, the gateway that leads to the host's loopback, the resolver
	// QEMU forwards to the host's resolver.
	QEMUGuestAddr = "10.0.2.15"
	QEMUGateway   = "10.0.2.2"
	QEMUDNS       = "10.0.2.3"
	// QEMUGateway6 is the IPv6 gateway (the host's ::1); the guest takes an address in
	// fec0::/64 from QEMU's router advertisement.
	QEMUGateway6 = "fec0::2"
)

// QEMUOptions tune StartQEMUGuest. The zero value boots the newest /boot kernel with 256 MiB.
type QEMUOptions struct {
	// Name is QEMU's -name argument, none when empty: "VM,process=VM" makes QEMU rename its
	// process to VM, as quickemu does.
	Name string
	// Files are more files for the initramfs, executable: the path in the guest (absolute)
	// to the path of the file on this machine, e.g. {"/bin/router": "/tmp/x/router"}.
	Files map[string]string
	// Kernel is the kernel image (default the newest /boot/vmlinuz-*); its modules are read
	// from /lib/modules/VERSION, VERSION being what follows "vmlinuz-" in its name.
	Kernel string
	// MemoryMiB is the guest's memory (default 256).
	MemoryMiB int
	// BootTimeout bounds the boot, from QEMU's start to the guest's lease (default 180 s: a
	// TCG boot takes 9 s on an idle machine, over a minute on a busy one).
	BootTimeout time.Duration
}

// QEMUGuest is a running QEMU virtual machine. Run is safe for concurrent use (commands run
// one at a time).
type QEMUGuest struct {
	Proc *Process
	// Addr, Gateway and DNS are what the guest's DHCP lease said; Addr6 is its IPv6
	// address from QEMU's router advertisement, "" when it had none 5 s after the lease.
	Addr, Gateway, DNS, Addr6 string
	// Boot is the time from QEMU's start to the guest's lease.
	Boot time.Duration

	serial *serialLog
	mu     sync.Mutex // one command at a time; guards stdin and seq
	stdin  io.WriteCloser
	seq    int
}

// StartQEMUGuest boots a QEMU guest in the host namespace and waits until it holds a DHCP
// lease and reads commands. It needs qemu-system-x86_64 (Debian: qemu-system-x86), a kernel
// in /boot with its modules (linux-image-amd64) and a static busybox (busybox-static); a
// module compressed with xz or zstd needs xz or zstd. The lab's Close ends QEMU (by PID and
// process group) and removes the initramfs, whether or not the boot succeeded.
func (l *Lab) StartQEMUGuest(ctx context.Context, opts QEMUOptions) (*QEMUGuest, error) {
	if opts.MemoryMiB <= 0 {
		opts.MemoryMiB = 256
	}
	if opts.BootTimeout <= 0 {
		opts.BootTimeout = 180 * time.Second
	}
	qemu, err := exec.LookPath(QEMUBinary)
	if err != nil {
		return nil, fmt.Errorf("qemu guest: %s not found (Debian: apt-get install qemu-system-x86): %w", QEMUBinary, err)
	}
	kernel, modDir, err := findKernel(opts.Kernel)
	if err != nil {
		return nil, fmt.Errorf("qemu guest: %w", err)
	}
	dir, err := os.MkdirTemp("", l.id+"-qemu-")
	if err != nil {
		return nil, fmt.Errorf("qemu guest: %w", err)
	}
	l.addUndo(func() error { return os.RemoveAll(dir) })
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := buildQEMUInitramfs(ctx, initrd, modDir, opts.Files); err != nil {
		return nil, fmt.Errorf("qemu guest: %w", err)
	}
	args := []string{"-accel", "tcg", "-m", strconv.Itoa(opts.MemoryMiB), "-smp", "1",
		"-nodefaults", "-no-user-config", "-no-reboot", "-display", "none", "-serial", "stdio",
		"-kernel", kernel, "-initrd", initrd, "-append", qemuCmdline,
		"-netdev", "user,id=n0", "-device", QEMUNIC + ",netdev=n0"}
	if opts.Name != "" {
		args = append(args, "-name", opts.Name)
	}
	g := &QEMUGuest{serial: newSerialLog()}
	cmd := l.host.Command(context.Background(), qemu, args...)
	cmd.Stdout = g.serial
	if g.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("qemu guest: %w", err)
	}
	start := time.Now()
	p, err := StartProcess("qemu", cmd)
	if err != nil {
		return nil, fmt.Errorf("qemu guest: %w", err)
	}
	g.Proc = p
	l.addUndo(func() error {
		g.stdin.Close()
		return p.Stop(2 * time.Second)
	})
	ready := regexp.MustCompile(`@@(READY ([0-9.]+) ([0-9.]+) ([0-9.]+) ([0-9a-f:]+|-)|NOLEASE)@@`)
	m, err := g.serial.wait(ctx, 0, ready, opts.BootTimeout, p)
	if err != nil {
		return nil, fmt.Errorf("qemu guest: boot: %w\nserial:\n%s\nqemu:\n%s", err, g.serial.tail(4096), p.Output())
	}
	if m[1] == "NOLEASE" {
		return nil, fmt.Errorf("qemu guest: no DHCP lease from QEMU's user networking\nserial:\n%s", g.serial.tail(4096))
	}
	g.Boot = time.Since(start)
	g.Addr, g.Gateway, g.DNS = m[2], m[3], m[4]
	if m[5] != "-" {
		g.Addr6 = m[5]
	}
	l.logf("lab %s: qemu guest (pid %d, -name %q) up in %v: %s via %s, dns %s, ipv6 %q", l.id, p.PID(), opts.Name,
		g.Boot.Round(time.Millisecond), g.Addr, g.Gateway, g.DNS, g.Addr6)
	return g, nil
}

// qemuCmdline is the guest kernel's command line: the console on the serial line, quiet,
// power off at a panic (with -no-reboot), and no_timer_check: under TCG on a busy machine
// the kernel's check that the timer interrupt ticks can fail and panic the boot ("IO-APIC +
// timer doesn't work!").
const qemuCmdline = "console=ttyS0 quiet panic=-1 no_timer_check"

// maxGuestScript bounds a command: it travels base64-encoded on one line of the guest's
// terminal, whose line buffer holds 4095 bytes.
const maxGuestScript = 2800

// Run runs script with the guest's busybox sh (stderr joined to stdout) and returns its
// output and exit status. The guest kills the script after timeout (whole seconds, at least
// 1); Run waits 15 s more for the answer before it returns an error, as it does when ctx
// ends or QEMU exits. Exit status 137 means the guest killed the script.
func (g *QEMUGuest) Run(ctx context.Context, timeout time.Duration, script string) (string, int, error) {
	if len(script) > maxGuestScript {
		return "", -1, fmt.Errorf("qemu guest: script of %d bytes, at most %d", len(script), maxGuestScript)
	}
	secs := int((timeout + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seq++
	n := g.seq
	from := g.serial.len()
	line := fmt.Sprintf("%d %d %s\n", n, secs, base64.StdEncoding.EncodeToString([]byte(script)))
	if _, err := io.WriteString(g.stdin, line); err != nil {
		return "", -1, fmt.Errorf("qemu guest: send command: %w", err)
	}
	done := regexp.MustCompile(`(?s)@@BEGIN ` + strconv.Itoa(n) + `@@\n(.*?)@@END ` + strconv.Itoa(n) + ` (\d+)@@`)
	m, err := g.serial.wait(ctx, from, done, time.Duration(secs)*time.Second+15*time.Second, g.Proc)
	if err != nil {
		return "", -1, fmt.Errorf("qemu guest: command %d: %w\nserial:\n%s", n, err, g.serial.tail(2048))
	}
	code, _ := strconv.Atoi(m[2])
	return m[1], code, nil
}

// Serial is everything the guest wrote on its console so far (carriage returns removed).
func (g *QEMUGuest) Serial() string { return g.serial.tail(-1) }

// serialLog keeps what the guest writes on its serial console and wakes its waiters.
type serialLog struct {
	mu      sync.Mutex
	buf     []byte
	changed chan struct{} // closed and replaced at each write
}

func newSerialLog() *serialLog { return &serialLog{changed: make(chan struct{})} }

func (s *serialLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = append(s.buf, bytes.ReplaceAll(p, []byte("\r"), nil)...)
	close(s.changed)
	s.changed = make(chan struct{})
	return len(p), nil
}

func (s *serialLog) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buf)
}

// tail returns the last n bytes (all when n < 0).
func (s *serialLog) tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n < 0 || n > len(s.buf) {
		n = len(s.buf)
	}
	return string(s.buf[len(s.buf)-n:])
}

// wait returns the submatches of re's first match in the log from offset from, waiting for
// it at most timeout, until ctx ends or p exits.
func (s *serialLog) wait(ctx context.Context, from int, re *regexp.Regexp, timeout time.Duration, p *Process) ([]string, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		s.mu.Lock()
		m := re.FindSubmatch(s.buf[from:])
		changed := s.changed
		s.mu.Unlock()
		if m != nil {
			out := make([]string, len(m))
			for i, b := range m {
				out[i] = string(b)
			}
			return out, nil
		}
		select {
		case <-changed:
		case <-p.done:
			return nil, fmt.Errorf("qemu exited (%v) waiting for %s", p.err, re)
		case <-timer.C:
			return nil, fmt.Errorf("no %s within %v", re, timeout)
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %s: %w", re, ctx.Err())
		}
	}
}

// findKernel returns the kernel image (kernel, or the newest /boot/vmlinuz-*) and its
// modules' directory.
func findKernel(kernel string) (image, modDir string, err error) {
	if kernel == "" {
		images, _ := filepath.Glob("/boot/vmlinuz-*")
		if len(images) == 0 {
			return "", "", errors.New("no kernel /boot/vmlinuz-* (Debian: apt-get install linux-image-amd64)")
		}
		slices.Sort(images)
		kernel = images[len(images)-1]
	}
	version, ok := strings.CutPrefix(filepath.Base(kernel), "vmlinuz-")
	if !ok {
		return "", "", fmt.Errorf("kernel %s: the name is not vmlinuz-VERSION", kernel)
	}
	if _, err := os.Stat(kernel); err != nil {
		return "", "", fmt.Errorf("kernel: %w", err)
	}
	modDir = filepath.Join("/lib/modules", version)
	if _, err := os.Stat(filepath.Join(modDir, "modules.dep")); err != nil {
		return "", "", fmt.Errorf("kernel %s: its modules: %w", kernel, err)
	}
	return kernel, modDir, nil
}

// moduleChain returns the files of module name and of the modules it needs, from
// modules.dep, in the order to load them (what it needs first).
func moduleChain(modDir, name string) ([]string, error) {
	dep, err := os.ReadFile(filepath.Join(modDir, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", name, err)
	}
	for _, line := range strings.Split(string(dep), "\n") {
		file, deps, ok := strings.Cut(line, ":")
		if !ok || moduleName(file) != name {
			continue
		}
		// modules.dep lists what a module needs nearest first: load them in reverse.
		chain := strings.Fields(deps)
		slices.Reverse(chain)
		chain = append(chain, file)
		for i, f := range chain {
			chain[i] = filepath.Join(modDir, f)
		}
		return chain, nil
	}
	return nil, fmt.Errorf("module %s: not in %s/modules.dep (built into the kernel?)", name, modDir)
}

// moduleName is the module's name of a path in modules.dep ("kernel/.../e1000.ko.xz" is
// e1000).
func moduleName(file string) string {
	base := path.Base(file)
	base, _, _ = strings.Cut(base, ".ko")
	return strings.ReplaceAll(base, "-", "_")
}

// readModule reads a module file, decompressed (.ko, .ko.gz, .ko.xz, .ko.zst).
func readModule(ctx context.Context, file string) ([]byte, error) {
	var tool []string
	switch {
	case strings.HasSuffix(file, ".ko"):
		return os.ReadFile(file)
	case strings.HasSuffix(file, ".ko.gz"):
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("module %s: %w", file, err)
		}
		return io.ReadAll(zr)
	case strings.HasSuffix(file, ".ko.xz"):
		tool = []string{"xz", "-dc", file}
	case strings.HasSuffix(file, ".ko.zst"):
		tool = []string{"zstd", "-dcq", file}
	default:
		return nil, fmt.Errorf("module %s: unknown compression", file)
	}
	out, err := exec.CommandContext(ctx, tool[0], tool[1:]...).Output()
	if err != nil {
		return nil, fmt.Errorf("module %s: %s (Debian: apt-get install xz-utils zstd): %w", file, tool[0], err)
	}
	return out, nil
}

// staticBusybox returns the static busybox's bytes.
func staticBusybox() ([]byte, error) {
	bin, err := exec.LookPath("busybox")
	if err != nil {
		return nil, fmt.Errorf("busybox not found (Debian: apt-get install busybox-static): %w", err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		return nil, fmt.Errorf("busybox %s: %w", bin, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			f.Close()
			return nil, fmt.Errorf("busybox %s is dynamically linked (Debian: apt-get install busybox-static)", bin)
		}
	}
	f.Close()
	return os.ReadFile(bin)
}

// buildQEMUInitramfs writes the guest's initramfs to file: busybox, the NIC's modules, the
// files and the init.
func buildQEMUInitramfs(ctx context.Context, file, modDir string, files map[string]string) error {
	bb, err := staticBusybox()
	if err != nil {
		return err
	}
	chain, err := moduleChain(modDir, QEMUNIC)
	if err != nil {
		return err
	}
	dirs := map[string]bool{}
	entries := []CPIOEntry{}
	addDir := func(d string) {
		var parents []string
		for ; d != "." && d != "/" && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			parents = append(parents, d)
		}
		slices.Reverse(parents)
		for _, p := range parents {
			entries = append(entries, CPIOEntry{Name: p, Mode: fs.ModeDir | 0o755})
		}
	}
	for _, d := range []string{"bin", "dev", "proc", "sys", "tmp", "etc", "modules"} {
		addDir(d)
	}
	entries = append(entries,
		CPIOEntry{Name: "dev/console", Mode: fs.ModeDevice | fs.ModeCharDevice | 0o600, Major: 5, Minor: 1},
		CPIOEntry{Name: "bin/busybox", Mode: 0o755, Data: bb})
	var insmod []string
	for i, m := range chain {
		data, err := readModule(ctx, m)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("modules/%02d-%s.ko", i, moduleName(m))
		entries = append(entries, CPIOEntry{Name: name, Mode: 0o644, Data: data})
		insmod = append(insmod, "insmod /"+name)
	}
	guestPaths := make([]string, 0, len(files))
	for p := range files {
		guestPaths = append(guestPaths, p)
	}
	slices.Sort(guestPaths)
	for _, p := range guestPaths {
		data, err := os.ReadFile(files[p])
		if err != nil {
			return fmt.Errorf("initramfs file %s: %w", p, err)
		}
		name := strings.TrimPrefix(path.Clean(p), "/")
		addDir(path.Dir(name))
		entries = append(entries, CPIOEntry{Name: name, Mode: 0o755, Data: data})
	}
	entries = append(entries,
		CPIOEntry{Name: "init", Mode: 0o755, Data: []byte(qemuInit(insmod))},
		CPIOEntry{Name: "etc/udhcpc.sh", Mode: 0o755, Data: []byte(udhcpcScript)})
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	if err := WriteInitramfs(f, entries); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	return nil
}

// udhcpcScript configures eth0 from busybox udhcpc's lease and records it in /tmp/lease.
const udhcpcScript = `#!/bin/sh
[ "$1" = bound ] || [ "$1" = renew ] || exit 0
ip -4 addr flush dev "$interface"
ip addr add "$ip/${mask:-24}" dev "$interface"
ip route add default via "$router" dev "$interface"
: > /etc/resolv.conf
for d in $dns; do echo "nameserver $d" >> /etc/resolv.conf; done
echo "$ip $router ${dns%% *}" > /tmp/lease
`

// qemuInit is the guest's /init: mount the pseudo file systems, load the NIC's modules,
// take a lease with udhcpc, wait (at most 5 s) for the IPv6 address of QEMU's router
// advertisement, say READY (or NOLEASE) on the console, then run each command
// line "SEQ SECONDS BASE64-SCRIPT" read from the console between BEGIN and END markers.
func qemuInit(insmod []string) string {
	return `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo 1 > /proc/sys/kernel/printk
stty -echo
` + strings.Join(insmod, "\n") + `
ip link set lo up
ip link set eth0 up
i=0
while [ "$(cat /sys/class/net/eth0/carrier 2>/dev/null)" != 1 ] && [ $i -lt 100 ]; do usleep 50000; i=$((i+1)); done
if udhcpc -i eth0 -s /etc/udhcpc.sh -q -n -t 10 -T 1 >/tmp/udhcpc.log 2>&1 && [ -s /tmp/lease ]; then
	i=0
	while [ -z "$(ip -6 addr show dev eth0 | grep inet6 | grep -v -e 'scope link' -e tentative)" ] && [ $i -lt 100 ]; do usleep 50000; i=$((i+1)); done
	a6=$(ip -6 addr show dev eth0 | grep inet6 | grep -v -e 'scope link' -e tentative | sed -n 's/.*inet6 \([0-9a-f:]*\)\/.*/\1/p' | head -n 1)
	echo "@@READY $(cat /tmp/lease) ${a6:--}@@"
else
	cat /tmp/udhcpc.log
	echo "@@NOLEASE@@"
fi
while read -r n t b; do
	echo "$b" | base64 -d > /tmp/cmd.sh
	echo "@@BEGIN $n@@"
	timeout -s KILL "$t" sh /tmp/cmd.sh </dev/null 2>&1
	echo "@@END $n $?@@"
done
poweroff -f
`
}
