package router

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// Profiles: a guest may be switched at run time to one of the config's [profile.NAME] rule
// lists (SwitchProfile). Its new flows are decided by that profile's Policy from then on,
// and its live flows the profile refuses are ended at once, as a reload ends them
// (reload.go), counted as refusals under the new decision's reason. Everything but the
// rules is shared: the upstreams, the limits, the forwards.
//
// A guest is a VM, as guestOf keys it ("vm 10.0.2.0/24", "vm 10.0.3.7"), or a caged app,
// keyed "app NAME" (switchKey): NAME is an executable's file name, and a flow is the app's
// when its owner's executable (the owner lookup's Name: on Linux the base name of
// /proc/PID/exe, which the kernel gives, never the name a process sets for itself; on
// Windows the image name) is NAME, compared without regard to case as apps entries are,
// and the flow is caged. A flow of this host that is not caged keeps the default profile.
// A caged app's flows are known as its own once their owner is: the TCP paths choose the
// profile again after the owner lookup (classified), the UDP path after its own.
//
// The switches are the Router's, kept across reloads: after a reload a switched guest gets
// the new config's profile of that name, or the default when the new config has none (the
// switch is dropped and logged). They are not kept across restarts. ProfileFor gives the
// same choice to a capture that decides flows itself (the Windows engine).

// appKeyPrefix heads the key of a caged app's switch; AppGuestPrefix the name of one in a
// switch (router profile app:NAME PROFILE).
const (
	appKeyPrefix   = "app "
	AppGuestPrefix = "app:"
)

// guestProfiles is the profile of each switched guest.
type guestProfiles struct {
	mu sync.Mutex                        // serialises switches
	m  atomic.Pointer[map[string]string] // guest key (switchKey) → profile name; never modified once stored
}

// prepareProfiles prepares np's profiles (np.profiles): each a compiled of its own (its rule
// counters) that shares np's upstreams. Prepare calls it.
func (r *Router) prepareProfiles(np *compiled) error {
	names := np.Decision.ProfileNames()
	if len(names) < 2 {
		return nil
	}
	np.profiles = make(map[string]*compiled, len(names)-1)
	for _, name := range names[1:] {
		sub, _ := np.Decision.Profile(name)
		s := np.Settings
		s.Decision = sub
		n := len(sub.Rules())
		pc := &compiled{Settings: s, ups: np.ups, tracked: np.tracked, profile: name,
			hits: make([]atomic.Uint64, n), bytes: make([]atomic.Uint64, n)}
		for _, rl := range sub.Rules() {
			if rl.Action != rules.Proxy && rl.Action != rules.Ask {
				continue
			}
			if err := pc.addGroup(rl.Proxy); err != nil {
				return fmt.Errorf("router: profile %s: rule %q: %w", name, rl.Name, err)
			}
		}
		np.profiles[name] = pc
	}
	return nil
}

// forGuest returns the policy pf's guest is switched to under p (the current policy), or p
// itself: a flow of no switched guest, a profile p does not have. A caged app's flow is its
// app's only once its owner is known: call it again after the owner lookup.
func (r *Router) forGuest(p *compiled, pf *policy.Flow) *compiled {
	if len(p.profiles) == 0 {
		return p
	}
	if pc, ok := p.profiles[r.switchedTo(p.Decision, pf)]; ok {
		return pc
	}
	return p
}

// ProfileFor returns the Policy of the profile f's guest is switched to under p, or p: the
// choice forGuest makes, for a capture that decides flows itself (the Windows engine) with
// the policy p it was given. Safe for concurrent use.
func (r *Router) ProfileFor(p *policy.Policy, f *policy.Flow) *policy.Policy {
	if name := r.switchedTo(p, f); name != "" {
		if sub, ok := p.Profile(name); ok {
			return sub
		}
	}
	return p
}

// switchedTo is the profile f's guest is switched to, "" for none.
func (r *Router) switchedTo(p *policy.Policy, f *policy.Flow) string {
	m := r.profiles.m.Load()
	if m == nil || len(*m) == 0 {
		return ""
	}
	return (*m)[switchKey(p, f)]
}

// switchKey is the guest a switch names for flow f under p: its VM's key (guestOf) for a
// VM's flow, "app NAME" for a caged flow whose owner's executable is known (NAME its file
// name in lower case), else "" (no guest: the default profile). The one decision of whose a
// flow is, for the choice of its profile and for the flows a switch decides again.
func switchKey(p *policy.Policy, f *policy.Flow) string {
	if f.FromVM || p.FromVMNetwork(f.Src) {
		return guestOf(f.Src, p.VMNetworks())
	}
	if f.App == "" || !p.Caged(f) {
		return ""
	}
	return appKeyPrefix + strings.ToLower(f.App)
}

// GuestKey is the guest a switch names: a [capture] vm_networks entry written as a CIDR, a
// guest's address (its VM network's guest, else its own: a VM-facing interface's guest
// outside vm_networks), or "app:NAME", a caged app by its executable's file name (see the
// top of this file; not a path or a pattern, and one the config cages). The key is as
// status and the logs name guests ("vm 10.0.2.0/24", "app slirp4netns").
func (r *Router) GuestKey(guest string) (string, error) {
	d := r.pol.Load().Decision
	if name, ok := strings.CutPrefix(guest, AppGuestPrefix); ok {
		return appKey(d, name)
	}
	vmNets := d.VMNetworks()
	if pr, err := netip.ParsePrefix(guest); err == nil && pr.Bits() < pr.Addr().BitLen() {
		for _, n := range vmNets {
			if n.Masked() == pr.Masked() {
				return "vm " + n.Masked().String(), nil
			}
		}
		return "", fmt.Errorf("guest %s: not one of [capture] vm_networks %v", guest, vmNets)
	} else if err == nil {
		guest = pr.Addr().String()
	}
	a, err := netip.ParseAddr(guest)
	if err != nil {
		return "", fmt.Errorf("guest %q: not a VM network (CIDR), a guest's address or %sNAME (a caged app)", guest, AppGuestPrefix)
	}
	return guestOf(a, vmNets), nil
}

// appKey is the key of the caged app whose executable's file name is name under d.
func appKey(d *policy.Policy, name string) (string, error) {
	if name == "" || strings.ContainsAny(name, "*?/\\\x00") {
		return "", fmt.Errorf("guest %s%s: want an executable's file name, without a path or a wildcard (e.g. %sslirp4netns)", AppGuestPrefix, name, AppGuestPrefix)
	}
	if !d.Caged(&policy.Flow{Owner: rules.Owner{App: name}}) {
		return "", fmt.Errorf("guest %s%s: not a caged app (the apps of the proxy and block rules, [capture] caged_apps, the presets'); only caged traffic is switched", AppGuestPrefix, name)
	}
	return appKeyPrefix + strings.ToLower(name), nil
}

// ErrNoProfile is a switch to a profile the config does not define.
var ErrNoProfile = errors.New("no such profile")

// SwitchProfile switches guest (see GuestKey) to the profile named name (policy.DefaultProfile:
// back to the top-level rules), ends the guest's live flows the profile refuses and returns
// the guest's key and how many it ended. A switch to the profile the guest has already is
// done again (its flows are decided again).
func (r *Router) SwitchProfile(guest, name string) (key string, ended int, err error) {
	key, err = r.GuestKey(guest)
	if err != nil {
		return "", 0, err
	}
	pr := &r.profiles
	pr.mu.Lock()
	defer pr.mu.Unlock()
	p := r.pol.Load()
	if _, ok := p.Decision.Profile(name); !ok {
		return "", 0, fmt.Errorf("profile %q: %w (defined: %v)", name, ErrNoProfile, p.Decision.ProfileNames())
	}
	m := map[string]string{}
	if old := pr.m.Load(); old != nil {
		maps.Copy(m, *old)
	}
	if name == "" || name == policy.DefaultProfile {
		delete(m, key)
	} else {
		m[key] = name
	}
	pr.m.Store(&m)
	r.log.Info("guest profile switched", "guest", key, "profile", profileName(name))
	return key, r.endRefused(r.pol.Load(), key, "profile switch ended live flows"), nil
}

// GuestProfiles returns the profile of each switched guest, by guest key; a guest not in it
// has the default profile.
func (r *Router) GuestProfiles() map[string]string {
	m := r.profiles.m.Load()
	if m == nil {
		return map[string]string{}
	}
	return maps.Clone(*m)
}

// ProfileNames lists the profiles of the current policy, the default first.
func (r *Router) ProfileNames() []string { return r.pol.Load().Decision.ProfileNames() }

// dropGoneProfiles forgets the switches to profiles p does not define (a reload removed
// them), and those of apps p does not cage: those guests are back on the default profile. Use calls it before it ends the
// flows p refuses.
func (r *Router) dropGoneProfiles(p *compiled) {
	pr := &r.profiles
	pr.mu.Lock()
	defer pr.mu.Unlock()
	old := pr.m.Load()
	if old == nil {
		return
	}
	m := maps.Clone(*old)
	for g, name := range m {
		if _, ok := p.profiles[name]; !ok {
			delete(m, g)
			r.log.Warn("guest back on the default profile: the config has no such profile now", "guest", g, "profile", name)
		} else if app, ok := strings.CutPrefix(g, appKeyPrefix); ok && !p.Decision.Caged(&policy.Flow{Owner: rules.Owner{App: app}}) {
			delete(m, g)
			r.log.Warn("guest back on the default profile: the config cages no such app now", "guest", g, "profile", name)
		}
	}
	pr.m.Store(&m)
}

func profileName(name string) string {
	if name == "" {
		return policy.DefaultProfile
	}
	return name
}

// ofGuest reports whether the flow q is guest's (a switchKey key).
func (r *Router) ofGuest(p *compiled, q *policy.Flow, guest string) bool {
	return r.OfGuest(p.Decision, q, guest)
}

// OfGuest reports whether the flow f is, under p, of guest (a key SwitchProfile returned):
// the flows a switch decides again, for a capture that decides flows itself.
func (r *Router) OfGuest(p *policy.Policy, f *policy.Flow, guest string) bool {
	return switchKey(p, f) == guest
}
