package conf

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentcage/router/rules"
	"github.com/agentcage/router/rules/modelapi"
)

// The keys of each table, in the order docs/config.md documents them.
var (
	topKeys     = []string{"proxy", "capture", "forward", "inbound", "dns", "relay", "log", "control", "metrics", "policy", "console", "budget", "credential", "rule", "profile"}
	proxyKeys   = []string{"type", "address", "via", "username", "password_env", "password_file", "pipeline", "ca_file", "health_check", "health_target"}
	captureKeys = []string{"vm_networks", "vm_interfaces", "hypervisors", "cage_subnets", "local", "local_udp_allow", "rival_permits", "uncaged_adapters", "listener_port", "dns_port", "udp_port", "mark", "table"}
	forwardKeys = []string{"name", "listen", "connect", "allow", "api", "allow_paths", "max_body", "idle_timeout", "unsafe_any_address"}
	inboundKeys = []string{"name", "type", "listen", "allow", "unsafe_any_address"}
	dnsKeys     = []string{"mode", "resolver", "proxy", "transport", "pool", "ttl", "direct_names", "capture", "allow_doh", "doh_hosts"}
	relayKeys   = []string{"idle_timeout", "connect_timeout", "sockmap"}
	logKeys     = []string{"level", "format", "flows"}
	metricsKeys = []string{"listen", "unsafe_listen"}
	ruleKeys    = []string{"name", "enabled", "apps", "services", "sources", "caged", "hosts", "hosts_file", "hosts_preset", "ports", "network", "action", "proxy"}
)

// config decodes the whole file: every table, then the checks across keys (check.go).
func (d *decoder) config(raw map[string]any) *Config {
	c := &Config{
		File: d.file,
		Capture: Capture{
			ListenerPort: DefaultListenerPort,
			DNSPort:      DefaultDNSPort,
			UDPPort:      DefaultUDPPort,
			Mark:         DefaultMark,
			Table:        DefaultTable,
		},
		DNS:    DNS{Mode: DefaultDNSMode, Resolver: DefaultResolver, Pool: DefaultPool(), TTL: DefaultFakeTTL, Transport: DefaultDNSTransport},
		Relay:  Relay{IdleTimeout: DefaultIdleTimeout, ConnectTimeout: DefaultConnectTimeout, Sockmap: DefaultSockmap},
		Log:    Log{Level: DefaultLogLevel, Format: DefaultLogFormat},
		Policy: Policy{Unknown: rules.Block, AskTimeout: DefaultAskTimeout, StateDir: d.opts.StateDir},
	}
	d.checkKeys(at{}, raw, topKeys)
	if v, ok := raw["proxy"]; ok {
		d.decodeProxies(c, v)
	}
	d.proxies = make(map[string]int, len(c.Proxies))
	for i, p := range c.Proxies {
		d.proxies[p.Name] = i
	}
	if v, ok := raw["capture"]; ok {
		d.capture(c, v)
	}
	if v, ok := raw["forward"]; ok {
		d.forwards(c, v)
	}
	if v, ok := raw["inbound"]; ok {
		d.inbounds(c, v)
	}
	if v, ok := raw["relay"]; ok {
		d.relay(c, v)
	}
	if v, ok := raw["budget"]; ok {
		d.budget(c, v)
	}
	if v, ok := raw["credential"]; ok {
		d.credentials(c, v)
	}
	if v, ok := raw["log"]; ok {
		d.log(c, v)
	}
	if v, ok := raw["control"]; ok {
		a := at{path: "control"}
		if m, ok := d.table(a, v); ok {
			d.checkKeys(a, m, []string{"socket"})
			if v, ok := m["socket"]; ok {
				if s, ok := d.str(a.key("socket"), v); ok && s == "" {
					d.fail(a.key("socket"), "is empty")
				} else {
					c.Control.Socket = s
				}
			}
		}
	}
	if v, ok := raw["metrics"]; ok {
		d.metrics(c, v)
	}
	if v, ok := raw["dns"]; ok {
		d.dns(c, v)
	}
	if v, ok := raw["policy"]; ok {
		d.policy(c, v)
	}
	if v, ok := raw["console"]; ok {
		d.console(c, v)
	}
	if c.DNS.Proxy == "" && len(c.Proxies) == 1 {
		c.DNS.Proxy = c.Proxies[0].Name
	}
	if v, ok := raw["rule"]; ok {
		d.rules(c, v)
		d.appAliases(c)
		c.HostsFiles = d.hostPaths
	}
	if v, ok := raw["profile"]; ok {
		d.profiles(c, v)
	}
	d.approved(c)
	d.scope(c)
	d.check(c)
	d.checkCredentials(c)
	return c
}

func (d *decoder) decodeProxies(c *Config, v any) {
	top := at{path: "proxy"}
	m, ok := d.table(top, v)
	if !ok {
		return
	}
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	slices.SortFunc(names, func(x, y string) int { return d.loc.line("proxy."+x) - d.loc.line("proxy."+y) })
	for _, name := range names {
		a := at{path: "proxy." + name}
		pm, ok := m[name].(map[string]any)
		if !ok {
			d.fail(a, "each upstream is a table [proxy.NAME] with an address; %q is %s", name, typeName(m[name]))
			continue
		}
		if !validName(name) {
			d.fail(a, "proxy name %q: use letters, digits, '-' and '_'", name)
		}
		p := Proxy{Name: name, Type: DefaultProxyType, Line: d.loc.line(a.path), Pipeline: true}
		if v, ok := pm["type"]; ok {
			if s, ok := d.str(a.key("type"), v); ok {
				switch s {
				case ProxySOCKS5, ProxySOCKS4, ProxyHTTP, ProxyHTTPS:
					p.Type = s
					// HTTP proxies may drop the client's bytes sent before their answer:
					// pipelining is for the ones known to relay them.
					p.Pipeline = s == ProxySOCKS5
				default:
					d.fail(a.key("type"), "%q is not socks5, socks4, http or https", s)
				}
			}
		}
		if v, ok := pm["pipeline"]; ok {
			p.Pipeline, _ = d.boolean(a.key("pipeline"), v)
		}
		if v, ok := pm["via"]; ok {
			if s, ok := d.str(a.key("via"), v); ok {
				p.Via = s // checked once every proxy is known (checkChains)
			}
		}
		d.proxyExtras(&p, a, pm)
		d.checkKeys(a, pm, append(slices.Clone(proxyKeys), "password"))
		if _, ok := pm["password"]; ok {
			d.fail(a.key("password"), "inline passwords are refused: put the password in an environment variable (password_env) or a file (password_file)")
		}
		if v, ok := pm["address"]; !ok {
			d.fail(a, "missing key \"address\" (host:port of the proxy)")
		} else if s, ok := d.str(a.key("address"), v); ok && strings.Contains(s, "@") {
			// user:password@host:port (or a URL with credentials): the value is never
			// repeated, since it would show the password wherever errors go.
			d.fail(a.key("address"), "credentials inside the address are refused (the address is shown in logs and explain): write host:port, the user in username and the password in password_env or password_file")
		} else if ok {
			host, port, err := net.SplitHostPort(s)
			n, perr := strconv.ParseUint(port, 10, 16)
			switch {
			case err != nil || host == "":
				d.fail(a.key("address"), "%q is not host:port", s)
			case perr != nil || n == 0:
				d.fail(a.key("address"), "%q: %q is not a port (1-65535)", s, port)
			default:
				if _, aerr := netip.ParseAddr(host); aerr != nil {
					if h, herr := rules.ParseHost(host); herr != nil || h.Kind != rules.HostName {
						d.fail(a.key("address"), "%q: %q is not an IP address or host name", s, host)
					}
				}
				p.Address, p.Host, p.Port = s, host, uint16(n)
			}
		}
		if v, ok := pm["username"]; ok {
			p.Username, _ = d.str(a.key("username"), v)
		}
		var single bool
		p.PasswordEnv, p.PasswordFile, single = d.secretPlace(a, pm, "password")
		switch {
		case !single:
		case p.Type == ProxySOCKS4 && (p.PasswordEnv != "" || p.PasswordFile != ""):
			d.fail(a, "SOCKS4 has no password, only a user ID: keep username, drop password_env and password_file")
		case p.Type == ProxySOCKS4 && (len(p.Username) > 255 || strings.ContainsRune(p.Username, 0)):
			d.fail(a.key("username"), "a SOCKS4 user ID is at most 255 bytes, without NUL")
		case p.Type == ProxySOCKS4:
			// The user ID travels in clear and proves nothing: no password to read.
		case p.Username != "" && p.PasswordEnv == "" && p.PasswordFile == "" && pm["password"] == nil:
			d.fail(a.key("username"), "a username needs a password: add password_env or password_file")
		case p.Username == "" && (p.PasswordEnv != "" || p.PasswordFile != ""):
			d.fail(a, "a password needs a username: add username")
		case CheckCredentialLen("username", p.Username) != nil:
			d.fail(a.key("username"), "%v", CheckCredentialLen("username", p.Username))
		case !d.opts.SkipSecrets && p.PasswordEnv != "":
			p.Password = d.checkPassword(a.key("password_env"), d.readSecret(a.key("password_env"), p.PasswordEnv, ""))
		case !d.opts.SkipSecrets && p.PasswordFile != "":
			p.Password = d.checkPassword(a.key("password_file"), d.readSecret(a.key("password_file"), "", p.PasswordFile))
		}
		if (p.Type == ProxyHTTP || p.Type == ProxyHTTPS) && p.Username != "" {
			if err := CheckBasicAuth(p.Username, p.Password.Reveal()); err != nil {
				d.fail(a.key("username"), "%v", err)
			}
		}
		c.Proxies = append(c.Proxies, p)
	}
}

// proxyExtras decodes ca_file and the health probe of one proxy.
func (d *decoder) proxyExtras(p *Proxy, a at, pm map[string]any) {
	if v, ok := pm["ca_file"]; ok {
		if s, ok := d.str(a.key("ca_file"), v); ok {
			p.CAFile = s
			switch {
			case p.Type != ProxyHTTPS:
				d.fail(a.key("ca_file"), "ca_file is for type = \"https\" (the CA the proxy's TLS certificate chains to)")
			default:
				pem, err := d.opts.ReadFile(s)
				pool := x509.NewCertPool()
				switch {
				case err != nil:
					d.fail(a.key("ca_file"), "read CA file: %v", err)
				case !pool.AppendCertsFromPEM(pem):
					d.fail(a.key("ca_file"), "%s holds no PEM certificate", s)
				default:
					p.RootCAs = pool
				}
			}
		}
	}
	if v, ok := pm["health_check"]; ok {
		if t, ok := d.duration(a.key("health_check"), v); ok {
			if t < time.Second {
				d.fail(a.key("health_check"), "%v: probe at most once a second", t)
			}
			p.HealthCheck = t
		}
	}
	if v, ok := pm["health_target"]; ok {
		if s, ok := d.str(a.key("health_target"), v); ok {
			host, port, err := net.SplitHostPort(s)
			if n, perr := strconv.ParseUint(port, 10, 16); err != nil || host == "" || perr != nil || n == 0 {
				d.fail(a.key("health_target"), "%q is not host:port (a destination that answers, reached through the proxy)", s)
			}
			p.HealthTarget = s
		}
	}
	switch {
	case p.HealthCheck > 0 && p.HealthTarget == "":
		d.fail(a.key("health_check"), "a probe needs health_target = \"host:port\" (nothing is contacted by default)")
	case p.HealthCheck == 0 && p.HealthTarget != "":
		d.fail(a.key("health_target"), "health_target without health_check (the probe's period)")
	}
}

// secretPlace decodes KEY_env and KEY_file of m, the variable or the file a secret is
// read from. Both given is reported, and single is false.
func (d *decoder) secretPlace(a at, m map[string]any, key string) (env, file string, single bool) {
	if v, ok := m[key+"_env"]; ok {
		env, _ = d.str(a.key(key+"_env"), v)
	}
	if v, ok := m[key+"_file"]; ok {
		file, _ = d.str(a.key(key+"_file"), v)
	}
	if env != "" && file != "" {
		d.fail(a.key(key+"_file"), "give %s_env or %s_file, not both", key, key)
		return env, file, false
	}
	return env, file, true
}

// readSecret reads a secret the config names but never holds: the environment variable env,
// else the file file (trailing newlines trimmed). A variable that is not set, a file that
// cannot be read and an empty value fail at a; the value is never part of a message.
func (d *decoder) readSecret(a at, env, file string) string {
	if env != "" {
		v, ok := d.opts.LookupEnv(env)
		if !ok || v == "" {
			d.fail(a, "environment variable %s is not set", env)
		}
		return v
	}
	b, err := d.opts.ReadFile(file)
	if err != nil {
		d.fail(a, "read secret: %v", err)
		return ""
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		d.fail(a, "%s is empty", file)
	}
	return v
}

func (d *decoder) checkPassword(a at, pw string) Secret {
	if err := CheckCredentialLen("password", pw); err != nil {
		d.fail(a, "%v", err)
	}
	return NewSecret(pw)
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func (d *decoder) capture(c *Config, v any) {
	a, m, ok := d.section("capture", v, captureKeys)
	if !ok {
		return
	}
	if v, ok := m["vm_networks"]; ok {
		c.Capture.VMNetworks = d.prefixes(a.key("vm_networks"), v)
	}
	if v, ok := m["vm_interfaces"]; ok {
		for i, s := range d.strings(a.key("vm_interfaces"), v) {
			if err := checkInterface(s); err != nil {
				d.fail(a.key("vm_interfaces").elem(i), "%v", err)
				continue
			}
			c.Capture.VMInterfaces = append(c.Capture.VMInterfaces, s)
		}
	}
	if v, ok := m["cage_subnets"]; ok {
		c.Capture.CageSubnets = d.prefixes(a.key("cage_subnets"), v)
	}
	if v, ok := m["hypervisors"]; ok {
		for i, s := range d.strings(a.key("hypervisors"), v) {
			if _, why := LookupPreset(s, d.opts.goos()); why != "" {
				d.fail(a.key("hypervisors").elem(i), "%q: %s", s, why)
				continue
			}
			c.Capture.Hypervisors = append(c.Capture.Hypervisors, s)
		}
	}
	if v, ok := m["local"]; ok {
		c.Capture.Local, _ = d.boolean(a.key("local"), v)
	}
	if v, ok := m["local_udp_allow"]; ok {
		if xs, ok := d.array(a.key("local_udp_allow"), v); ok {
			for i, x := range xs {
				if p, ok := d.port(a.key("local_udp_allow").elem(i), x); ok {
					c.Capture.LocalUDPAllow = append(c.Capture.LocalUDPAllow, p)
				}
			}
		}
	}
	if v, ok := m["rival_permits"]; ok {
		if s, ok := d.oneOf(a.key("rival_permits"), v, "warn", "refuse"); ok {
			c.Capture.RivalPermits = s
		}
	}
	if v, ok := m["uncaged_adapters"]; ok {
		if s, ok := d.oneOf(a.key("uncaged_adapters"), v, "refuse", "accept"); ok {
			c.Capture.UncagedAdapters = s
		}
	}
	if v, ok := m["listener_port"]; ok {
		c.Capture.ListenerPort, _ = d.port(a.key("listener_port"), v)
	}
	if v, ok := m["dns_port"]; ok {
		c.Capture.DNSPort, _ = d.port(a.key("dns_port"), v)
	}
	if c.Capture.ListenerPort == c.Capture.DNSPort {
		d.fail(a.key("dns_port"), "listener_port and dns_port must differ")
	}
	if v, ok := m["udp_port"]; ok {
		c.Capture.UDPPort, _ = d.port(a.key("udp_port"), v)
	}
	if c.Capture.UDPPort == c.Capture.DNSPort {
		d.fail(a.key("udp_port"), "udp_port and dns_port must differ (both take UDP)")
	}
	if v, ok := m["mark"]; ok {
		n, ok := v.(int64)
		if !ok || n <= 0 || n > 0xffffffff {
			d.fail(a.key("mark"), "must be a socket mark between 1 and 0xffffffff")
		} else {
			c.Capture.Mark = uint32(n)
			if n == UDPCaptureMark {
				d.fail(a.key("mark"), "%#x is the mark of captured UDP; pick another", n)
			}
			if n == CagedSocketMark {
				d.fail(a.key("mark"), "%#x is the mark of caged processes' sockets; pick another", n)
			}
		}
	}
	if v, ok := m["table"]; ok {
		if s, ok := d.str(a.key("table"), v); ok {
			if !validName(s) {
				d.fail(a.key("table"), "table name %q: use letters, digits, '-' and '_'", s)
			}
			c.Capture.Table = s
		}
	}
	d.expandPresets(c)
}

// checkInterface checks an interface name as Linux takes them (at most 15 bytes, no '/',
// no space), with one trailing '*' allowed as a wildcard.
func checkInterface(s string) error {
	base := strings.TrimSuffix(s, "*")
	switch {
	case base == "":
		return fmt.Errorf("%q is not an interface name", s)
	case len(base) > 15:
		return fmt.Errorf("interface name %q is longer than 15 bytes", s)
	case strings.ContainsAny(base, "/ *:\t\n"):
		return fmt.Errorf("interface name %q: only a trailing '*' may be a wildcard, and no '/', ':' or space", s)
	}
	return nil
}

func (d *decoder) forwards(c *Config, v any) {
	d.listeners(v, "forward", forwardKeys, listenerText{
		listen:     "(the VM-facing address:port)",
		allowEmpty: "is empty: list the sources allowed to connect (the VM subnets)",
		allowMiss:  "(the sources allowed to connect, e.g. the VM subnet)",
	}, func(a at, m map[string]any, l listener) {
		f := Forward{Name: l.name, Line: l.line, Listen: l.listen, Allow: l.allow, UnsafeAnyAddress: l.unsafe}
		if v, ok := m["connect"]; ok {
			f.Connect, _ = d.addrPort(a.key("connect"), v, "(the model server, e.g. 127.0.0.1:47831)")
		} else {
			d.fail(a, "missing key \"connect\" (the model server's address:port)")
		}
		d.forwardAPI(&f, a, m)
		if v, ok := m["idle_timeout"]; ok {
			f.IdleTimeout, _ = d.duration(a.key("idle_timeout"), v)
		} else if !f.Raw() {
			f.IdleTimeout = DefaultForwardIdleTimeout
		}
		c.Forwards = append(c.Forwards, f)
	})
}

// listener is what the listeners a guest connects to ([[forward]], [[inbound]]) have in
// common, as decoded by listeners.
type listener struct {
	name   string // the name given, else DefaultName's
	line   int
	listen netip.AddrPort
	allow  []netip.Prefix
	unsafe bool // unsafe_any_address
}

// listenerText is how a listener kind words its missing or empty keys.
type listenerText struct {
	listen     string // after `missing key "listen"`
	allowEmpty string // the message for an empty allow
	allowMiss  string // after `missing key "allow"`
}

// listeners decodes an array of tables of one listener kind (kind is its key, keys its
// allowed keys): the keys every listener has (name, listen, allow, unsafe_any_address, and
// the refusal of an any-address listen without unsafe_any_address) once for both kinds, then
// each calls rest with the table's position, the table and what was decoded, to decode its
// own keys and keep the listener.
func (d *decoder) listeners(v any, kind string, keys []string, text listenerText, rest func(a at, m map[string]any, l listener)) {
	list, ok := v.([]map[string]any)
	if !ok {
		d.fail(at{path: kind}, "must be an array of tables [[%s]], not %s", kind, typeName(v))
		return
	}
	for i, m := range list {
		a := at{path: kind + "[" + strconv.Itoa(i+1) + "]", where: kind + " #" + strconv.Itoa(i+1)}
		l := listener{line: d.loc.line(a.path)}
		if v, ok := m["name"]; ok {
			if l.name, ok = d.str(a.key("name"), v); ok {
				a.where += " " + strconv.Quote(l.name)
			}
		}
		d.checkKeys(a, m, keys)
		if v, ok := m["listen"]; ok {
			l.listen, _ = d.addrPort(a.key("listen"), v, "(a VM-facing address of this host)")
		} else {
			d.fail(a, "missing key \"listen\" %s", text.listen)
		}
		if v, ok := m["allow"]; ok {
			l.allow = d.prefixes(a.key("allow"), v)
			if xs, ok := v.([]any); ok && len(xs) == 0 {
				d.fail(a.key("allow"), "%s", text.allowEmpty)
			}
		} else {
			d.fail(a, "missing key \"allow\" %s", text.allowMiss)
		}
		if v, ok := m["unsafe_any_address"]; ok {
			l.unsafe, _ = d.boolean(a.key("unsafe_any_address"), v)
		}
		if l.listen.IsValid() && l.listen.Addr().IsUnspecified() && !l.unsafe {
			d.fail(a.key("listen"), "%s listens on every address, reachable from any network this host is on; give the VM-facing address (or set unsafe_any_address = true)", l.listen)
		}
		l.name = DefaultName(l.name, l.listen)
		rest(a, m, l)
	}
}

// forwardAPI decodes a forward's api, allow_paths and max_body.
func (d *decoder) forwardAPI(f *Forward, a at, m map[string]any) {
	f.API, f.MaxBody = DefaultForwardAPI(), DefaultMaxBody
	if v, ok := m["api"]; ok {
		var names []string
		if s, ok := v.(string); ok {
			names = []string{s}
		} else {
			names = d.strings(a.key("api"), v)
		}
		if len(names) == 0 {
			d.fail(a.key("api"), "is empty: name the model server's API (%s)", strings.Join(modelapi.KindNames(), ", "))
		}
		f.API = nil
		for _, n := range names {
			k, ok := modelapi.ParseKind(n)
			if !ok {
				msg := fmt.Sprintf("%q is not a model API; want one of %s", n, strings.Join(modelapi.KindNames(), ", "))
				if s := suggest(n, modelapi.KindNames()); s != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", s)
				}
				d.fail(a.key("api"), "%s", msg)
				continue
			}
			if !slices.Contains(f.API, k) {
				f.API = append(f.API, k)
			}
		}
		if modelapi.Raw(f.API) && len(f.API) > 1 {
			d.fail(a.key("api"), "\"tcp\" is a raw pipe that passes everything: it cannot be combined with an HTTP API")
		}
	}
	if v, ok := m["allow_paths"]; ok {
		for i, s := range d.strings(a.key("allow_paths"), v) {
			rs, err := modelapi.ParseRoute(s)
			if err != nil {
				d.fail(a.key("allow_paths").elem(i), "%v", err)
				continue
			}
			f.AllowPaths = append(f.AllowPaths, rs...)
		}
		if f.Raw() {
			d.fail(a.key("allow_paths"), "has no effect with api = \"tcp\", which passes everything")
		}
	}
	if v, ok := m["max_body"]; ok {
		if n, ok := d.size(a.key("max_body"), v); ok {
			f.MaxBody = n
		}
		if f.Raw() {
			d.fail(a.key("max_body"), "has no effect with api = \"tcp\", which passes everything")
		}
	}
}

func (d *decoder) inbounds(c *Config, v any) {
	d.listeners(v, "inbound", inboundKeys, listenerText{
		listen:     "(the VM-facing address:port the guest is pointed at)",
		allowEmpty: "is empty: list the sources allowed to use the proxy (the VM subnets)",
		allowMiss:  "(the sources allowed to use the proxy, e.g. the VM subnet)",
	}, func(a at, m map[string]any, l listener) {
		in := Inbound{Type: ProxySOCKS5, Name: l.name, Line: l.line, Listen: l.listen, Allow: l.allow, UnsafeAnyAddress: l.unsafe}
		if v, ok := m["type"]; ok {
			if s, ok := d.str(a.key("type"), v); ok {
				if s != ProxySOCKS5 && s != ProxyHTTP {
					d.fail(a.key("type"), "%q is not socks5 or http", s)
				}
				in.Type = s
			}
		}
		c.Inbounds = append(c.Inbounds, in)
	})
}

func (d *decoder) relay(c *Config, v any) {
	a, m, ok := d.section("relay", v, relayKeys)
	if !ok {
		return
	}
	if v, ok := m["idle_timeout"]; ok {
		if t, ok := d.duration(a.key("idle_timeout"), v); ok {
			c.Relay.IdleTimeout = t
		}
	}
	if v, ok := m["connect_timeout"]; ok {
		if t, ok := d.duration(a.key("connect_timeout"), v); ok {
			c.Relay.ConnectTimeout = t
		}
	}
	if v, ok := m["sockmap"]; ok {
		if b, ok := d.boolean(a.key("sockmap"), v); ok {
			c.Relay.Sockmap = b
		}
	}
}

func (d *decoder) log(c *Config, v any) {
	a, m, ok := d.section("log", v, logKeys)
	if !ok {
		return
	}
	if v, ok := m["level"]; ok {
		if s, ok := d.str(a.key("level"), v); ok {
			if !slices.Contains([]string{"debug", "info", "warn", "error"}, s) {
				d.fail(a.key("level"), "%q is not one of debug, info, warn, error", s)
			}
			c.Log.Level = s
		}
	}
	if v, ok := m["format"]; ok {
		if s, ok := d.str(a.key("format"), v); ok {
			if s != "text" && s != "json" {
				d.fail(a.key("format"), "%q is not text or json", s)
			}
			c.Log.Format = s
		}
	}
	if v, ok := m["flows"]; ok {
		if s, ok := d.str(a.key("flows"), v); ok && s != "" {
			if !filepath.IsAbs(s) {
				s = filepath.Join(filepath.Dir(d.file), s)
			}
			c.Log.Flows = s
		}
	}
}

// metrics decodes [metrics]: where the daemon serves Prometheus metrics. An empty or absent
// listen serves none; an address other than loopback needs unsafe_listen = true.
func (d *decoder) metrics(c *Config, v any) {
	c.Metrics.Listen, c.Metrics.UnsafeListen = d.loopbackListener("metrics", v, metricsKeys,
		"(where to serve /metrics, e.g. 127.0.0.1:9477)",
		"whoever reaches it reads the flows, rules and upstreams the router counts; listen on 127.0.0.1 or ::1 (or set unsafe_listen = true)")
}

// loopbackListener decodes a table of an HTTP endpoint of this host ([metrics], [console]):
// its listen address (absent or empty: none, the zero AddrPort) and unsafe_listen, without
// which an address other than loopback is refused, saying why. example follows the
// address's error; keys are the table's keys.
func (d *decoder) loopbackListener(path string, v any, keys []string, example, why string) (netip.AddrPort, bool) {
	a, m, ok := d.section(path, v, keys)
	if !ok {
		return netip.AddrPort{}, false
	}
	unsafe := false
	if v, ok := m["unsafe_listen"]; ok {
		unsafe, _ = d.boolean(a.key("unsafe_listen"), v)
	}
	v, ok = m["listen"]
	if !ok {
		return netip.AddrPort{}, unsafe
	}
	if s, isStr := v.(string); isStr && s == "" {
		return netip.AddrPort{}, unsafe // off, as when the key is absent
	}
	ap, ok := d.addrPort(a.key("listen"), v, example)
	if !ok {
		return netip.AddrPort{}, unsafe
	}
	if !ap.Addr().IsLoopback() && !unsafe {
		d.fail(a.key("listen"), "%v is not a loopback address: %s", ap, why)
	}
	return ap, unsafe
}

func (d *decoder) dns(c *Config, v any) {
	a, m, ok := d.section("dns", v, dnsKeys)
	if !ok {
		return
	}
	if v, ok := m["mode"]; ok {
		if s, ok := d.str(a.key("mode"), v); ok {
			if s != DNSFakeIP && s != DNSProxy {
				d.fail(a.key("mode"), "%q is not \"fake-ip\" or \"proxy\"", s)
			}
			c.DNS.Mode = s
		}
	}
	if v, ok := m["resolver"]; ok {
		if s, ok := d.str(a.key("resolver"), v); ok {
			c.DNS.Resolver = s // checked in check.go
		}
	}
	if v, ok := m["proxy"]; ok {
		if s, ok := d.str(a.key("proxy"), v); ok {
			if _, found := d.proxies[s]; !found {
				d.fail(a.key("proxy"), "no [proxy.%s] is defined%s", s, d.known(c))
			}
			c.DNS.Proxy = s
		}
	} else if len(c.Proxies) > 1 {
		d.fail(a, "several proxies are defined: name the one that carries DNS with proxy = \"NAME\"")
	}
	if v, ok := m["pool"]; ok {
		if _, isList := v.([]any); isList {
			d.fail(a.key("pool"), "give one CIDR as a string, e.g. \"198.18.0.0/15\"")
		} else if p, ok := d.prefix(a.key("pool"), v); ok {
			if err := CheckPool(p); err != nil {
				d.fail(a.key("pool"), "%v", err)
			} else {
				c.DNS.Pool = p
			}
		}
	}
	if v, ok := m["ttl"]; ok {
		if t, ok := d.duration(a.key("ttl"), v); ok {
			c.DNS.TTL = t
		}
	}
	if v, ok := m["transport"]; ok {
		if s, ok := d.str(a.key("transport"), v); ok {
			if s != DNSOverTCP && s != DNSOverUDP {
				d.fail(a.key("transport"), "%q is not \"tcp\" or \"udp\"", s)
			}
			c.DNS.Transport = s
		}
	}
	if v, ok := m["capture"]; ok {
		if s, ok := d.str(a.key("capture"), v); ok {
			if s != DNSCaptureCaged && s != DNSCaptureAll {
				d.fail(a.key("capture"), "%q is not \"caged\" or \"all\"", s)
			}
			c.DNS.Capture = s
		}
	}
	if v, ok := m["allow_doh"]; ok {
		c.DNS.AllowDoH, _ = d.boolean(a.key("allow_doh"), v)
	}
	c.DNS.DoHHosts = parseEach(d, a, m, "doh_hosts", rules.ParseHost)
	if v, ok := m["direct_names"]; ok {
		for i, s := range d.strings(a.key("direct_names"), v) {
			h, err := rules.ParseHost(s)
			if err == nil && h.Kind == rules.HostRange {
				err = fmt.Errorf("%q is an address; direct_names takes names and *.suffix", s)
			}
			if err != nil {
				d.fail(a.key("direct_names").elem(i), "%v", err)
				continue
			}
			c.DNS.DirectNames = append(c.DNS.DirectNames, h)
		}
	}
}

// known lists the proxies defined, for messages: the first few of them when there are
// many, so that a message stays short however many rules repeat it.
func (d *decoder) known(c *Config) string {
	const shown = 8
	if len(c.Proxies) == 0 {
		return " (no proxy is defined at all)"
	}
	names := make([]string, 0, min(len(c.Proxies), shown))
	for _, p := range c.Proxies[:min(len(c.Proxies), shown)] {
		names = append(names, p.Name)
	}
	more := ""
	if len(c.Proxies) > shown {
		more = fmt.Sprintf(", … (%d in all)", len(c.Proxies))
	}
	return " (defined: " + strings.Join(names, ", ") + more + ")"
}

func (d *decoder) rules(c *Config, v any) {
	c.Rules, c.RuleLines = d.ruleList(c, v, "rule", "")
}

// ruleList decodes an array of [[rule]] tables at path (a profile's: "profile.NAME.rule",
// named where, "profile NAME ", in messages) and the lines of their headers.
func (d *decoder) ruleList(c *Config, v any, path, where string) (rs []rules.Rule, lines []int) {
	list, ok := v.([]map[string]any)
	if !ok {
		d.fail(at{path: path}, "must be an array of tables [[%s]], not %s", path, typeName(v))
		return nil, nil
	}
	seen := map[string]int{}
	for i, m := range list {
		a := at{path: path + "[" + strconv.Itoa(i+1) + "]", where: where + "rule #" + strconv.Itoa(i+1)}
		r := rules.Rule{Name: "rule-" + strconv.Itoa(i+1)}
		if v, ok := m["name"]; ok {
			if s, ok := d.str(a.key("name"), v); ok {
				if s == "" {
					d.fail(a.key("name"), "is empty")
				} else {
					r.Name = s
					if j, dup := seen[s]; dup {
						d.fail(a.key("name"), "%q is also the name of rule #%d; rule names must differ", s, j)
					}
					seen[s] = i + 1
				}
			}
		}
		a.where += " " + strconv.Quote(r.Name)
		d.checkKeys(a, m, ruleKeys)
		if v, ok := m["enabled"]; ok {
			if b, ok := d.boolean(a.key("enabled"), v); ok {
				r.Disabled = !b
			}
		}
		d.ruleFields(c, &r, a, m)
		if r.Action == rules.Ask {
			c.Policy.asks = true
		}
		rs = append(rs, r)
		lines = append(lines, d.loc.line(a.path))
	}
	return rs, lines
}

func (d *decoder) ruleFields(c *Config, r *rules.Rule, a at, m map[string]any) {
	if v, ok := m["action"]; !ok {
		d.fail(a, "missing key \"action\" (direct, proxy, block or ask)")
	} else if s, ok := d.str(a.key("action"), v); ok {
		act, ok := rules.ParseAction(s)
		if !ok {
			d.fail(a.key("action"), "unknown action %q (direct, proxy, block or ask)", s)
		}
		r.Action = act
	}
	proxyVal, hasProxy := m["proxy"]
	// An ask rule names the upstream an approval sends its flows through, as a proxy rule.
	via := r.Action == rules.Proxy || r.Action == rules.Ask
	switch {
	case hasProxy:
		names := d.proxyList(c, a.key("proxy"), proxyVal)
		r.Proxy = strings.Join(names, ",")
		if !via {
			d.fail(a.key("proxy"), "proxy is only for action = \"proxy\" or \"ask\"")
		}
	case via && len(c.Proxies) == 0:
		d.fail(a.key("action"), "action %q but no [proxy.NAME] is defined", r.Action)
	case via && len(c.Proxies) > 1:
		d.fail(a, "action %q needs proxy = \"NAME\" when several proxies are defined%s", r.Action, d.known(c))
	case via:
		r.Proxy = c.Proxies[0].Name
	}
	if v, ok := m["network"]; ok {
		if s, ok := d.str(a.key("network"), v); ok {
			n, ok := rules.ParseNetwork(s)
			if !ok {
				d.fail(a.key("network"), "%q is not tcp or udp", s)
			}
			r.Network = n
		}
	}
	r.Sources = parseEach(d, a, m, "sources", rules.ParseIPRange)
	if v, ok := m["caged"]; ok {
		if b, ok := d.boolean(a.key("caged"), v); ok {
			if !b {
				d.fail(a.key("caged"), "caged = false matches nothing special; leave the key out to match any flow")
			}
			r.Caged = b
		}
	}
	r.Hosts = parseEach(d, a, m, "hosts", rules.ParseHost)
	if v, ok := m["hosts_file"]; ok {
		d.hostFiles(r, a.key("hosts_file"), v)
	}
	if v, ok := m["hosts_preset"]; ok {
		d.hostPresets(r, a.key("hosts_preset"), v)
	}
	if v, ok := m["ports"]; ok {
		d.ports(r, a.key("ports"), v)
	}
	r.Apps = parseEach(d, a, m, "apps", rules.ParseApp)
	r.Services = parseEach(d, a, m, "services", rules.ParseService)
	for _, k := range []string{"sources", "hosts", "ports", "apps", "services"} {
		if xs, ok := m[k].([]any); ok && len(xs) == 0 {
			d.fail(a.key(k), "is empty; leave the key out to match any %s", strings.TrimSuffix(k, "s"))
		}
	}
	for _, k := range []string{"hosts_file", "hosts_preset"} {
		if xs, ok := m[k].([]any); ok && len(xs) == 0 {
			d.fail(a.key(k), "is empty; leave the key out to match any host")
		}
	}
}

// proxyList decodes a rule's proxy: one name, or an ordered failover list of names, each a
// defined [proxy.NAME], none twice.
func (d *decoder) proxyList(c *Config, a at, v any) []string {
	var names []string
	var ats []at
	switch v := v.(type) {
	case string:
		names, ats = []string{v}, []at{a}
	case []any:
		if len(v) == 0 {
			d.fail(a, "is empty: name a proxy, or a list of them to fail over in order")
			return nil
		}
		for i, x := range v {
			if s, ok := d.str(a.elem(i), x); ok {
				names, ats = append(names, s), append(ats, a.elem(i))
			}
		}
	default:
		d.fail(a, "must be a proxy's name or a list of names, not %s", typeName(v))
		return nil
	}
	var out []string
	seen := make(map[string]bool, len(names))
	for i, n := range names {
		switch {
		case seen[n]:
			d.fail(ats[i], "%q is listed twice", n)
		default:
			seen[n] = true
			if _, found := d.proxies[n]; !found {
				d.fail(ats[i], "no [proxy.%s] is defined%s", n, d.known(c))
			}
			out = append(out, n)
		}
	}
	return out
}

// parseEach parses every string of m[key] (a string or an array of them) with parse,
// reporting each bad entry with its index.
func parseEach[T any](d *decoder, a at, m map[string]any, key string, parse func(string) (T, error)) []T {
	v, ok := m[key]
	if !ok {
		return nil
	}
	var out []T
	for i, s := range d.strings(a.key(key), v) {
		x, err := parse(s)
		if err != nil {
			d.fail(a.key(key).elem(i), "%v", err)
			continue
		}
		out = append(out, x)
	}
	return out
}

// ports takes an array of numbers, "443" and "8000-9000".
func (d *decoder) ports(r *rules.Rule, a at, v any) {
	xs, ok := v.([]any)
	if !ok {
		d.fail(a, "must be an array of ports, e.g. [%s], not %s", tomlValue(v), typeName(v))
		return
	}
	for i, x := range xs {
		ea := a.elem(i)
		switch x := x.(type) {
		case int64:
			if x < 1 || x > 65535 {
				d.fail(ea, "%d is not a port (1-65535)", x)
				continue
			}
			r.Ports = append(r.Ports, rules.PortRange{Lo: uint16(x), Hi: uint16(x)})
		case string:
			p, err := rules.ParsePorts(x)
			if err != nil {
				d.fail(ea, "%v", err)
				continue
			}
			r.Ports = append(r.Ports, p)
		default:
			d.fail(ea, "must be a port number or a \"lo-hi\" range, not %s", typeName(x))
		}
	}
}

// tomlValue writes a scalar as TOML would, for examples in messages.
func tomlValue(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}
