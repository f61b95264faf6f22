package guard

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/agentcage/router/windivert/wfp"
)

// Rival is another product's sublayer that WFP evaluates before the guard's (a higher
// weight): a VPN's kill switch (WireGuard's weighs 0xFFFF), a VPN client, an EDR. Its
// soft permits do not override the guard's blocks (WFP lets a block of any sublayer win
// over a permit that did not clear the action right), and its blocks only add to ours.
// Its hard permits (FWPM_FILTER_FLAG_CLEAR_ACTION_RIGHT) at the layers the guard relies on
// defeat the guard's blocks for what they match: a caged app such a permit matches leaves
// while the router is stopped or crashed (and, at the accept layers, reaches this host
// through the walls). A hard permit whose app conditions name no caged app (WireGuard's
// one, for wireguard.exe) cannot match a caged app's flow: it is Scoped, not a defeat.
type Rival struct {
	Sublayer    wfp.Sublayer
	HardPermits []wfp.Filter // at the guard's layers, able to match a caged app's flow
	Scoped      []wfp.Filter // hard permits for apps that are not caged
	// BlocksAll is set when the rival blocks, at a connect or accept layer, every flow it
	// does not permit (a kill switch): the router's reflected connections, which arrive
	// at its listener from the original destination on no tunnel, and its own DNS to a
	// resolver off the tunnel are refused unless it permits them: caged flows fail
	// (closed) and names do not resolve.
	BlocksAll bool
}

// Breaks says what the rival's blocks break for the router ("" when nothing is known to).
func (r Rival) Breaks() string {
	if !r.BlocksAll {
		return ""
	}
	return "it blocks every flow it does not permit: the router's redirected connections (they reach its listener from the original destination, not on the tunnel) and its DNS to a resolver off the tunnel may be refused, so caged flows fail and names do not resolve; exclude the router (router.exe) from the VPN's kill switch or use split tunnelling"
}

// Defeats says what the rival's hard permits can let through (empty: nothing; the
// sublayer only outranks ours).
func (r Rival) Defeats() string {
	var what []string
	seen := map[string]bool{}
	for _, f := range r.HardPermits {
		var w string
		switch f.Layer {
		case wfp.LayerConnectV4, wfp.LayerConnectV6:
			w = "the blocks of the caged apps' connections (a stopped or crashed router lets what it permits leave uncaptured)"
		case wfp.LayerAcceptV4, wfp.LayerAcceptV6:
			w = "the host walls (guests reach this host's services it permits)"
		case wfp.LayerForwardV4, wfp.LayerForwardV6:
			w = "the cage subnets' forwarding block"
		}
		if w != "" && !seen[w] {
			seen[w] = true
			what = append(what, w)
		}
	}
	return strings.Join(what, "; ")
}

func (r Rival) String() string {
	s := fmt.Sprintf("sublayer %q (weight %#x) above the guard's", r.Sublayer.Name, r.Sublayer.Weight)
	if b := r.Breaks(); b != "" {
		s += " (" + b + ")"
	}
	if len(r.HardPermits) == 0 {
		if len(r.Scoped) > 0 {
			return fmt.Sprintf("%s: its %d hard permits name only apps that are not caged; no hard permit reaches the caged apps", s, len(r.Scoped))
		}
		return s + ": no hard permits at the guard's layers"
	}
	names := make([]string, 0, len(r.HardPermits))
	for _, f := range r.HardPermits {
		names = append(names, fmt.Sprintf("%q (%v)", f.Name, f.Layer))
	}
	return fmt.Sprintf("%s: %d hard permits [%s] defeat %s", s, len(r.HardPermits), strings.Join(names, ", "), r.Defeats())
}

// reachesCaged reports whether the permit f can match a caged app's flow: it has no app
// condition, or one naming a caged app (conditions on one field are OR-ed).
func reachesCaged(f wfp.Filter, caged []string) bool {
	apps := 0
	for _, c := range f.Conditions {
		if c.Field != wfp.FieldApp {
			continue
		}
		apps++
		if slices.ContainsFunc(caged, func(a string) bool { return strings.EqualFold(a, c.Path) }) {
			return true
		}
	}
	return apps == 0
}

// guardLayers are the layers the plan's filters use.
var guardLayers = []wfp.Layer{wfp.LayerConnectV4, wfp.LayerConnectV6, wfp.LayerAcceptV4, wfp.LayerAcceptV6, wfp.LayerForwardV4, wfp.LayerForwardV6}

// Rivals lists the sublayers that WFP evaluates before the guard's (a higher weight, or the
// same weight and a lower key, as WFP orders them), with their hard permits at the guard's
// layers sorted by whether they can match a flow of caged (the caged apps' paths; case
// does not matter), highest first. The guard's own sublayer and provider are left out.
func Rivals(eng wfp.Engine, caged []string) ([]Rival, error) {
	s, err := eng.Open(wfp.SessionOptions{Name: "router guard coexistence check"})
	if err != nil {
		return nil, fmt.Errorf("list rival sublayers: %w", err)
	}
	defer s.Close()
	subs, err := s.AllSublayers()
	if err != nil {
		return nil, fmt.Errorf("list rival sublayers: %w", err)
	}
	above := map[wfp.Key]*Rival{}
	var out []*Rival
	for _, sl := range subs {
		if sl.Key == SublayerKey || sl.Provider == ProviderKey {
			continue
		}
		if sl.Weight > SublayerWeight || (sl.Weight == SublayerWeight && sl.Key.String() < SublayerKey.String()) {
			r := &Rival{Sublayer: sl}
			above[sl.Key] = r
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	for _, l := range guardLayers {
		fs, err := s.LayerFilters(l)
		if err != nil {
			return nil, fmt.Errorf("list rival filters: %w", err)
		}
		for _, f := range fs {
			r, ok := above[f.Sublayer]
			if !ok {
				continue
			}
			f.Layer = l
			switch {
			case f.Action == wfp.Permit && f.Hard && !reachesCaged(f, caged):
				r.Scoped = append(r.Scoped, f)
			case f.Action == wfp.Permit && f.Hard:
				r.HardPermits = append(r.HardPermits, f)
			case f.Action == wfp.Block && len(f.Conditions) == 0 && l != wfp.LayerForwardV4 && l != wfp.LayerForwardV6:
				r.BlocksAll = true
			}
		}
	}
	slices.SortFunc(out, func(a, b *Rival) int {
		if c := cmp.Compare(b.Sublayer.Weight, a.Sublayer.Weight); c != 0 {
			return c
		}
		return strings.Compare(a.Sublayer.Key.String(), b.Sublayer.Key.String())
	})
	rs := make([]Rival, len(out))
	for i, r := range out {
		rs[i] = *r
	}
	return rs, nil
}
