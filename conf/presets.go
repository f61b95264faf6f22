package conf

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/agentcage/router/rules"
)

// Hypervisor presets ([capture] hypervisors): what each hypervisor needs caged on the
// operating system the router runs on. A hypervisor that NATs its guests in user space
// (VirtualBox NAT, VMware's NAT service, QEMU's user networking) sends their traffic from its
// own processes: those apps are caged. One that NATs in the kernel (libvirt's default
// network) forwards it through an interface: that interface is caged whole. Networks are
// added only where the hypervisor has a fixed default.

// NAT kinds of a preset.
const (
	NATUser   = "user"   // the hypervisor's processes carry the guests' traffic: apps are caged
	NATKernel = "kernel" // the host forwards it: interfaces are caged
	NATNone   = "none"   // no capture can see it on this OS (Hyper-V's virtual switch)
)

// Preset is one hypervisor's expansion on one operating system.
type Preset struct {
	Name       string
	NAT        string         // NATUser, NATKernel or NATNone
	Apps       []string       // image names or globs of the processes that carry guest traffic
	Interfaces []string       // VM-facing interfaces (a trailing * matches any suffix)
	Networks   []netip.Prefix // default VM networks
	// Note is what the user must know, in words (empty when nothing).
	Note string
}

// qemuUserNAT are the Linux executables of QEMU and of the user-space NAT libvirt gives
// it (passt, as Debian runs it).
func qemuUserNAT() []string { return []string{"qemu-system-*", "qemu-kvm", "passt", "passt.avx2"} }

// presetNames are the presets a config may name, in the order the docs list them.
var presetNames = [...]string{"virtualbox", "vmware", "qemu", "libvirt", "hyperv"}

// PresetNames returns the names [capture] hypervisors takes.
func PresetNames() []string { return presetNames[:] }

// LookupPreset returns the preset of name for the operating system goos ("linux",
// "windows"), or false with the reason when there is none.
func LookupPreset(name, goos string) (Preset, string) {
	win := goos == "windows"
	exe := func(names ...string) []string {
		if !win {
			return names
		}
		out := make([]string, len(names))
		for i, n := range names {
			out[i] = n + ".exe"
		}
		return out
	}
	p := Preset{Name: name}
	switch name {
	case "virtualbox":
		p.NAT = NATUser
		p.Apps = exe("VirtualBoxVM", "VBoxHeadless", "VBoxNetNAT")
		if !win {
			// Host-only adapters are kernel interfaces on Linux (vboxnet0 has 192.168.56.0/24
			// by default); on Windows no capture sees a network, only processes.
			p.Interfaces = []string{"vboxnet*"}
			p.Networks = []netip.Prefix{netip.MustParsePrefix("192.168.56.0/24")}
			p.Note = "VirtualBox NATs in user space: its guests' traffic leaves from its own processes, whose sockets the kernel marks"
		}
	case "vmware":
		p.NAT = NATUser
		if win {
			p.Apps = []string{"vmnat.exe", "vmware-vmx.exe"}
		} else {
			p.Apps = []string{"vmnet-natd", "vmware-vmx"}
			p.Interfaces = []string{"vmnet*"}
			p.Note = "VMware NATs in user space (vmnet-natd): its guests' traffic leaves from its own processes, whose sockets the kernel marks"
		}
	case "qemu":
		p.NAT = NATUser
		p.Apps = exe("qemu-system-*")
		if !win {
			// The executables as they are installed (what /proc/PID/exe names, whatever
			// name the process gives itself: quickemu's -name process=): QEMU is
			// qemu-system-* (Debian's kvm wrapper executes it, Fedora's qemu-kvm links to
			// it) or /usr/libexec/qemu-kvm (RHEL, CentOS); its own -nic user is libslirp
			// in it. The user-space NATs: Debian's passt and pasta re-execute themselves
			// as passt.avx2 (pasta.avx2 links to it) where the CPU has AVX2; slirp4netns.
			p.Apps = append(qemuUserNAT(), "pasta", "pasta.avx2", "slirp4netns")
			p.Note = "QEMU's user networking (libslirp, passt, pasta, slirp4netns) leaves from those processes, whose sockets the kernel marks"
		}
	case "libvirt":
		if win {
			return Preset{}, "libvirt runs on Linux"
		}
		p.NAT = NATKernel
		p.Interfaces = []string{"virbr0"}
		p.Networks = []netip.Prefix{netip.MustParsePrefix("192.168.122.0/24")}
		// The session instance (qemu:///session: GNOME Boxes, virt-manager as a user) has
		// no bridge: it runs QEMU with user networking, libslirp in QEMU or passt.
		p.Apps = qemuUserNAT()
		p.Note = "libvirt's system instance NATs in the kernel through virbr0; its session instance (GNOME Boxes) runs QEMU with user networking, whose processes are caged"
	case "hyperv":
		if !win {
			return Preset{}, "Hyper-V runs on Windows"
		}
		p.NAT = NATNone
		p.Note = "Hyper-V guests have no process socket on the host and WinNAT forwards them in the kernel: no capture sees them; use an Internal switch without NAT and the explicit inbound"
	default:
		return Preset{}, "unknown hypervisor (known: " + strings.Join(presetNames[:], ", ") + ")"
	}
	return p, ""
}

// expandPresets adds what c's presets need to its capture: caged apps, interfaces and
// networks not already there; c.Capture.Presets records each expansion.
func (d *decoder) expandPresets(c *Config) {
	// Sets of what is there already: the lists written may be long, the presets' short.
	apps := map[string]bool{}
	for _, a := range c.Capture.CagedApps {
		apps[a.Text] = true
	}
	ifaces := map[string]bool{}
	for _, i := range c.Capture.VMInterfaces {
		ifaces[i] = true
	}
	nets := map[netip.Prefix]bool{}
	for _, n := range c.Capture.VMNetworks {
		nets[n] = true
	}
	for _, name := range c.Capture.Hypervisors {
		p, why := LookupPreset(name, d.opts.goos())
		if why != "" {
			continue // reported where the name was decoded
		}
		c.Capture.Presets = append(c.Capture.Presets, p)
		for _, a := range p.Apps {
			if !apps[a] {
				apps[a] = true
				c.Capture.CagedApps = append(c.Capture.CagedApps, rules.MustApp(a))
			}
		}
		for _, i := range p.Interfaces {
			if !ifaces[i] {
				ifaces[i] = true
				c.Capture.VMInterfaces = append(c.Capture.VMInterfaces, i)
			}
		}
		for _, n := range p.Networks {
			if !nets[n] {
				nets[n] = true
				c.Capture.VMNetworks = append(c.Capture.VMNetworks, n)
			}
		}
	}
}

// appAliases are, on Linux, the names a process runs as besides the one users know: Debian's
// passt and pasta re-execute themselves as passt.avx2 where the CPU has AVX2 (pasta.avx2
// links to it), so `ps -e` and /proc/PID/exe name neither passt nor pasta.
var appAliases = map[string][]string{
	"passt": {"passt.avx2"},
	"pasta": {"pasta.avx2", "passt.avx2"},
}

// appAliases adds to each rule's apps the aliases of the names it lists (see appAliases),
// on Linux: an entry for pasta matches the process pasta runs as.
func (d *decoder) appAliases(c *Config) {
	if d.opts.goos() == "windows" {
		return
	}
	for i := range c.Rules {
		r := &c.Rules[i]
		for _, a := range r.Apps {
			for _, alias := range appAliases[a.Pattern()] {
				if !slices.ContainsFunc(r.Apps, func(b rules.App) bool { return b.Pattern() == alias }) {
					r.Apps = append(r.Apps, rules.MustApp(alias))
				}
			}
		}
	}
}
