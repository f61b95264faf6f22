package lab

import (
	"context"
	"fmt"
	"strings"
)

// Diagnostics describes the lab's state for a failure message: per namespace the addresses,
// routes and nft ruleset; the leak counters; every server log; go-socks5's errors and danted's
// output. It never fails: what cannot be read is reported inline.
func (l *Lab) Diagnostics(ctx context.Context) string {
	var b strings.Builder
	fmt.Fprintf(&b, "==== lab %s diagnostics\n", l.id)
	for _, ns := range []*Netns{l.inet, l.host, l.guest} {
		if ns == nil {
			continue
		}
		for _, args := range [][]string{
			{"ip", "-br", "addr"},
			{"ip", "route"},
			{"ip", "-6", "route"},
			{"nft", "list", "ruleset"},
		} {
			out, err := ns.Run(ctx, args[0], args[1:]...)
			fmt.Fprintf(&b, "---- %s: %s\n%s", ns.Name(), strings.Join(args, " "), out)
			if err != nil {
				fmt.Fprintf(&b, "(error: %v)\n", err)
			}
		}
	}
	if l.inet != nil {
		lk, err := l.Leaks(ctx)
		fmt.Fprintf(&b, "---- leaks: %v (err %v)\n", lk, err)
	}
	section := func(title string, lines []string) {
		fmt.Fprintf(&b, "---- %s (%d)\n", title, len(lines))
		if len(lines) > 200 {
			fmt.Fprintf(&b, "... %d older entries left out\n", len(lines)-200)
			lines = lines[len(lines)-200:]
		}
		for _, s := range lines {
			b.WriteString(s)
			b.WriteByte('\n')
		}
	}
	section("http echo log", stringsOf(l.HTTPLog()))
	section("dns log", stringsOf(l.DNSLog()))
	section("udp echo log", stringsOf(l.UDPLog()))
	section("model streams", stringsOf(l.ModelLog()))
	section("go-socks5 errors", l.SocksLog())
	fmt.Fprintf(&b, "---- danted output (pid %d)\n%s\n", l.DantePID(), l.DanteOutput())
	return b.String()
}

func stringsOf[T fmt.Stringer](items []T) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.String()
	}
	return out
}
