package main

import (
	"cmp"
	"fmt"
	"io"
	"runtime/debug"
)

// packageVersion is the release's version, set by scripts/package at link time
// (-ldflags "-X main.packageVersion=1.2.3"); empty in a plain build, which then shows the
// module's version from the build info. Written only by the linker.
var packageVersion string

// versionText is `router --version`: the version, the commit and whether the tree had
// changes, and the Go release, from the binary's build info.
func versionText() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "router " + cmp.Or(packageVersion, "unknown") + " (no build info)\n"
	}
	v := cmp.Or(packageVersion, bi.Main.Version, "(devel)")
	s := map[string]string{}
	for _, kv := range bi.Settings {
		s[kv.Key] = kv.Value
	}
	out := "router " + v
	if rev := s["vcs.revision"]; rev != "" {
		out += fmt.Sprintf(", commit %.12s", rev)
		if s["vcs.modified"] == "true" {
			out += " (modified)"
		}
		if t := s["vcs.time"]; t != "" {
			out += ", " + t
		}
	}
	return out + ", " + bi.GoVersion + " " + s["GOOS"] + "/" + s["GOARCH"] + "\n"
}

func cmdVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("version", "Prints the router's version, the commit it was built from and the Go release (also router --version).", stderr)
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	io.WriteString(stdout, versionText())
	return exitOK
}
