package daemon

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router"
	"github.com/agentcage/router/router/capture/capturetest"
	nftplatform "github.com/agentcage/router/router/nftcap/platform"
	"github.com/agentcage/router/rules/policy"
)

// TestWhatConfAcceptsRuns: every config conf accepts is accepted by what the daemon hands it
// to (the nftables spec, the DNS server, the router's policy), so `router lint` never passes
// a file that `router run` refuses. The shipped configs and a few thousand generated ones
// near the edges (ports, pools, TTLs, forwards) are tried.
func TestWhatConfAcceptsRuns(t *testing.T) {
	var texts []string
	files, _ := filepath.Glob("../../../testdata/conf/*.toml")
	if len(files) == 0 {
		t.Fatal("no shipped configs found under testdata/conf")
	}
	for _, f := range files {
		opts := conf.Options{LookupEnv: func(string) (string, bool) { return "pw", true }}
		if strings.HasPrefix(filepath.Base(f), "windows-") {
			opts.OS = "windows" // a Windows-only setup (Hyper-V): judged for Windows
		}
		cfg, err := conf.Load(f, opts)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		runnable(t, f, cfg)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	for range 3000 {
		var b strings.Builder
		fmt.Fprintf(&b, "[proxy.exit]\naddress = %q\n", pick("198.51.100.1:1080", "proxy.example.net:1080", "[2001:db8::1]:1080"))
		fmt.Fprintf(&b, "[capture]\nvm_networks = [%s]\nlocal = %v\nlistener_port = %s\ndns_port = %s\n",
			pick(`"10.0.2.0/24"`, `"10.0.0.0/8"`, `"198.18.0.0/24"`, `"fd00::/64"`, ``), rng.IntN(2) == 0,
			pick("47100", "53", "1", "65535", "47831"), pick("47153", "53", "47100", "65535"))
		fmt.Fprintf(&b, "[dns]\nmode = %q\npool = %q\nttl = %q\nresolver = %q\n",
			pick("fake-ip", "proxy"), pick("198.18.0.0/15", "10.0.0.0/8", "127.0.0.0/16", "100.64.0.0/24", "240.0.0.0/8", "0.0.0.0/1", "198.18.0.0/25"),
			pick("1s", "10s", "1h", "500ms", "61m", "2s"), pick("1.1.1.1:53", "dns.example:853", "1.1.1.1:0", "[2001:db8::53]:53", ":53"))
		for i := range rng.IntN(3) {
			fmt.Fprintf(&b, "[[forward]]\nlisten = %q\nconnect = \"127.0.0.1:47831\"\nallow = [\"10.0.2.0/24\"]\n",
				pick("10.0.2.2:47831", "10.0.2.2:47100", "10.0.2.2:47153", "10.0.2.2:53", "198.18.0.1:80", "10.0.2.2:"+fmt.Sprint(8000+i)))
		}
		b.WriteString("[[rule]]\nname = \"vm\"\nsources = [\"10.0.2.0/24\"]\naction = \"proxy\"\n")
		text := b.String()
		cfg, err := conf.Parse("gen.toml", []byte(text), conf.Options{LookupEnv: func(string) (string, bool) { return "pw", true }})
		if err != nil {
			continue
		}
		texts = append(texts, text)
		runnable(t, text, cfg)
	}
	if len(texts) < 100 {
		t.Errorf("only %d generated configs were valid; the generator misses the point", len(texts))
	}
}

// runnable fails the test when a part of the daemon refuses cfg.
func runnable(t *testing.T, what string, cfg *conf.Config) {
	t.Helper()
	if err := nftplatform.Spec(cfg).Validate(); err != nil {
		t.Errorf("conf accepted, nftables refuses: %v\n%s", err, what)
	}
	d := &daemon{opts: Options{Platform: resolverPlatform{&capturetest.Platform{}}}, log: slog.New(slog.DiscardHandler)}
	if err := d.startDNS(cfg); err != nil {
		t.Errorf("conf accepted, the DNS server refuses: %v\n%s", err, what)
	} else {
		d.dns.Close()
	}
	r, err := router.New(router.Settings{IdleTimeout: 1, ConnectTimeout: 1}, router.Options{Original: (&capturetest.Platform{}).Original})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Prepare(routerPolicy(cfg, policy.New(cfg, policy.Env{}))); err != nil {
		t.Errorf("conf accepted, the router refuses: %v\n%s", err, what)
	}
}

// resolverPlatform is a fake platform whose host has a resolver (for direct_names).
type resolverPlatform struct{ *capturetest.Platform }

func (resolverPlatform) Resolver() (string, error) { return "192.0.2.53:53", nil }
