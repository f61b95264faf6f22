//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// singboxModule is the package routerbench builds sing-box from. Its default build (no build
// tags) has the redirect inbound (which reads SO_ORIGINAL_DST) and the socks outbound on
// Linux; nothing of it is kept in this repository.
const singboxModule = "github.com/sagernet/sing-box/cmd/sing-box"

// singboxBinary returns sing-box at version, built with `go install` through the module
// proxy into a cache directory of this user (outside any repository) the first time and
// taken from there afterwards. The first build downloads the module and its dependencies
// (minutes); progress goes to log.
func singboxBinary(ctx context.Context, version string, log io.Writer) (string, error) {
	if !regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`).MatchString(version) {
		return "", fmt.Errorf("sing-box version %q: want a tag like v1.14.1", version)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("sing-box cache: %w", err)
	}
	dir := filepath.Join(cache, "routerbench", "sing-box-"+version)
	bin := filepath.Join(dir, "sing-box")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("sing-box cache: %w", err)
	}
	// Build into a scratch directory and rename, so an interrupted build leaves no binary
	// that a later run would take.
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", fmt.Errorf("sing-box cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(log, "building sing-box %s into %s (the first time takes minutes) ...\n", version, dir)
	cmd := exec.CommandContext(ctx, "go", "install", singboxModule+"@"+version)
	cmd.Dir = tmp // outside any module: `go install pkg@version` builds the module alone
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=-trimpath -buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build sing-box %s (leave the row out with -singbox=false): %w\n%s", version, err, tail(string(out), 3000))
	}
	if err := os.Rename(filepath.Join(tmp, "sing-box"), bin); err != nil {
		return "", fmt.Errorf("sing-box cache: %w", err)
	}
	return bin, nil
}

// singboxConfig is sing-box's config for the benchmark: a redirect inbound on listenPort (the
// lab's nft redirect sends the row's flows there; it reads SO_ORIGINAL_DST), every flow to a
// SOCKS5 outbound at up, and only errors logged (as redsocks runs with log_info off).
func singboxConfig(listenPort int, up string) ([]byte, error) {
	ap, err := netip.ParseAddrPort(up)
	if err != nil {
		return nil, fmt.Errorf("sing-box config: upstream: %w", err)
	}
	type inbound struct {
		Type       string `json:"type"`
		Tag        string `json:"tag"`
		Listen     string `json:"listen"`
		ListenPort int    `json:"listen_port"`
	}
	type outbound struct {
		Type       string `json:"type"`
		Tag        string `json:"tag"`
		Server     string `json:"server"`
		ServerPort uint16 `json:"server_port"`
		Version    string `json:"version"`
	}
	cfg := struct {
		Log       map[string]string `json:"log"`
		Inbounds  []inbound         `json:"inbounds"`
		Outbounds []outbound        `json:"outbounds"`
		Route     map[string]string `json:"route"`
	}{
		Log:       map[string]string{"level": "error"},
		Inbounds:  []inbound{{Type: "redirect", Tag: "redir-in", Listen: "0.0.0.0", ListenPort: listenPort}},
		Outbounds: []outbound{{Type: "socks", Tag: "upstream", Server: ap.Addr().String(), ServerPort: ap.Port(), Version: "5"}},
		Route:     map[string]string{"final": "upstream"},
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("sing-box config: %w", err)
	}
	return append(b, '\n'), nil
}

// singboxCheck runs `sing-box check` on the config the benchmark will use, so that a config
// the version does not take fails before the lab is built.
func singboxCheck(ctx context.Context, bin, dir string) error {
	text, err := singboxConfig(singboxPort, upstream)
	if err != nil {
		return err
	}
	conf := filepath.Join(dir, "sing-box-check.json")
	if err := os.WriteFile(conf, text, 0o644); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, bin, "check", "-c", conf).CombinedOutput(); err != nil {
		return fmt.Errorf("sing-box check: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
