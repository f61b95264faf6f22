//go:build windows && amd64

// Command wdprobe answers, on a real Windows host, the questions that only such a host can
// answer about WinDivert (docs/windows-checklist.md). It only sniffs (every handle is opened
// with SNIFF or DROP-free SEND_ONLY), so it never changes traffic. Run it from an elevated
// prompt; it loads WinDivert.dll from its own directory after checking the pinned hashes.
//
//	wdprobe install              write the pinned WinDivert files beside wdprobe.exe
//	wdprobe version              open a handle, print the driver version
//	wdprobe socket [-n N]        print SOCKET connect/close events with the owning process
//	wdprobe order [-n N]         per new TCP flow: SOCKET CONNECT vs NETWORK SYN timing
//	wdprobe packets [-layer L] [-n N] FILTER   print packets matching FILTER with their flags
//	wdprobe reflect [-n N]       list WinDivert handles of every process (REFLECT layer)
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/agentcage/router/router/proc"
	"github.com/agentcage/router/windivert"
	"github.com/agentcage/router/windivert/dist"
	"github.com/agentcage/router/windivert/packet"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: wdprobe install|version|socket|order|packets|reflect [flags]")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "wdprobe:", err)
		os.Exit(1)
	}
}

func exeDir() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.Dir(exe), nil
}

func run(cmd string, args []string) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	n := fs.Int("n", 20, "stop after this many events")
	layer := fs.String("layer", "network", "packets: network or forward")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir, err := exeDir()
	if err != nil {
		return err
	}
	if cmd == "install" {
		if err := dist.Install(dir); err != nil {
			return err
		}
		fmt.Printf("installed %s and %s into %s (sha256 verified)\n", windivert.DLLName, windivert.SysName, dir)
		return nil
	}
	dll, err := windivert.Load(dir)
	if err != nil {
		return err
	}
	defer dll.Release()
	res := proc.NewSystemWindowsResolver(nil)
	switch cmd {
	case "version":
		h, err := windivert.Open(dll, "false", windivert.LayerNetwork, 0, windivert.FlagSendOnly)
		if err != nil {
			return err
		}
		defer h.Close()
		major, _ := h.GetParam(windivert.ParamVersionMajor)
		minor, _ := h.GetParam(windivert.ParamVersionMinor)
		fmt.Printf("driver version %d.%d\n", major, minor)
		return nil
	case "socket":
		return socketEvents(dll, res, *n)
	case "order":
		return order(dll, *n)
	case "packets":
		l := windivert.LayerNetwork
		if *layer == "forward" {
			l = windivert.LayerNetworkForward
		}
		return packets(dll, strings.Join(fs.Args(), " "), l, *n)
	case "reflect":
		return reflect(dll, res, *n)
	}
	return fmt.Errorf("unknown command %q", cmd)
}

func describe(res *proc.WindowsResolver, pid uint32) string {
	info, err := res.ByPID(pid)
	if err != nil {
		return fmt.Sprintf("pid=%d (%v)", pid, err)
	}
	s := fmt.Sprintf("pid=%d %s", pid, info.App)
	if len(info.Services) > 0 {
		s += " services=" + strings.Join(info.Services, ",")
	}
	return s
}

func protoName(p uint8) string {
	switch p {
	case packet.ProtoTCP:
		return "tcp"
	case packet.ProtoUDP:
		return "udp"
	}
	return fmt.Sprintf("proto%d", p)
}

func socketEvents(dll *windivert.DLL, res *proc.WindowsResolver, n int) error {
	f := windivert.SocketConnects(windivert.Exclusions{PIDs: []uint32{uint32(os.Getpid())}})
	h, err := windivert.Open(dll, f.String(), windivert.LayerSocket, 0, windivert.FlagSniff|windivert.FlagRecvOnly)
	if err != nil {
		return err
	}
	defer h.Close()
	fmt.Printf("filter: %s\n", f)
	var a windivert.Address
	for i := 0; i < n; i++ {
		if _, err := h.Recv(nil, &a); err != nil {
			return err
		}
		s := a.Socket()
		fmt.Printf("%-7s %s %s:%d -> %s:%d loopback=%v ipv6=%v %s\n", a.Event(), protoName(s.Protocol),
			s.LocalAddr, s.LocalPort, s.RemoteAddr, s.RemotePort, a.Loopback(), a.IPv6(), describe(res, s.ProcessID))
	}
	return nil
}

type flowKey struct {
	local  uint16
	remote netip.AddrPort
}

func order(dll *windivert.DLL, n int) error {
	var freq int64
	qpf := windows.NewLazySystemDLL("kernel32.dll").NewProc("QueryPerformanceFrequency")
	if r, _, err := qpf.Call(uintptr(unsafe.Pointer(&freq))); r == 0 {
		return fmt.Errorf("QueryPerformanceFrequency: %w", err)
	}
	sock, err := windivert.Open(dll, windivert.SocketConnects(windivert.Exclusions{PIDs: []uint32{uint32(os.Getpid())}}).String(),
		windivert.LayerSocket, 0, windivert.FlagSniff|windivert.FlagRecvOnly)
	if err != nil {
		return err
	}
	defer sock.Close()
	syn, err := windivert.Open(dll, windivert.OutboundSYN(windivert.Exclusions{}).String(),
		windivert.LayerNetwork, 0, windivert.FlagSniff|windivert.FlagRecvOnly)
	if err != nil {
		return err
	}
	defer syn.Close()
	var mu sync.Mutex
	connects := map[flowKey]int64{}
	syns := map[flowKey]int64{}
	done := make(chan struct{})
	report := func(k flowKey) {
		c, okc := connects[k]
		s, oks := syns[k]
		if !okc || !oks {
			return
		}
		first := "CONNECT first"
		if s < c {
			first = "SYN FIRST"
		}
		fmt.Printf("%s :%d -> %s  SYN-CONNECT = %+.0f µs\n", first, k.local, k.remote, float64(s-c)*1e6/float64(freq))
		delete(connects, k)
		delete(syns, k)
		n--
		if n == 0 {
			close(done)
		}
	}
	go func() {
		var a windivert.Address
		for {
			if _, err := sock.Recv(nil, &a); err != nil {
				return
			}
			s := a.Socket()
			if a.Event() != windivert.EventSocketConnect || s.Protocol != packet.ProtoTCP {
				continue
			}
			k := flowKey{s.LocalPort, netip.AddrPortFrom(s.RemoteAddr, s.RemotePort)}
			mu.Lock()
			connects[k] = a.Timestamp
			report(k)
			mu.Unlock()
		}
	}()
	go func() {
		buf := make([]byte, windivert.MTUMax)
		var a windivert.Address
		for {
			m, err := syn.Recv(buf, &a)
			if err != nil {
				return
			}
			p, err := packet.Parse(buf[:m])
			if err != nil {
				continue
			}
			k := flowKey{p.SrcPort(), netip.AddrPortFrom(p.Dst(), p.DstPort())}
			mu.Lock()
			syns[k] = a.Timestamp
			report(k)
			mu.Unlock()
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		fmt.Println("timeout after 5 minutes")
	}
	return nil
}

func packets(dll *windivert.DLL, filter string, layer windivert.Layer, n int) error {
	if err := dll.CompileFilter(filter, layer); err != nil {
		return err
	}
	h, err := windivert.Open(dll, filter, layer, 0, windivert.FlagSniff|windivert.FlagRecvOnly)
	if err != nil {
		return err
	}
	defer h.Close()
	buf := make([]byte, windivert.MTUMax)
	var a windivert.Address
	for i := 0; i < n; i++ {
		m, err := h.Recv(buf, &a)
		if err != nil {
			return err
		}
		p, err := packet.Parse(buf[:m])
		if err != nil {
			fmt.Printf("unparsed %d bytes: %v\n", m, err)
			continue
		}
		fmt.Printf("%s %s:%d -> %s:%d flags=%#02x outbound=%v loopback=%v impostor=%v ifIdx=%d/%d len=%d\n",
			protoName(p.Protocol()), p.Src(), p.SrcPort(), p.Dst(), p.DstPort(), p.TCPFlags(), a.Outbound(),
			a.Loopback(), a.Impostor(), a.Network().IfIdx, a.Network().SubIfIdx, m)
	}
	return nil
}

func reflect(dll *windivert.DLL, res *proc.WindowsResolver, n int) error {
	h, err := windivert.Open(dll, "true", windivert.LayerReflect, 0, windivert.FlagSniff|windivert.FlagRecvOnly)
	if err != nil {
		return err
	}
	defer h.Close()
	buf := make([]byte, windivert.MTUMax)
	var a windivert.Address
	for i := 0; i < n; i++ {
		if _, err := h.Recv(buf, &a); err != nil {
			return err
		}
		r := a.Reflect()
		fmt.Printf("%s layer=%s priority=%d flags=%#x %s\n", a.Event(), r.Layer, r.Priority, uint64(r.Flags), describe(res, r.ProcessID))
	}
	return nil
}
