package control

// Profiles: op "profile" switches a guest to one of the config's [profile.NAME] rule lists
// (Request.Guest, Request.Profile); only this channel can, so only an administrator.

// GuestProfile is a guest switched to a profile other than the default.
type GuestProfile struct {
	Guest   string `json:"guest"` // as the router keys guests: "vm 10.0.2.0/24"
	Profile string `json:"profile"`
}

// ProfileSwitch is the outcome of op "profile".
type ProfileSwitch struct {
	Guest   string `json:"guest"`
	Profile string `json:"profile"`
	Ended   int    `json:"ended"` // the guest's live flows the profile refuses, ended
}

// Switcher is the part of a Handler that switches guests' profiles; a Handler without it
// refuses op "profile".
type Switcher interface {
	SwitchProfile(guest, profile string) (ProfileSwitch, error)
}

func answerProfile(req Request, h Handler) Response {
	s, ok := h.(Switcher)
	if !ok {
		return Response{Error: "profile: this daemon switches no profiles"}
	}
	if req.Guest == "" || req.Profile == "" {
		return Response{Error: "profile: guest and profile are required"}
	}
	sw, err := s.SwitchProfile(req.Guest, req.Profile)
	if err != nil {
		return Response{Error: err.Error()}
	}
	return Response{Switch: &sw}
}
