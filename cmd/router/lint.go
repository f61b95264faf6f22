package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/conf/lint"
)

func cmdLint(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("lint",
		"Reports rules that can never match, local destinations that would go through a remote\nproxy (the svchost/portproxy trap), direct rules that let caged traffic out, caged traffic\nwith no way out, app names foreign to this OS, forwards listening on every address and\nunused proxies; notes what each hypervisor preset adds. Exits 1 when it finds an error (or\na warning, with --strict), 2 when the file is invalid.", stderr)
	cfgPath := fs.String("config", "", "the config `file`")
	strict := fs.Bool("strict", false, "warnings also make the exit status non-zero")
	asJSON := jsonFlag(fs)
	goos := fs.String("os", "", "judge for this operating system (`linux` or windows: presets, app names); default this one")
	if code, stop := parseFlags(fs, args, "config"); stop {
		return code
	}
	cfg, err := conf.Load(*cfgPath, stateOptions(conf.Options{SkipSecrets: true, OS: *goos}))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	name, _ := os.Hostname()
	h := lint.Host{Addrs: hostAddrs(), Prefixes: hostPrefixes(), Name: name, OS: *goos}
	if *goos == "" || *goos == runtime.GOOS {
		h.Windows = windowsFacts() // this machine's adapters and VMs (Windows only)
	}
	findings := lint.Check(cfg, h)
	code := exitOK
	if lint.HasErrors(findings) || *strict && slices.ContainsFunc(findings, func(f lint.Finding) bool { return f.Severity == lint.Warning }) {
		code = exitFindings
	}
	if *asJSON {
		if findings == nil {
			findings = []lint.Finding{}
		}
		if c := writeJSON(stdout, stderr, findings); c != exitOK {
			return c
		}
		return code
	}
	printFindings(stdout, cfg.File, findings)
	return code
}

// printFindings writes lint's findings as `router lint` prints them, and the count.
func printFindings(w io.Writer, file string, findings []lint.Finding) {
	errs, warns := 0, 0
	for _, f := range findings {
		where := file
		if f.Line > 0 {
			where += ":" + strconv.Itoa(f.Line)
		}
		fmt.Fprintf(w, "%s: %s: %s [%s]\n", where, f.Severity, f.Message, f.Check)
		if f.Fix != "" {
			fmt.Fprintf(w, "    fix: %s\n", f.Fix)
		}
		switch f.Severity {
		case lint.Error:
			errs++
		case lint.Warning:
			warns++
		}
	}
	fmt.Fprintf(w, "%s: %s, %s\n", file, plural(errs, "error"), plural(warns, "warning"))
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}
