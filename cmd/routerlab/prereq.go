package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// A prerequisite is something routerlab needs before it builds anything.
type prerequisite struct {
	tool string // the command looked up on PATH
	pkg  string // the Debian package that installs it; empty when apt cannot
	use  string // what routerlab does with it
}

// prerequisites are the tools the lab and the tour run, in the order they are reported.
func prerequisites() []prerequisite {
	return []prerequisite{
		{"ip", "iproute2", "network namespaces, links and routes"},
		{"nft", "nftables", "the hypervisor's NAT and the leak counter"},
		{"curl", "curl", "the guest's page fetches"},
		{"dig", "dnsutils", "the guest's DNS questions"},
		{"danted", "dante-server", "the lab's second SOCKS5 upstream"},
		{"go", "", "building the router binary"},
	}
}

// prereqEnv is what the check looks at, injected so the check is testable without root.
type prereqEnv struct {
	root     bool
	lookPath func(file string) (string, error) // exec.LookPath
	// module returns the path of the Go module the working directory is in (`go list -m`);
	// it is called only when go is found.
	module func() (string, error)
}

// prereqError lists what is missing; main exits 2 on it.
type prereqError struct {
	root    bool     // whether we run as root (the apt-get line needs sudo otherwise)
	missing []string // one line each
	pkgs    []string // Debian packages to install
}

func (e *prereqError) Error() string {
	var b strings.Builder
	b.WriteString("cannot start, prerequisites missing:\n")
	for _, m := range e.missing {
		fmt.Fprintf(&b, "  - %s\n", m)
	}
	if len(e.pkgs) > 0 {
		sudo := ""
		if !e.root {
			sudo = "sudo "
		}
		fmt.Fprintf(&b, "Install the Debian packages with:\n  %sapt-get update && %sapt-get install -y %s\n",
			sudo, sudo, strings.Join(e.pkgs, " "))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// checkPrerequisites returns a *prereqError naming everything missing, or nil.
func checkPrerequisites(env prereqEnv) error {
	e := &prereqError{root: env.root}
	if !env.root {
		e.missing = append(e.missing, "root: the lab makes network namespaces and nftables tables "+
			"(sudo go run ./cmd/routerlab; when sudo cannot find go: sudo env PATH=$PATH go run ./cmd/routerlab)")
	}
	for _, p := range prerequisites() {
		if _, err := env.lookPath(p.tool); err == nil {
			if p.tool == "go" {
				if mod, err := env.module(); err != nil || mod != modulePath {
					e.missing = append(e.missing, "the router's source: run routerlab inside its repository (here `go list -m` says "+
						describeModule(mod, err)+")")
				}
			}
			continue
		}
		if p.pkg == "" {
			e.missing = append(e.missing, fmt.Sprintf("%s, for %s: install Go %s or newer (the version go.mod names; Debian's golang-go is older)",
				p.tool, p.use, goVersion))
			continue
		}
		e.missing = append(e.missing, fmt.Sprintf("%s (Debian package %s), for %s", p.tool, p.pkg, p.use))
		e.pkgs = append(e.pkgs, p.pkg)
	}
	if len(e.missing) == 0 {
		return nil
	}
	return e
}

// modulePath is the router's module; goVersion the toolchain its go.mod asks for.
const (
	modulePath = "github.com/agentcage/router"
	goVersion  = "1.26"
)

func describeModule(mod string, err error) string {
	if err != nil {
		return "no module"
	}
	return fmt.Sprintf("%q", mod)
}

// withSbin returns the search path path with the system's sbin directories appended where
// they are missing.
func withSbin(path string) string {
	dirs := filepath.SplitList(path)
	for _, d := range []string{"/usr/local/sbin", "/usr/sbin", "/sbin"} {
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return strings.Join(dirs, string(filepath.ListSeparator))
}
