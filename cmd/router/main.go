// Command router is an egress firewall and SOCKS5 router for hosts that run an AI coding agent
// in a virtual machine: every byte the hypervisor emits goes through an upstream SOCKS5 proxy,
// except what a direct rule allows; DNS never leaks; the cage stays closed when something fails.
//
// This file only dispatches subcommands; each lives in a file of its own.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/agentcage/router/cmd/router/checkip"
)

// command is one subcommand of the router binary.
type command struct {
	name    string
	usage   string // one line: arguments after the name
	summary string // one line: what it does
	run     func(args []string, stdout, stderr io.Writer) int
	// admin: the command changes the firewall (Linux: root, or CAP_NET_ADMIN; Windows: an
	// elevated prompt) and says what to do when run without it, before it reads anything.
	admin bool
}

// Exit codes shared by every subcommand.
const (
	exitOK       = 0 // success, nothing found
	exitFindings = 1 // the command ran and found a problem (lint findings, check-ip leak)
	exitUsage    = 2 // bad arguments, unreadable or invalid config, a missing privilege
)

// serviceInstallUsage is `router service install`'s argument line (part of service's).
const serviceInstallUsage = "--config FILE [--env NAME=VALUE]..."

// commands is the one table of the subcommands: `router help`, each command's --help
// (newFlags), the man page and the shell completions (describe) take the name, the usage
// line and the summary from here, and the flags from the command's own flag set. A test
// holds docs/guide.md's list of commands to it.
func commands() []command {
	return []command{
		{"run", "--config FILE [--learn] [--log-format text|json]", "run the daemon in the foreground (SIGHUP reloads, SIGTERM stops)", cmdRun, true},
		{"explain", "--config FILE [--app NAME] [--path PATH] [--service NAME]... [--src IP] [--from-vm] [--network tcp|udp] --dst HOST:PORT [--name NAME] [--sni NAME] [--resolved IP,...] [--profile NAME] [--os linux|windows] [--socket PATH] [--json]", "show what happens to a flow: the implicit step or the rule that decides, and why each earlier rule did not", cmdExplain, false},
		{"lint", "--config FILE [--os linux|windows] [--strict] [--json]", "report shadowed rules, local destinations sent to a proxy, leaks written out, caged traffic with no way out, unsafe forwards", cmdLint, false},
		{"learn", "--config FILE [--flows PATH] [--suggest] [--proxy NAME] [--json]", "from a session's flow log: what the caged traffic reached, or (--suggest) an allow-list for it", cmdLearn, false},
		{"diff", "--flows PATH [--old FILE | --socket PATH] --new FILE [--os linux|windows] [--json]", "replay a recorded session under the config in force and a new one: what the new one would refuse, open or move", cmdDiff, false},
		{"check-ip", checkip.Usage + " | " + checkip.WhyUsage, "from inside the guest: prove the cage holds (exit IP, model, DNS, UDP, IPv6, the host's ports), or ask the router why a flow is refused", cmdCheckIP, false},
		{"check-proxy", "--config FILE [--proxy NAME] [--echo URL]... [--timeout D] [--json]", "from this host: test each upstream proxy (reach, credentials, exit address, DNS through it, latency)", cmdCheckProxy, false},
		{"status", "[--config FILE | --socket PATH] [--json]", "the running daemon's live flows and per-rule counters", cmdStatus, false},
		{"reload", "[--config FILE | --socket PATH]", "make the running daemon read its config again; exit 1 with the reason when it refuses the new one", cmdReload, false},
		{"ask", "[--config FILE | --socket PATH] [--json] [--id ID --answer once|run|always|deny]", "list what the daemon asks about, or answer it", cmdAsk, false},
		{"profile", "[--config FILE | --socket PATH] [--json] GUEST PROFILE", "switch a guest (VM network, address or app:NAME) to a [profile.NAME] of the config, or back to default", cmdProfile, false},
		{"console", "[--config FILE | --socket PATH]", "print the web console's URL (with its token)", cmdConsole, false},
		{"watch", "[--config FILE | --socket PATH] [--interval D] [--sort rate|age|bytes] [--once] [--no-altscreen]", "a live terminal view of the running daemon: flows, rules, refusals, upstream health", cmdWatch, false},
		{"service", "install " + serviceInstallUsage + " | upgrade | uninstall | start | stop", "Windows: run the router as a service (Linux: dist/router.service)", cmdService, false},
		{"guard", "--config FILE", "install the fail-closed guard alone, without the daemon (at boot, after a failed start)", cmdGuard, true},
		{"cleanup", "[--config FILE | --table NAME] [--socket PATH] [--force]", "remove the router's capture and guard (lets VM traffic flow unproxied); --force stops a running router first", cmdCleanup, true},
		{"import", "proxifier PROFILE.ppx [-o FILE] [--force]", "turn a Proxifier profile into a config, say what could not be carried, and lint it", cmdImport, false},
		{"hold", "--handle N --parent PID [--relay]", "internal (Windows): the daemon's WinDivert holder, which fails closed through a crash", cmdHold, false},
		{"adapters", "[--json]", "Windows: the VM-facing adapters, their subnets, and whether Windows NAT or forwarding carries their guests", cmdAdapters, false},
		{"ca", "", "print the certificate of the router's own CA (made on first use), for the guests whose HTTPS to a tls_terminate destination it terminates", cmdCA, false},
		{"version", "", "print the version, the commit and the Go release (also --version)", cmdVersion, false},
	}
}

// usageOf is the usage line of the command name in the table ("" for none).
func usageOf(name string) string {
	for _, c := range commands() {
		if c.name == name {
			return c.usage
		}
	}
	return ""
}

// newFlags makes the flag set of the command name, whose --help prints its usage line (from
// the table), detail (the long help) and the flags.
func newFlags(name, detail string, stderr io.Writer) *flag.FlagSet {
	return newFlagsUsage(name, usageOf(name), detail, stderr)
}

// newFlagsUsage is newFlags with the usage line given: for a subcommand of a command
// (service install), whose line is part of its command's.
func newFlagsUsage(name, usage, detail string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("router "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s\n\n%s\n\nFlags:\n", strings.TrimSpace("router "+name+" "+usage), detail)
		fs.PrintDefaults()
	}
	if c, ok := stderr.(*flagCollector); ok {
		c.collectUsage(fs, usage, detail) // router man, router completion (describe.go)
	}
	return fs
}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	return dispatchAs(args, stdout, stderr, hostPrivileged)
}

// dispatchAs runs the command args name; priv tells whether this process has the
// privilege the admin commands need.
func dispatchAs(args []string, stdout, stderr io.Writer, priv privileged) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	case "--version", "-version":
		return cmdVersion(nil, stdout, stderr)
	case "man": // hidden: the package's man page, router(1)
		return cmdMan(args[1:], stdout, stderr)
	case "completion": // hidden: the package's bash, zsh and fish completions
		return cmdCompletion(args[1:], stdout, stderr)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			if c.admin && !helpAsked(args[1:]) && !checkPrivilege(c.name, priv, stderr) {
				return exitUsage
			}
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "router: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	var b strings.Builder
	b.WriteString("router: egress firewall and SOCKS5 router for a VM-caged coding agent\n\nUsage:\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "  router %s %s\n      %s\n", c.name, c.usage, c.summary)
	}
	b.WriteString("\nRun 'router COMMAND --help' for the flags of one command.\n")
	io.WriteString(w, b.String())
}
