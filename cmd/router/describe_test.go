package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestManAndCompletionsFromFlags: the man page and every shell's completion name every
// command and every flag the commands' own flag sets define (so they cannot drift from
// them); the scripts are valid for their shells where the shell is installed (bash always
// is on a test machine).
func TestManAndCompletionsFromFlags(t *testing.T) {
	cmds := describe()
	has := map[string]bool{}
	for _, c := range cmds {
		for _, f := range c.Flags {
			has[c.Name+" --"+f.Name] = true
		}
	}
	for _, want := range []string{"run --config", "run --learn", "check-ip --echo", "reload --socket", "lint --strict", "explain --dst"} {
		if !has[want] {
			t.Errorf("describe() lacks %s", want)
		}
	}
	man, _, code := run(t, "man")
	if code != exitOK || !strings.HasPrefix(man, ".TH ROUTER 1") {
		t.Fatalf("router man: exit %d\n%.200s", code, man)
	}
	outs := map[string]string{"man": strings.ReplaceAll(man, `\-`, "-")}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		out, errOut, code := run(t, "completion", sh)
		if code != exitOK {
			t.Fatalf("router completion %s: exit %d: %s", sh, code, errOut)
		}
		outs[sh] = out
	}
	for name, out := range outs {
		for _, c := range cmds {
			if !strings.Contains(out, c.Name) {
				t.Errorf("%s lacks the command %s", name, c.Name)
			}
			for _, f := range c.Flags {
				flagText := "--" + f.Name
				if name == "fish" {
					flagText = "-l " + f.Name
				}
				if !strings.Contains(out, flagText) {
					t.Errorf("%s lacks %s %s", name, c.Name, flagText)
				}
			}
		}
	}
	if _, _, code := run(t, "completion", "powershell"); code != exitUsage {
		t.Errorf("an unknown shell: exit %d; want %d", code, exitUsage)
	}
	dir := t.TempDir()
	for sh, check := range map[string][]string{"bash": {"-n"}, "zsh": {"-n"}, "fish": {"--no-execute"}} {
		path, err := exec.LookPath(sh)
		if err != nil {
			if sh == "bash" && runtime.GOOS != "windows" {
				t.Errorf("bash is missing: %v", err)
			}
			t.Logf("%s not installed: its script's syntax is not checked", sh)
			continue
		}
		file := filepath.Join(dir, "router."+sh)
		if err := os.WriteFile(file, []byte(outs[sh]), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(path, append(check, file)...).CombinedOutput(); err != nil {
			t.Errorf("%s rejects its completion: %v\n%s", sh, err, out)
		}
	}
}

// TestVersion: --version and version print the version line from the build info.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, _, code := run(t, args...)
		if code != exitOK || !strings.HasPrefix(out, "router ") || !strings.Contains(out, runtime.Version()) {
			t.Errorf("%v: exit %d, %q; want \"router VERSION ... %s\"", args, code, out, runtime.Version())
		}
	}
}
