package wfptest

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/agentcage/router/windivert/wfp"
)

// Direction says which layer classifies a flow.
type Direction uint8

// The directions.
const (
	Outbound  Direction = iota + 1 // a process connects (ALE connect layers)
	Inbound                        // a process accepts (ALE accept layers)
	Forwarded                      // the host routes a packet (IP forward layers)
)

// Flow is what the engine classifies.
type Flow struct {
	Dir   Direction
	App   string   // the process's executable path; empty for Forwarded
	SIDs  []string // SIDs in the process's token (a service's SID when it runs as one)
	Proto uint8
	// Local and Remote are the process's end and the other end; for Forwarded, Local is
	// the packet's source and Remote its destination.
	Local, Remote netip.AddrPort
	// Interface is the LUID of the local interface: where an Inbound connection arrived,
	// where an Outbound one leaves (zero: one no filter names). For a connection between
	// two ends of this machine made to an adapter's address, which interface Windows
	// reports is not documented: tests give that adapter's, the worst case for a filter
	// that must leave this machine's own connections alone.
	Interface uint64
}

func (f Flow) String() string {
	dir := map[Direction]string{Outbound: "connect", Inbound: "accept", Forwarded: "forward"}[f.Dir]
	app := f.App
	if i := strings.LastIndexAny(app, `\/`); i >= 0 {
		app = app[i+1:]
	}
	return fmt.Sprintf("%s %s %s %v->%v", dir, app, protoText(f.Proto), f.Local, f.Remote)
}

func protoText(p uint8) string {
	return strings.TrimPrefix(wfp.Protocol(p).String(), "protocol=")
}

// Verdict is the outcome of a classification and the filter that decided it (zero Key
// and Name "default" when none did).
type Verdict struct {
	Action wfp.Action
	Key    wfp.Key
	Name   string
}

func (v Verdict) String() string { return fmt.Sprintf("%v by %q", v.Action, v.Name) }

func (f Flow) layer() wfp.Layer {
	v6 := f.Remote.Addr().Is6() && !f.Remote.Addr().Is4In6()
	switch f.Dir {
	case Outbound:
		return pick(v6, wfp.LayerConnectV4, wfp.LayerConnectV6)
	case Inbound:
		return pick(v6, wfp.LayerAcceptV4, wfp.LayerAcceptV6)
	}
	return pick(v6, wfp.LayerForwardV4, wfp.LayerForwardV6)
}

func pick(v6 bool, a, b wfp.Layer) wfp.Layer {
	if v6 {
		return b
	}
	return a
}

// Classify applies the committed filters to f with WFP's arbitration (see the package
// doc) and returns the verdict.
func (e *Engine) Classify(f Flow) Verdict {
	e.mu.Lock()
	defer e.mu.Unlock()
	layer := f.layer()
	var flags uint32
	if f.Dir != Forwarded {
		r := f.Remote.Addr().Unmap()
		if r.IsLoopback() || slices.Contains(e.hostAddrs, r) {
			flags |= wfp.FlagLoopback
		}
	}
	bySub := map[wfp.Key][]filter{}
	for _, fl := range e.st.filters {
		if fl.Layer != layer || fl.BootTime != (e.phase == booting) {
			continue
		}
		bySub[fl.Sublayer] = append(bySub[fl.Sublayer], fl)
	}
	var subs []sublayer
	for k := range bySub {
		if sl, ok := e.st.sublayers[k]; ok {
			subs = append(subs, sl)
		}
	}
	slices.SortFunc(subs, func(a, b sublayer) int {
		if c := cmp.Compare(b.Weight, a.Weight); c != 0 {
			return c
		}
		return strings.Compare(a.Key.String(), b.Key.String())
	})
	verdict := Verdict{Action: wfp.Permit, Name: "default"}
	hard := false
	for _, sl := range subs {
		fs := bySub[sl.Key]
		slices.SortFunc(fs, func(a, b filter) int {
			if c := cmp.Compare(b.Weight, a.Weight); c != 0 {
				return c
			}
			return strings.Compare(a.Key.String(), b.Key.String())
		})
		for _, fl := range fs {
			if !matches(fl.Filter, f, flags) {
				continue
			}
			switch {
			case fl.Action == wfp.Block && !hard:
				return Verdict{Action: wfp.Block, Key: fl.Key, Name: fl.Name}
			case fl.Action == wfp.Permit && verdict.Key.IsZero():
				verdict = Verdict{Action: wfp.Permit, Key: fl.Key, Name: fl.Name}
			}
			hard = hard || (fl.Action == wfp.Permit && fl.Hard)
			break // the sublayer's highest matching filter decided
		}
	}
	return verdict
}

// matches reports whether every field f's conditions test has at least one condition
// that holds for fl.
func matches(f wfp.Filter, fl Flow, flags uint32) bool {
	var seen, held uint32
	for _, c := range f.Conditions {
		bit := uint32(1) << c.Field
		seen |= bit
		if held&bit == 0 && holds(c, fl, flags) {
			held |= bit
		}
	}
	return seen == held
}

func holds(c wfp.Condition, fl Flow, flags uint32) bool {
	switch c.Field {
	case wfp.FieldApp:
		return fl.App != "" && appKey(fl.App) == appKey(c.Path)
	case wfp.FieldUser:
		return slices.Contains(fl.SIDs, c.SID)
	case wfp.FieldProtocol:
		return fl.Proto == c.Proto
	case wfp.FieldLocalPort:
		return c.Ports.Contains(fl.Local.Port())
	case wfp.FieldRemotePort:
		return c.Ports.Contains(fl.Remote.Port())
	case wfp.FieldLocalAddr, wfp.FieldSourceAddr:
		return c.Prefix.Contains(fl.Local.Addr().Unmap())
	case wfp.FieldRemoteAddr:
		return c.Prefix.Contains(fl.Remote.Addr().Unmap())
	case wfp.FieldFlags:
		if c.None {
			return flags&c.Flags == 0
		}
		return flags&c.Flags == c.Flags
	case wfp.FieldInterface:
		return fl.Interface != 0 && fl.Interface == c.LUID
	}
	return false
}

// FirewallWeight is the weight the stand-in for Windows Defender Firewall's sublayer
// (FWPM_SUBLAYER_MPSSVC_WF) gets. The real value is an item of the Windows checklist
// (netsh wfp show state); what matters is that the guard's sublayer weighs more.
const FirewallWeight uint16 = 0x7FFD

// Firewall is the stand-in for Windows Defender Firewall's own objects, made by
// WindowsFirewall.
type Firewall struct {
	e        *Engine
	Provider wfp.Key
	Sublayer wfp.Key
}

// WindowsFirewall installs the stand-in: a persistent provider and sublayer (weight
// FirewallWeight) and, at both accept layers, a block of every inbound connection
// (persistent, with boot-time twins) but a permit of loopback ones (both ends this
// machine: Windows Firewall does not filter loopback). That is what Windows does for a
// program no rule allows: on a Public-profile network, and for a service, nobody is asked
// and nothing is allowed. Allow adds the rules a user or an installer would.
func (e *Engine) WindowsFirewall() *Firewall {
	ns := wfp.Key{0x4d, 0x50, 0x53, 0x53, 0x56, 0x43}
	fw := &Firewall{e: e, Provider: wfp.NameKey(ns, "provider"), Sublayer: wfp.NameKey(ns, "sublayer")}
	o := owner{process: "mpssvc"}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.st = e.st.clone()
	e.st.providers[fw.Provider] = provider{wfp.Provider{Key: fw.Provider, Name: "Windows Firewall (stand-in)", Persistent: true}, o}
	e.st.sublayers[fw.Sublayer] = sublayer{wfp.Sublayer{Key: fw.Sublayer, Provider: fw.Provider, Name: "MPSSVC_WF (stand-in)", Weight: FirewallWeight, Persistent: true}, o}
	for _, l := range []wfp.Layer{wfp.LayerAcceptV4, wfp.LayerAcceptV6} {
		for _, boot := range []bool{false, true} {
			name := "block inbound " + l.String()
			if boot {
				name += " boot"
			}
			f := wfp.Filter{Key: wfp.NameKey(ns, name), Name: "Windows Firewall: " + name, Provider: fw.Provider, Sublayer: fw.Sublayer,
				Layer: l, Weight: 0, Action: wfp.Block, Persistent: !boot, BootTime: boot}
			e.st.filters[f.Key] = filter{f, o}
			lo := wfp.Filter{Key: wfp.NameKey(ns, "loopback "+name), Name: "Windows Firewall: permit loopback " + l.String(), Provider: fw.Provider, Sublayer: fw.Sublayer,
				Layer: l, Weight: 100, Action: wfp.Permit, Persistent: !boot, BootTime: boot, Conditions: []wfp.Condition{wfp.FlagsSet(wfp.FlagLoopback)}}
			e.st.filters[lo.Key] = filter{lo, o}
		}
	}
	return fw
}

// Allow adds a persistent soft permit to the firewall's sublayer: a user's rule.
func (fw *Firewall) Allow(name string, layer wfp.Layer, conds ...wfp.Condition) {
	e := fw.e
	f := wfp.Filter{Key: wfp.NameKey(fw.Sublayer, name), Name: "Windows Firewall: " + name, Provider: fw.Provider, Sublayer: fw.Sublayer,
		Layer: layer, Weight: 10, Action: wfp.Permit, Persistent: true, Conditions: conds}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.st = e.st.clone()
	e.st.filters[f.Key] = filter{f, owner{process: "mpssvc"}}
}

// WireGuardExe is the image of WireGuard's service in the KillSwitch stand-in.
const WireGuardExe = `C:\Program Files\WireGuard\wireguard.exe`

// KillSwitch installs a stand-in for WireGuard-windows' kill switch (its tunnel/firewall
// package, rules.go): a dynamic sublayer of weight 0xFFFF above everyone's, at the connect
// and accept layers: soft permits for loopback and for the tunnel interface tunnel, one hard
// permit (FWPM_FILTER_FLAG_CLEAR_ACTION_RIGHT) scoped to WireGuard's own service
// (wireguard.exe's app ID and LocalSystem), and a soft block of everything else. Its soft
// permits do not override a lower sublayer's block: a caged app stays blocked by the guard
// while the router is stopped. Its block refuses whatever it does not permit.
func (e *Engine) KillSwitch(tunnel uint64) wfp.Key {
	return e.killSwitch("WireGuard", tunnel, false)
}

// HardKillSwitch is KillSwitch with hard loopback and tunnel permits (not WireGuard's, a
// VPN client that clears the action right of what it permits): those win over any lower
// sublayer's block, so a caged app's flow on the tunnel or to this machine passes whatever
// the guard says.
func (e *Engine) HardKillSwitch(tunnel uint64) wfp.Key {
	return e.killSwitch("HardVPN", tunnel, true)
}

func (e *Engine) killSwitch(name string, tunnel uint64, hard bool) wfp.Key {
	ns := wfp.Key{0x57, 0x47, byte(len(name))}
	prov, sub := wfp.NameKey(ns, "provider"), wfp.NameKey(ns, "sublayer")
	o := owner{process: strings.ToLower(name), dynamic: true}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.st = e.st.clone()
	e.st.providers[prov] = provider{wfp.Provider{Key: prov, Name: name}, o}
	e.st.sublayers[sub] = sublayer{wfp.Sublayer{Key: sub, Provider: prov, Name: name + " filters", Weight: 0xFFFF}, o}
	for _, l := range []wfp.Layer{wfp.LayerConnectV4, wfp.LayerConnectV6, wfp.LayerAcceptV4, wfp.LayerAcceptV6} {
		fs := []wfp.Filter{
			{Name: "Permit loopback " + l.String(), Weight: 10, Action: wfp.Permit, Hard: hard, Conditions: []wfp.Condition{wfp.FlagsSet(wfp.FlagLoopback)}},
			{Name: "Permit tunnel " + l.String(), Weight: 10, Action: wfp.Permit, Hard: hard, Conditions: []wfp.Condition{wfp.Interface(tunnel)}},
			{Name: "Block all " + l.String(), Weight: 0, Action: wfp.Block},
		}
		if !hard {
			fs = append(fs, wfp.Filter{Name: "Permit WireGuard service " + l.String(), Weight: 15, Action: wfp.Permit, Hard: true,
				Conditions: []wfp.Condition{wfp.App(WireGuardExe), wfp.User("S-1-5-18")}})
		}
		for _, f := range fs {
			f.Key, f.Provider, f.Sublayer, f.Layer = wfp.NameKey(ns, f.Name), prov, sub, l
			e.st.filters[f.Key] = filter{f, o}
		}
	}
	return sub
}
