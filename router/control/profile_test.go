package control

import (
	"errors"
	"net"
	"strings"
	"testing"
)

type switchingHandler struct {
	fakeHandler
	got []string
}

func (h *switchingHandler) SwitchProfile(guest, profile string) (ProfileSwitch, error) {
	if profile == "nope" {
		return ProfileSwitch{}, errors.New(`profile "nope": no such profile`)
	}
	h.got = append(h.got, guest+" "+profile)
	return ProfileSwitch{Guest: "vm " + guest, Profile: profile, Ended: 2}, nil
}

func TestProfileOp(t *testing.T) {
	for _, c := range []struct {
		name    string
		h       Handler
		req     Request
		want    string // the error, or the switch as guest/profile/ended
		wantGot string
	}{
		{"switch", &switchingHandler{}, Request{Op: "profile", Guest: "10.0.2.0/24", Profile: "offline"}, "vm 10.0.2.0/24/offline/2", "10.0.2.0/24 offline"},
		{"unknown profile", &switchingHandler{}, Request{Op: "profile", Guest: "10.0.2.0/24", Profile: "nope"}, `profile "nope": no such profile`, ""},
		{"no guest", &switchingHandler{}, Request{Op: "profile", Profile: "offline"}, "profile: guest and profile are required", ""},
		{"no switcher", fakeHandler{}, Request{Op: "profile", Guest: "10.0.2.0/24", Profile: "offline"}, "profile: this daemon switches no profiles", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, cli := net.Pipe()
			go serveConn(srv, c.h, nil)
			cl := &Client{c: cli}
			cl.sc = newScanner(cli)
			defer cl.Close()
			r, err := cl.Do(c.req)
			got := ""
			if err != nil {
				got = err.Error()
			} else if r.Switch != nil {
				got = strings.Join([]string{r.Switch.Guest, r.Switch.Profile}, "/") + "/" + string(rune('0'+r.Switch.Ended))
			}
			if got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
			if sh, ok := c.h.(*switchingHandler); ok && strings.Join(sh.got, ",") != c.wantGot {
				t.Errorf("switched %q, want %q", sh.got, c.wantGot)
			}
		})
	}
}
