//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// moduleRoot is the directory of the router module the benchmark runs in (from `go env
// GOMOD`), or an error outside it.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the router module (run from the repository): %v", err)
	}
	return filepath.Dir(mod), nil
}

// gitOut runs git in dir and returns its trimmed output.
func gitOut(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = strings.TrimSpace(string(ee.Stderr))
		}
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out)), nil
}

// describeTree names the revision of the working tree at root, "+ uncommitted changes" when
// it has some; "" when root is not a git checkout.
func describeTree(ctx context.Context, root string) string {
	head, err := gitOut(ctx, root, "rev-parse", "--short=12", "HEAD")
	if err != nil {
		return ""
	}
	if st, err := gitOut(ctx, root, "status", "--porcelain", "--untracked-files=no"); err == nil && st != "" {
		return head + " + uncommitted changes"
	}
	return head
}

// buildRouter builds ./cmd/router of the module at root into out.
func buildRouter(ctx context.Context, root, out string) error {
	build := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/router")
	build.Dir = root
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build router in %s: %w\n%s", root, err, b)
	}
	return nil
}

// buildRevision builds ./cmd/router as it was at git revision rev of the repository at root:
// `git archive` of that commit into a scratch directory under dir, `go build` there, and the
// scratch removed; the repository and its worktrees are not touched. It returns the binary
// and the full commit name.
func buildRevision(ctx context.Context, root, rev, dir string, log io.Writer) (bin, commit string, err error) {
	if strings.HasPrefix(rev, "-") {
		return "", "", fmt.Errorf("-base-rev %q: not a revision", rev)
	}
	commit, err = gitOut(ctx, root, "rev-parse", "--verify", "--end-of-options", rev+"^{commit}")
	if err != nil {
		return "", "", fmt.Errorf("-base-rev %q: %w", rev, err)
	}
	src, err := os.MkdirTemp(dir, "base-src-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(src)
	tarball := filepath.Join(dir, "base.tar")
	defer os.Remove(tarball)
	if _, err := gitOut(ctx, root, "archive", "--format=tar", "-o", tarball, commit); err != nil {
		return "", "", err
	}
	if out, err := exec.CommandContext(ctx, "tar", "-x", "-f", tarball, "-C", src).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("unpack %s: %w: %s", commit, err, out)
	}
	fmt.Fprintf(log, "building ./cmd/router at %.12s ...\n", commit)
	bin = filepath.Join(dir, "router-base")
	if err := buildRouter(ctx, src, bin); err != nil {
		return "", "", err
	}
	return bin, commit, nil
}
