package daemon

import (
	"net/netip"
	"testing"

	"github.com/agentcage/router/router/capture/capturetest"
	"github.com/agentcage/router/rules/policy"
)

// profilePlatform is a fake platform that decides flows itself (capture.ProfileDecider, as
// the Windows engine does): it records the choice of profile it was given and the guest
// each EndSwitched asks about.
type profilePlatform struct {
	*capturetest.Platform
	pick     *func(p *policy.Policy, f *policy.Flow) *policy.Policy
	installs *int  // the installs done when it was given
	asked    *bool // EndSwitched was asked whether the guest's flow is of the switched guest
}

func (p profilePlatform) UseProfiles(pick func(p *policy.Policy, f *policy.Flow) *policy.Policy) {
	*p.pick = pick
	_, *p.installs = p.Counts()
}

// EndSwitched ends two flows when a flow of 10.0.2.15 is of the guest switched.
func (p profilePlatform) EndSwitched(of func(p *policy.Policy, f *policy.Flow) bool) int {
	ds := p.Decisions()
	if len(ds) == 0 {
		return 0
	}
	*p.asked = of(ds[len(ds)-1], &policy.Flow{Src: netip.MustParseAddr("10.0.2.15")})
	if *p.asked {
		return 2
	}
	return 0
}

// TestProfileSwitchReachesTheCapture: a platform that decides flows itself gets the router's
// choice of profile before its first Install, which picks a switched guest's profile; a
// switch asks it to end its own flows of the guest, counted with the router's.
func TestProfileSwitchReachesTheCapture(t *testing.T) {
	s := newScene(t)
	s.write(s.text("127.0.0.0/8", "[profile.offline]\n"))
	var pick func(p *policy.Policy, f *policy.Flow) *policy.Policy
	installs := -1
	var asked bool
	pf := profilePlatform{&capturetest.Platform{}, &pick, &installs, &asked}
	d := s.daemon(pf, nil)
	s.start(d)
	if pick == nil || installs != 0 {
		t.Fatalf("the platform was given the choice of profile %v after %d installs, want it before the first", pick != nil, installs)
	}
	sw, err := d.status.SwitchProfile("10.0.2.0/24", "offline")
	if err != nil {
		t.Fatal(err)
	}
	if !asked || sw.Ended != 2 || sw.Guest != "vm 10.0.2.0/24" {
		t.Errorf("switch %+v (platform asked: %v); want the platform's 2 flows of vm 10.0.2.0/24 counted", sw, asked)
	}
	ds := pf.Decisions()
	pol := ds[len(ds)-1]
	if got := pick(pol, &policy.Flow{Src: netip.MustParseAddr("10.0.2.15")}); got.ProfileName() != "offline" {
		t.Errorf("the platform's choice for the switched guest: profile %s; want offline", got.ProfileName())
	}
	if got := pick(pol, &policy.Flow{Src: netip.MustParseAddr("192.0.2.10")}); got != pol {
		t.Errorf("the platform's choice for another flow: profile %s; want the default", got.ProfileName())
	}
}
