package nflog

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentcage/router/internal/roottest"
)

// TestListenReceivesLoggedPackets: in a namespace of its own, a rule logs UDP to port 9999
// to group 7 with a prefix; a datagram sent there comes out of Read with its prefix,
// addresses and ports.
func TestListenReceivesLoggedPackets(t *testing.T) {
	roottest.Require(t, "ip", "nft")
	ns := fmt.Sprintf("nflog-%d", os.Getpid())
	stdin := ""
	run := func(name string, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run("ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	run("ip", "-n", ns, "link", "set", "lo", "up")
	stdin = "table inet t {\n chain out {\n  type filter hook output priority 0;\n  udp dport 9999 log group 7 prefix \"guest-udp\" drop\n }\n}\n"
	run("ip", "netns", "exec", ns, "nft", "-f", "-")
	stdin = ""

	f, err := os.Open("/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := Listen(7, int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []Packet, 1)
	go func() {
		p, _, err := r.Read()
		if err != nil {
			t.Errorf("Read: %v", err)
		}
		got <- p
	}()
	run("ip", "netns", "exec", ns, "bash", "-c", "echo hi > /dev/udp/127.0.0.1/9999 || true")
	select {
	case ps := <-got:
		if len(ps) == 0 || ps[0].Prefix != "guest-udp" || ps[0].Proto != 17 || ps[0].Dst.String() != "127.0.0.1:9999" || ps[0].At.IsZero() {
			t.Errorf("read %+v, want the datagram to 127.0.0.1:9999 with prefix guest-udp", ps)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing logged within 10 s")
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	// Read after Close fails instead of blocking.
	if _, _, err := r.Read(); err == nil {
		t.Error("Read after Close: no error")
	}
}
