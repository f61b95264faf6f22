package daemon

import (
	"errors"
	"runtime"
	"slices"

	"github.com/agentcage/router/router"
	"github.com/agentcage/router/router/control"
)

var _ control.Switcher = (*statusHandler)(nil)

// SwitchProfile switches a guest's profile for the control channel (router profile GUEST
// NAME): router.Router.SwitchProfile. The switch lives as long as the daemon (a reload
// keeps it); a restart puts every guest back on the default profile.
func (h *statusHandler) SwitchProfile(guest, profile string) (control.ProfileSwitch, error) {
	if runtime.GOOS == "windows" {
		// The engine decides a flow at its first packet by the default rules and passes a
		// direct one without the router: a profile would not hold there.
		return control.ProfileSwitch{}, errors.New("profile: switching a guest's profile is not supported on Windows yet")
	}
	key, ended, err := h.d.r.SwitchProfile(guest, profile)
	if err != nil {
		return control.ProfileSwitch{}, err
	}
	return control.ProfileSwitch{Guest: key, Profile: profile, Ended: ended}, nil
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
