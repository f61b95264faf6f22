package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/control"
	"github.com/agentcage/router/rules/policy"
)

// profileHelp is `router profile --help`'s detail.
const profileHelp = "Switches a guest to a [profile.NAME] of the config (default: the top-level rules): its new\n" +
	"flows are decided by the profile's rules from now on, and its live flows the profile\n" +
	"refuses are ended at once. GUEST is a VM network of [capture] vm_networks (CIDR), a\n" +
	"guest's address, or app:NAME, a caged app by its executable's file name (app:slirp4netns,\n" +
	"app:qemu-system-x86_64; on Windows app:VBoxHeadless.exe): the flows of the processes\n" +
	"running that executable. The switch lasts until the next switch or the daemon's stop; a\n" +
	"reload keeps it. `router status` shows the switched guests."

// cmdProfile switches a guest of the running daemon to one of the config's profiles.
func cmdProfile(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("profile", profileHelp, stderr)
	cfgPath, socket := controlFlags(fs)
	asJSON := jsonFlag(fs)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() != 2 {
		fmt.Fprintln(stderr, "router profile: want GUEST PROFILE (e.g. router profile 10.0.2.0/24 offline, router profile app:slirp4netns build)")
		return exitUsage
	}
	req := control.Request{Op: "profile", Guest: fs.Arg(0), Profile: fs.Arg(1)}
	resp, code, ok := callDaemon("profile", *cfgPath, *socket, req, stderr)
	if !ok {
		return code
	}
	if *asJSON {
		return writeJSON(stdout, stderr, resp.Switch)
	}
	sw := resp.Switch
	fmt.Fprintf(stdout, "%s: profile %s; %d live flows it refuses ended\n", sw.Guest, sw.Profile, sw.Ended)
	return exitOK
}

// writeProfiles prints the switched guests' profiles, as `router status` shows them; nothing
// when the config defines no profile.
func writeProfiles(w io.Writer, st *control.Status) {
	if len(st.ProfileNames) < 2 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nGUEST\tPROFILE")
	for _, g := range st.Profiles {
		fmt.Fprintf(tw, "%s\t%s\n", g.Guest, g.Profile)
	}
	fmt.Fprintf(tw, "(others)\tdefault\n")
	tw.Flush()
	fmt.Fprintf(w, "profiles: %s (switch with: router profile GUEST PROFILE); the rules above are the default's\n", strings.Join(st.ProfileNames, ", "))
}

// profileOf is the policy of cfg's profile name, and cfg as that profile's rules see it
// (its rules and their lines in place of the top-level ones), for explain; false when cfg
// has no such profile (then pol and cfg are returned as they are).
func profileOf(pol *policy.Policy, cfg *conf.Config, name string) (*policy.Policy, *conf.Config, bool) {
	pp, ok := pol.Profile(name)
	prof, ok2 := cfg.Profile(name)
	if !ok || !ok2 {
		return pol, cfg, false
	}
	c := *cfg
	c.Rules, c.RuleLines = prof.Rules, prof.RuleLines
	return pp, &c, true
}
