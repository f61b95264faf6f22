package router

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/policy"
)

// Profiles: a guest (a VM, as guestOf keys it) may be switched at run time to one of the
// config's [profile.NAME] rule lists (SwitchProfile). Its new flows are decided by that
// profile's Policy from then on, and its live flows the profile refuses are ended at once,
// as a reload ends them (reload.go), counted as refusals under the new decision's reason.
// Everything but the rules is shared: the upstreams, the limits, the forwards. Only VM
// guests are switched: a flow of this host (a caged app, any other process) keeps the
// default profile.
//
// The switches are the Router's, kept across reloads: after a reload a switched guest gets
// the new config's profile of that name, or the default when the new config has none (the
// switch is dropped and logged). They are not kept across restarts.

// guestProfiles is the profile of each switched guest.
type guestProfiles struct {
	mu sync.Mutex                        // serialises switches
	m  atomic.Pointer[map[string]string] // guest key (guestOf) → profile name; never modified once stored
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
// itself: a flow not from a VM, a guest not switched, a profile p does not have.
func (r *Router) forGuest(p *compiled, pf *policy.Flow) *compiled {
	m := r.profiles.m.Load()
	if m == nil || len(*m) == 0 || len(p.profiles) == 0 {
		return p
	}
	if !pf.FromVM && !p.Decision.FromVMNetwork(pf.Src) {
		return p
	}
	if name, ok := (*m)[guestOf(pf.Src, p.Decision.VMNetworks())]; ok {
		if pc, ok := p.profiles[name]; ok {
			return pc
		}
	}
	return p
}

// GuestKey is the guest a switch names: a [capture] vm_networks entry written as a CIDR, or
// a guest's address (its VM network's guest, else its own: a VM-facing interface's guest
// outside vm_networks). The key is as status and the logs name guests ("vm 10.0.2.0/24").
func (r *Router) GuestKey(guest string) (string, error) {
	vmNets := r.pol.Load().Decision.VMNetworks()
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
		return "", fmt.Errorf("guest %q: not a VM network (CIDR) or a guest's address", guest)
	}
	return guestOf(a, vmNets), nil
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
// them): those guests are back on the default profile. Use calls it before it ends the
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

// ofGuest reports whether the flow q is guest's (a guestOf key): a VM's flow from guest's
// network or address.
func (r *Router) ofGuest(p *compiled, q *policy.Flow, guest string) bool {
	return (q.FromVM || p.Decision.FromVMNetwork(q.Src)) && guestOf(q.Src, p.Decision.VMNetworks()) == guest
}
