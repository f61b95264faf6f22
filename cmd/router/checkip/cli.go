package checkip

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// joinPorts lists ports for the help text.
func joinPorts(ps []uint16) string {
	var out []string
	for _, p := range ps {
		out = append(out, strconv.Itoa(int(p)))
	}
	return strings.Join(out, ", ")
}

// Usage is the argument line of `router check-ip` (the router's command table shows it),
// WhyUsage that of its other form, `router check-ip --why`.
const (
	Usage    = "[--echo URL]... [--expect IP] [--expect-not IP] [--model URL] [--dns-whoami NAME] [--stun HOST:PORT]... [--echo6 URL]... [--no-udp] [--no-ipv6] [--timeout D] [--json] [--host-probe [--allow IP:PORT|:PORT]... [--host IP]... [--host-port PORT]...]"
	WhyUsage = "--why HOST[:PORT] [--timeout D]"
)

// usageLine is the head of --help and of a usage error: both forms, Usage wrapped.
var usageLine = "Usage: router check-ip " + wrapArgs(Usage, 70, strings.Repeat(" ", len("Usage: router check-ip "))) +
	"\n       router check-ip " + WhyUsage + "\n"

// wrapArgs breaks an argument line into lines of at most width bytes (a longer group stays
// whole), only at a space outside brackets, and indents every line after the first.
func wrapArgs(s string, width int, indent string) string {
	var groups []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '[':
			depth++
		case ']':
			depth--
		case ' ':
			if depth == 0 {
				groups = append(groups, s[start:i])
				start = i + 1
			}
		}
	}
	groups = append(groups, s[start:])
	var b strings.Builder
	n := 0
	for _, g := range groups {
		switch {
		case n == 0:
		case n+1+len(g) > width:
			b.WriteString("\n" + indent)
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(g)
		n += len(g)
	}
	return b.String()
}

// Help returns the text of `router check-ip --help`.
func Help() string {
	var b strings.Builder
	b.WriteString(usageLine)
	b.WriteString(`
Run it inside the guest (Linux or Windows; no privileges, no config file) to prove the cage
holds. It prints one line per check (✓ pass, ✗ fail, ? undecided, - not run) and a verdict.

  exit   asks IP-echo endpoints, in order until one answers, which address they see: the exit
         address. An answer may be plain text, key=value lines ("ip=...") or JSON ({"ip": ...},
         {"origin": ...} and the like). Default endpoints (--echo replaces them):
`)
	for _, u := range DefaultEcho() {
		fmt.Fprintf(&b, "           %s\n", u)
	}
	b.WriteString(`  model  (with --model) lists the model ids of an OpenAI-compatible server, the id Cline
         needs, and how long the request took; then tries one management call (DELETE
         /api/delete of a model that does not exist) and reports it refused by the router's
         forward, or open (✗): the guest could make the host pull, push or create models.
  dns    (with --dns-whoami) resolves a name whose answer is the address the resolver's queries
         leave from (A, AAAA and TXT), e.g. whoami.akamai.net or o-o.myaddr.l.google.com.
         ✓ when every answer is the exit, --expect, or not a public address (a fake-IP
         resolver answered locally); ✗ when one is --expect-not or another public address:
         DNS leaves by another path.
  udp    sends a STUN binding request (UDP, as QUIC would) to each --stun target, three times
         within --timeout. Any reply means UDP gets out: ✗, with the address the server saw,
         unless that is the exit (UDP goes through the proxy: ✓). Silence is ✓, but it only
         means nothing answered. Default targets (--stun replaces them):
           ` + strings.Join(DefaultSTUN(), "\n           ") + `
  ipv6   looks up a route to ` + DefaultIPv6Route().Addr().String() + ` (a UDP connect, which sends no packet); with a
         route, asks the --echo6 endpoints (default: the echo endpoints) over IPv6 only. ✗ when
         one answers with an address other than the exit; ✓ with no IPv6 route or when
         nothing answers; ? when no endpoint has an IPv6 address.
  host   (with --host-probe) a TCP connect to each host address the guest can see: the
         default gateways (IPv4, IPv6), the resolvers, the first address of each network
         of its interfaces (where host-only networks put the host), each --host, and the
         metadata service 169.254.169.254 (port 80 only), on the ports people run services
         on and the router's own (--host-port replaces them):
           ` + joinPorts(DefaultHostPorts()) + `
         Each is reported open, refused, no answer or unreachable. ✗ when a port is
         **open** that is not a forward or inbound the guest is meant to reach: those are
         the --allow endpoints and the --model server (its address and port; a name's port
         on every address). The guest cannot know the router's config, so say them.

  why    (--why HOST[:PORT], alone) asks the router why a TCP flow of this guest to HOST
         (a name or an IP address) on PORT (default 443) is refused, or how it is let out:
         a DNS query (TXT PORT.HOST.why.router.invalid) that the router's DNS answers
         itself, about the guest that asks only, with each rule up to the deciding one,
         the verdict, and for a refusal how the host's owner can allow it. Exit 1 when the
         flow is refused, 0 when not, 3 when no router answered (not behind one).

Flags:
  --echo URL          an IP-echo endpoint; repeat for more, tried in order
  --expect IP         fail unless the exit address is IP (the proxy's exit)
  --expect-not IP     fail when the exit, DNS, UDP or IPv6 egress is IP (the home address)
  --model URL         the model server: HOST:PORT or a base URL gets /v1/models appended, a
                      URL ending in /v1 gets /models, one ending in /models or /api/tags
                      (Ollama) is used as is; without a scheme, http:// is assumed
  --dns-whoami NAME   a whoami name to resolve (see dns above)
  --stun HOST:PORT    a UDP target; repeat for more (replaces the defaults)
  --echo6 URL         an endpoint for the IPv6 probe; repeat for more
  --no-udp            skip the UDP probe
  --no-ipv6           skip the IPv6 probe
  --host-probe        run the host probe (see host above)
  --allow IP:PORT     a forward or inbound the guest may reach (:PORT: on any address);
                      repeat for more
  --host IP           one more address for the host probe; repeat for more
  --host-port PORT    a port for the host probe; repeat (replaces the defaults)
  --why HOST[:PORT]   ask the router why a flow is refused (see why above); runs alone
  --timeout D         limit for each network attempt, e.g. 3s or 500ms (default ` + DefaultTimeout.String() + `)
  --json              print the report as JSON instead: verdict, exit_code, and exit, model,
                      dns, udp, ipv6 (and host with --host-probe), each with status (pass,
                      fail, unknown, skipped), detail and its figures

Exit status:
  0  no check failed
  1  a check failed: the exit is not --expect or is --expect-not, DNS, UDP or IPv6 gets out
     another way, the model server did not answer or listed no model, or it took a
     management call, a host port other than --allow and --model is open
  2  usage error
  3  no echo endpoint answered, so the exit address is unknown (and nothing else failed)

Environment proxies (HTTP_PROXY, HTTPS_PROXY) are ignored: the checks test what a plain
connection from the guest does.

Examples:
  router check-ip --expect 198.51.100.7 --model 10.0.2.2:47831
  router check-ip --echo http://203.0.113.10/ --expect-not 192.0.2.1 --json
  router check-ip --host-probe --model 192.168.56.1:47831 --allow 192.168.56.1:1080
`)
	return b.String()
}

// Main is `router check-ip`: it parses args, runs the checks with deps, writes the report to
// stdout (text, or JSON with --json) and returns the exit status (ExitOK, ExitFail, ExitUsage,
// ExitNoAnswer). --help prints Help to stdout and returns ExitOK; usage errors go to stderr.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, deps Deps) int {
	opts, asJSON, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		io.WriteString(stdout, Help())
		return ExitOK
	}
	if err != nil {
		return ExitUsage
	}
	if opts.WhyHost != "" {
		res := deps.Resolver
		if res == nil {
			res = net.DefaultResolver
		}
		return why(ctx, res, opts, stdout, stderr)
	}
	rep, err := Run(ctx, opts, deps)
	if err != nil {
		fmt.Fprintf(stderr, "router check-ip: %v\n", err)
		return ExitUsage
	}
	if asJSON {
		err = WriteJSON(stdout, rep)
	} else {
		err = WriteText(stdout, rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "router check-ip: %v\n", err)
	}
	return rep.ExitCode()
}

// parseArgs turns the command line into Options. It reports its own errors on stderr and
// returns flag.ErrHelp for --help (printing nothing).
func parseArgs(args []string, stderr io.Writer) (opts Options, asJSON bool, err error) {
	fs := flag.NewFlagSet("check-ip", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if c, ok := stderr.(interface{ Collect(*flag.FlagSet) }); ok {
		c.Collect(fs) // the man page and the completions are made from this flag set
	}
	shortUsage := func() { fmt.Fprintf(stderr, "%sRun 'router check-ip --help' for details.\n", usageLine) }
	fs.Usage = func() {} // --help is printed by Main to stdout; errors get shortUsage below
	appendTo := func(list *[]string) func(string) error {
		return func(s string) error {
			if s == "" {
				return errors.New("empty value")
			}
			*list = append(*list, s)
			return nil
		}
	}
	fs.Func("echo", "an IP-echo endpoint; repeat for more", appendTo(&opts.Echo))
	fs.Func("echo6", "an endpoint for the IPv6 probe; repeat for more", appendTo(&opts.Echo6))
	fs.Func("stun", "a UDP (STUN) target HOST:PORT; repeat for more", appendTo(&opts.STUN))
	expect := fs.String("expect", "", "fail unless the exit address is `IP`")
	expectNot := fs.String("expect-not", "", "fail when an egress address is `IP`")
	fs.StringVar(&opts.Model, "model", "", "the model server `URL`")
	fs.StringVar(&opts.DNSWhoami, "dns-whoami", "", "a whoami `NAME` to resolve")
	fs.BoolVar(&opts.NoUDP, "no-udp", false, "skip the UDP probe")
	fs.BoolVar(&opts.NoIPv6, "no-ipv6", false, "skip the IPv6 probe")
	fs.DurationVar(&opts.Timeout, "timeout", DefaultTimeout, "limit for each network attempt")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fs.BoolVar(&opts.HostProbe, "host-probe", false, "probe the host's ports from the guest")
	fs.Func("allow", "a forward or inbound `IP:PORT` (or :PORT) the guest may reach; repeat for more", func(s string) error {
		a, err := ParseAllowed(s)
		if err == nil {
			opts.Allow = append(opts.Allow, a)
		}
		return err
	})
	fs.Func("host", "one more `IP` for the host probe; repeat for more", func(s string) error {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("%q is not an IP address", s)
		}
		opts.Hosts = append(opts.Hosts, a.Unmap())
		return nil
	})
	fs.Func("host-port", "a `PORT` for the host probe; repeat (replaces the defaults)", func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q is not a port 1-65535", s)
		}
		opts.HostPorts = append(opts.HostPorts, uint16(n))
		return nil
	})
	fs.Func("why", "ask the router why a TCP flow of this guest to `HOST[:PORT]` is refused", func(s string) error {
		h, p, err := ParseWhy(s)
		if err == nil {
			opts.WhyHost, opts.WhyPort = h, p
		}
		return err
	})
	if err := fs.Parse(args); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			shortUsage() // the flag package has printed the error itself
		}
		return Options{}, false, err
	}
	fail := func(format string, a ...any) (Options, bool, error) {
		err := fmt.Errorf(format, a...)
		fmt.Fprintf(stderr, "router check-ip: %v\n", err)
		shortUsage()
		return Options{}, false, err
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q", fs.Arg(0))
	}
	if opts.Expect, err = parseIPFlag("--expect", *expect); err != nil {
		return fail("%w", err)
	}
	if opts.ExpectNot, err = parseIPFlag("--expect-not", *expectNot); err != nil {
		return fail("%w", err)
	}
	if opts.Expect.IsValid() && opts.Expect == opts.ExpectNot {
		return fail("--expect and --expect-not are the same address %s", opts.Expect)
	}
	if !opts.HostProbe && (len(opts.Allow) > 0 || len(opts.Hosts) > 0 || len(opts.HostPorts) > 0) {
		return fail("--allow, --host and --host-port need --host-probe")
	}
	if opts.WhyHost != "" && (opts.HostProbe || opts.Model != "" || opts.DNSWhoami != "" || len(opts.Echo) > 0 || len(opts.Echo6) > 0 || len(opts.STUN) > 0 || opts.Expect.IsValid() || opts.ExpectNot.IsValid() || asJSON) {
		return fail("--why runs alone: it takes only --timeout")
	}
	if opts.Timeout <= 0 || opts.Timeout > time.Hour {
		return fail("--timeout %s is not between 0 and 1h", opts.Timeout)
	}
	return opts, asJSON, nil
}

// parseIPFlag parses an optional address flag; empty gives the zero Addr.
func parseIPFlag(name, s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%s %q is not an IP address", name, s)
	}
	return a.Unmap(), nil
}
