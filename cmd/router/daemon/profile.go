package daemon

import (
	"slices"

	"github.com/agentcage/router/router"
	"github.com/agentcage/router/router/capture"
	"github.com/agentcage/router/router/control"
	"github.com/agentcage/router/rules/policy"
)

var _ control.Switcher = (*statusHandler)(nil)

// SwitchProfile switches a guest's profile for the control channel (router profile GUEST
// NAME): router.Router.SwitchProfile, and on a platform that decides flows itself (Windows)
// its own live flows of the guest that the profile refuses are ended too. The switch lives
// as long as the daemon (a reload keeps it); a restart puts every guest back on the default
// profile.
func (h *statusHandler) SwitchProfile(guest, profile string) (control.ProfileSwitch, error) {
	key, ended, err := h.d.r.SwitchProfile(guest, profile)
	if err != nil {
		return control.ProfileSwitch{}, err
	}
	if pd, ok := h.d.opts.Platform.(capture.ProfileDecider); ok {
		ended += pd.EndSwitched(func(p *policy.Policy, f *policy.Flow) bool { return h.d.r.OfGuest(p, f, key) })
	}
	return control.ProfileSwitch{Guest: key, Profile: profile, Ended: ended}, nil
}

// useProfiles gives a platform that decides flows itself the router's choice of a switched
// guest's profile; the daemon calls it before the platform's first Install.
func (d *daemon) useProfiles() {
	if pd, ok := d.opts.Platform.(capture.ProfileDecider); ok {
		pd.UseProfiles(d.r.ProfileFor)
	}
}

// profileStatus fills st's profiles: the switched guests, by guest, and the profiles the
// config defines.
func profileStatus(st *control.Status, r *router.Router) {
	st.ProfileNames = r.ProfileNames()
	gp := r.GuestProfiles()
	guests := make([]string, 0, len(gp))
	for g := range gp {
		guests = append(guests, g)
	}
	slices.Sort(guests)
	for _, g := range guests {
		st.Profiles = append(st.Profiles, control.GuestProfile{Guest: g, Profile: gp[g]})
	}
}
