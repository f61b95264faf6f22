package guard

import (
	"slices"
	"strings"
	"testing"

	"github.com/agentcage/router/windivert/wfp"
)

func TestSystemImage(t *testing.T) {
	for _, tc := range []struct {
		root, path string
		want       bool
	}{
		{"", svchost, true},
		{`C:\Windows`, `c:/windows/system32/SVCHOST.EXE`, true},
		{`C:\Windows\`, `C:\Windows\System32\dllhost.exe`, true},
		{`D:\WINNT`, `D:\winnt\system32\svchost.exe`, true},
		{`D:\WINNT`, svchost, false},
		{"", vmnat, false}, // VMware's NAT, installed in SysWOW64
		{"", vboxVM, false},
		{"", `C:\WindowsApps\x.exe`, false},
	} {
		if got := SystemImage(tc.root, tc.path); got != tc.want {
			t.Errorf("SystemImage(%q, %q) = %v, want %v", tc.root, tc.path, got, tc.want)
		}
	}
}

// TestPlanNeverGuardsSystemImages: svchost.exe among the caged apps puts no filter naming
// it in the plan (the guard would cut the host's services off while the router is
// stopped); VMware's vmnat.exe in SysWOW64 is still guarded.
func TestPlanNeverGuardsSystemImages(t *testing.T) {
	env := baseEnv()
	env.CagedApps = append(env.CagedApps, svchost, strings.ToUpper(svchost), vmnat)
	p, err := NewPlan(env)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(p.Env.CagedApps, func(a string) bool { return strings.EqualFold(a, svchost) }) || !slices.Contains(p.Env.CagedApps, vmnat) {
		t.Errorf("plan's caged apps %v: want vmnat.exe and no svchost.exe", p.Env.CagedApps)
	}
	for _, f := range append(slices.Clone(p.Persistent), p.Dynamic...) {
		for _, c := range f.Conditions {
			if c.Field == wfp.FieldApp && strings.EqualFold(c.Path, svchost) {
				t.Errorf("filter %q names svchost.exe", f.Name)
			}
		}
	}
}
