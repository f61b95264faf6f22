package adapters

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
)

// Bridged is a VM network adapter attached to a host adapter in bridged mode: the guest
// is a machine of the host's LAN, its frames pass the host's network stack by (through
// VirtualBox's or VMware's bridge driver below it), and no host capture, WinDivert or WFP,
// sees its traffic. Such a guest is not caged at all.
type Bridged struct {
	Hypervisor string // "virtualbox", "vmware"
	VM         string // the VM's name
	Slot       string // the VM's adapter: "0" (VirtualBox slot) or "ethernet0" (VMware)
	HostNIC    string // the host adapter it bridges to, when the VM's file names it
}

func (b Bridged) String() string {
	s := fmt.Sprintf("%s VM %q adapter %s is bridged", b.Hypervisor, b.VM, b.Slot)
	if b.HostNIC != "" {
		s += " to " + b.HostNIC
	}
	return s
}

// BridgedVMs returns the bridged adapters of the VirtualBox VMs registered in vboxDir (the
// user's VirtualBox settings directory, as for HostResolverVMs) and of the VMware VMs
// listed in vmwareInventory (%APPDATA%\VMware\inventory.vmls); read reads a file. A
// directory or inventory that cannot be read is skipped, and so is a VM file; the error
// says what could not be read when nothing could.
func BridgedVMs(vboxDir, vmwareInventory string, read func(string) ([]byte, error)) ([]Bridged, error) {
	var out []Bridged
	var errs []string
	if vboxDir != "" {
		vms, err := vboxFiles(vboxDir, read)
		if err != nil {
			errs = append(errs, err.Error())
		}
		for _, f := range vms {
			if b, err := read(f); err == nil {
				out = append(out, vboxBridged(b)...)
			}
		}
	}
	if vmwareInventory != "" {
		inv, err := read(vmwareInventory)
		if err != nil {
			errs = append(errs, fmt.Sprintf("vmware inventory: %v", err))
		}
		for _, f := range vmxFiles(inv) {
			if b, err := read(f); err == nil {
				out = append(out, vmxBridged(f, b)...)
			}
		}
	}
	if len(out) == 0 && len(errs) > 0 && len(errs) == count(vboxDir, vmwareInventory) {
		return nil, fmt.Errorf("bridged VMs: %s", strings.Join(errs, "; "))
	}
	return out, nil
}

func count(ss ...string) int {
	n := 0
	for _, s := range ss {
		if s != "" {
			n++
		}
	}
	return n
}

// vboxFiles returns the .vbox files VirtualBox.xml in dir registers, absolute.
func vboxFiles(dir string, read func(string) ([]byte, error)) ([]string, error) {
	reg, err := read(filepath.Join(dir, "VirtualBox.xml"))
	if err != nil {
		return nil, fmt.Errorf("virtualbox settings: %w", err)
	}
	srcs, err := attrs(reg, "MachineEntry", "src")
	if err != nil {
		return nil, fmt.Errorf("virtualbox settings: %w", err)
	}
	for i, src := range srcs {
		if !filepath.IsAbs(src) {
			srcs[i] = filepath.Join(dir, src)
		}
	}
	return srcs, nil
}

// vboxBridged reads a .vbox file: each enabled adapter whose attachment is
// <BridgedInterface> (the modes not in use are kept under <DisabledModes> and do not count).
func vboxBridged(doc []byte) []Bridged {
	d := xml.NewDecoder(bytes.NewReader(doc))
	var name, slot string
	enabled, inAdapter, disabled := false, false, 0
	var out []Bridged
	for {
		tok, err := d.Token()
		if err != nil {
			return out
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "Machine":
				name = attr(t, "name")
			case "Adapter":
				inAdapter, slot = true, attr(t, "slot")
				// VirtualBox leaves enabled out for the first adapter's default (on).
				enabled = attr(t, "enabled") != "false"
			case "DisabledModes":
				disabled++
			case "BridgedInterface":
				if inAdapter && enabled && disabled == 0 {
					out = append(out, Bridged{Hypervisor: "virtualbox", VM: name, Slot: slot, HostNIC: attr(t, "name")})
				}
			}
		case xml.EndElement:
			switch t.Name.Local {
			case "Adapter":
				inAdapter = false
			case "DisabledModes":
				disabled--
			}
		}
	}
}

func attr(se xml.StartElement, name string) string {
	for _, a := range se.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// vmxFiles returns the VM files an inventory.vmls lists (vmlistN.config = "path").
func vmxFiles(inv []byte) []string {
	var out []string
	for key, v := range vmxKeys(inv) {
		if strings.HasPrefix(key, "vmlist") && strings.HasSuffix(key, ".config") && strings.HasSuffix(strings.ToLower(v), ".vmx") {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// vmxBridged reads a .vmx file: each present ethernetN whose connectionType is "bridged".
// VMware's own VMnet0 is its bridge too (connectionType "custom", vnet "VMnet0").
func vmxBridged(path string, doc []byte) []Bridged {
	kv := vmxKeys(doc)
	name := kv["displayname"]
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(strings.ReplaceAll(path, `\`, "/")), filepath.Ext(path))
	}
	var out []Bridged
	for key, v := range kv {
		nic, ok := strings.CutSuffix(key, ".connectiontype")
		if !ok || !strings.HasPrefix(nic, "ethernet") || !strings.EqualFold(kv[nic+".present"], "true") {
			continue
		}
		bridged := strings.EqualFold(v, "bridged") || strings.EqualFold(v, "custom") && strings.EqualFold(kv[nic+".vnet"], "vmnet0")
		if bridged {
			out = append(out, Bridged{Hypervisor: "vmware", VM: name, Slot: nic})
		}
	}
	slices.SortFunc(out, func(a, b Bridged) int { return strings.Compare(a.Slot, b.Slot) })
	return out
}

// vmxKeys parses VMware's key = "value" files (.vmx, .vmls), keys lower-cased. Lines
// that are not of that form are skipped; at most 1 MiB is read.
func vmxKeys(doc []byte) map[string]string {
	kv := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(bytes.NewReader(doc), 1<<20))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		k = strings.ToLower(strings.TrimSpace(k))
		v = strings.TrimSpace(v)
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		if k != "" && !strings.HasPrefix(k, "#") {
			kv[k] = v
		}
	}
	return kv
}

// WriteBridged prints the bridged adapters for people, after Write.
func WriteBridged(w io.Writer, bs []Bridged) {
	if len(bs) == 0 {
		return
	}
	fmt.Fprintln(w, "BRIDGED (no capture sees these guests: they are machines of the host's LAN, not caged):")
	for _, b := range bs {
		fmt.Fprintf(w, "  %s\n", b)
	}
	fmt.Fprintln(w, "  fix: give the agent's VM NAT (VirtualBox, VMware) or an Internal switch (Hyper-V) instead")
}
