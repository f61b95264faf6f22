package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/conf/lint"
	"github.com/agentcage/router/conf/proxifier"
	"github.com/agentcage/router/internal/clock"
	"github.com/agentcage/router/internal/progress"
)

// steps is an operation's progress line as a command drives it (progress.Line).
type steps interface {
	Step(step string)
	Done()
}

// startProgress begins the progress line of an operation on w (drawn only when w is a
// terminal), with the system's clock.
func startProgress(w io.Writer) func(first string) steps {
	tty, width, _ := terminal(w)
	return func(first string) steps { return progress.Start(w, tty, width, clock.System{}, first) }
}

func cmdImport(args []string, stdout, stderr io.Writer) int {
	return importProfile(args, stdout, stderr, startProgress(stderr))
}

// importProfile is `router import`; start begins its progress line (on stderr), which is
// cleared before anything else is written.
func importProfile(args []string, stdout, stderr io.Writer, start func(first string) steps) int {
	fs := newFlags("import",
		"Reads a Proxifier profile (.ppx, version 3 or 4, Windows or macOS) and writes the config\n"+
			"that does what it does: proxies, chains, rules in order (disabled ones with\n"+
			"enabled = false), the DNS settings. What it could not carry as written is listed\n"+
			"with the profile's line and why; then the config is linted as `router lint` would.\n"+
			"Passwords are never copied: each proxy with one gets a password_env to set.\n"+
			"Without -o the config goes to standard output and the rest to standard error.\n"+
			"Exits 1 when lint finds an error in the result, 2 when the profile cannot be read.", stderr)
	out := fs.String("o", "", "write the config to this `file` (refused if it exists, unless --force)")
	force := fs.Bool("force", false, "overwrite the -o file")
	// Flags may come after the positional arguments: take those out first.
	var pos, flags []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-o" || a == "--o":
			flags = append(flags, a)
			if i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
		case strings.HasPrefix(a, "-") && a != "-":
			flags = append(flags, a)
		default:
			pos = append(pos, a)
		}
	}
	if code, stop := parseFlags(fs, flags); stop {
		return code
	}
	if len(pos) != 2 || pos[0] != "proxifier" {
		fmt.Fprintln(stderr, "usage: router import "+usageOf("import"))
		return exitUsage
	}
	line := start("reading " + pos[1])
	defer line.Done()
	fail := func(format string, a ...any) int {
		line.Done()
		fmt.Fprintf(stderr, format, a...)
		return exitUsage
	}
	data, err := readBounded(pos[1], proxifier.MaxSize)
	if err != nil {
		return fail("router import: %v\n", err)
	}
	line.Step(fmt.Sprintf("parsing %s (%d KB)", pos[1], len(data)>>10))
	p, err := proxifier.Parse(pos[1], data)
	if err != nil {
		return fail("router import: %v\n", err)
	}
	line.Step(fmt.Sprintf("converting %d rules", len(p.Rules)))
	res := proxifier.Convert(p, proxifier.Options{Source: baseName(pos[1])})
	name := *out
	if name == "" {
		name = "router.toml"
	}
	if len(res.TOML) > conf.MaxFileSize {
		return fail("router import: the config made from %s would be %d bytes, more than the %d a config may have: split the profile's largest lists\n", pos[1], len(res.TOML), conf.MaxFileSize)
	}
	line.Step(fmt.Sprintf("loading the config (%d KB)", len(res.TOML)>>10))
	cfg, err := conf.Parse(name, res.TOML, stateOptions(conf.Options{SkipSecrets: true, OS: res.OS}))
	if err != nil {
		// A bug of the importer: its output must always load.
		return fail("router import: the config written from %s does not load (a bug, please report it):\n%v\n", pos[1], err)
	}
	line.Step(fmt.Sprintf("linting %d rules", len(cfg.Rules)))
	h := lint.Host{OS: res.OS}
	if res.OS == "" || res.OS == runtime.GOOS {
		hn, _ := os.Hostname()
		h.Addrs, h.Prefixes, h.Name = hostAddrs(), hostPrefixes(), hn
	}
	findings := lint.Check(cfg, h)
	line.Done()
	report := stderr
	if *out != "" {
		flag := os.O_WRONLY | os.O_CREATE | os.O_EXCL
		if *force {
			flag = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
		}
		f, err := os.OpenFile(*out, flag, 0o600)
		if err == nil {
			_, err = f.Write(res.TOML)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "router import: write %s: %v\n", *out, err)
			return exitUsage
		}
		report = stdout
		fmt.Fprintf(report, "wrote %s from %s (%d rules, %d proxies)\n", *out, pos[1], len(cfg.Rules), len(cfg.Proxies))
	} else if _, err := stdout.Write(res.TOML); err != nil {
		return exitUsage
	}
	for _, n := range res.Notes {
		where := pos[1]
		if n.Line > 0 {
			where = fmt.Sprintf("%s:%d", pos[1], n.Line)
		}
		fmt.Fprintf(report, "%s: %s: %s\n", where, n.Kind, n.Msg)
	}
	fmt.Fprintf(report, "lint of %s:\n", name)
	printFindings(report, name, findings)
	if lint.HasErrors(findings) {
		return exitFindings
	}
	return exitOK
}

// readBounded reads at most limit bytes of path, refusing a larger file unread.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, errors.New(path + ": larger than the " + fmt.Sprint(limit) + " bytes a profile may have")
	}
	return b, nil
}

func baseName(p string) string {
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		return p[i+1:]
	}
	return p
}
