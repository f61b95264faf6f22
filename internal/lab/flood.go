package lab

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/agentcage/router/internal/syncbuf"
)

// Silent destinations and a router short of descriptors, for the resource-exhaustion
// scenes: a guest that holds many connections to destinations that never answer, or that
// opens more flows than the router has descriptors.

// SilentNet (16 addresses, on the uplink's subnet) never answers: the internet drops
// every packet sent to it (table inet rl_silent, made by AddSilentDestinations), so a
// connection there waits for its timeout.
const (
	SilentNet   = "198.51.100.96/28"
	SilentTable = "rl_silent"
)

// SilentAddr is the i-th address of SilentNet (i from 0 to 15).
func SilentAddr(i int) string { return fmt.Sprintf("198.51.100.%d", 96+i%16) }

// AddSilentDestinations makes SilentNet silent: inet drops what it would send there.
func (l *Lab) AddSilentDestinations(ctx context.Context) error {
	rules := fmt.Sprintf(`table inet %s {
	chain out {
		type filter hook output priority filter; policy accept;
		ip daddr %s drop
	}
}
`, SilentTable, SilentNet)
	if err := l.run(ctx, rules, "ip", "netns", "exec", l.inet.name, "nft", "-f", "-"); err != nil {
		return fmt.Errorf("silent destinations: %w", err)
	}
	return nil
}

// StartRouterWithDescriptors is StartRouter with the router's descriptor limit (soft and
// hard RLIMIT_NOFILE) set to n, through prlimit(1), which execs the router: the process and
// its PID are the router's.
func (l *Lab) StartRouterWithDescriptors(bin, config string, timeout time.Duration, n int) (*Router, error) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		return nil, fmt.Errorf("start router: prlimit (util-linux) is needed: %w", err)
	}
	cmd, err := l.RouterCommand(context.Background(), prlimit, "--nofile="+strconv.Itoa(n)+":"+strconv.Itoa(n), "--", bin, "run", "--config", config)
	if err != nil {
		return nil, err
	}
	return startRouterCmd(cmd, timeout)
}

// startRouterCmd starts a prepared router command and waits (up to timeout) until it logs
// ReadyLine.
func startRouterCmd(cmd *exec.Cmd, timeout time.Duration) (*Router, error) {
	r := &Router{cmd: cmd, log: &syncbuf.Buffer{}, exited: make(chan struct{})}
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start router: %w", err)
	}
	go func() { r.cmd.Wait(); close(r.exited) }()
	if err := r.WaitLog(ReadyLine, timeout); err != nil {
		r.Stop(syscall.SIGKILL, time.Second)
		return nil, err
	}
	return r, nil
}
