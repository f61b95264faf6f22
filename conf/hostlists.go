package conf

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/agentcage/router/rules"
)

// Host lists: a rule's hosts_file (files of hosts, one a line) and hosts_preset (lists shipped
// in the binary for what coding agents need), both added to the rule's hosts at load; and
// the DNS-over-HTTPS endpoints refused to caged traffic ([dns] allow_doh, doh_hosts).

// Limits of a hosts file (hosts_file). A list of an agent's registries is a few dozen lines;
// the largest public block lists are a few hundred thousand, which belong in a DNS filter,
// not in a rule.
const (
	MaxHostFileSize    = 1 << 20 // bytes of one file
	MaxHostFileEntries = 100_000 // entries of one file
	// MaxHostFilesSize bounds the bytes of every hosts file of a config together.
	MaxHostFilesSize = 16 << 20
)

// HostListError is a bad line of a hosts file.
type HostListError struct {
	Line int
	Msg  string
}

// ParseHostList parses a hosts file: one entry a line (an address, CIDR, range, name or
// *.suffix, as a rule's hosts takes them), blank lines and '#' comments (a whole line, or
// after the entry) ignored. It returns the entries in file order and the bad lines; data
// larger than MaxHostFileSize or with more than MaxHostFileEntries entries is refused at the
// first line over the bound. It never panics, whatever the bytes.
func ParseHostList(data []byte) ([]rules.Host, []HostListError) {
	var hosts []rules.Host
	var errs []HostListError
	if len(data) > MaxHostFileSize {
		return nil, []HostListError{{Msg: fmt.Sprintf("the file is %d bytes: a hosts file may be at most %d (1 MiB)", len(data), MaxHostFileSize)}}
	}
	for n := 1; len(data) > 0; n++ {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if i := bytes.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		s := string(bytes.TrimSpace(line))
		if s == "" {
			continue
		}
		if strings.ContainsAny(s, " \t,") {
			errs = append(errs, HostListError{Line: n, Msg: fmt.Sprintf("%q: one host a line (an address, CIDR, name or *.suffix)", trimmed(s))})
			continue
		}
		h, err := rules.ParseHost(s)
		if err != nil {
			errs = append(errs, HostListError{Line: n, Msg: err.Error()})
			continue
		}
		if len(hosts) == MaxHostFileEntries {
			return hosts, append(errs, HostListError{Line: n, Msg: fmt.Sprintf("more than %d entries: a hosts file may hold at most %d", MaxHostFileEntries, MaxHostFileEntries)})
		}
		hosts = append(hosts, h)
	}
	return hosts, errs
}

// trimmed shortens s for a message.
func trimmed(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// hostFiles decodes a rule's hosts_file: each file, relative to the config file's directory
// unless absolute, is read and parsed (ParseHostList), its entries added to r.Hosts; a bad
// line is an error at that file and line.
func (d *decoder) hostFiles(r *rules.Rule, a at, v any) {
	for i, p := range d.strings(a, v) {
		ea := a.elem(i)
		if p == "" {
			d.fail(ea, "is empty")
			continue
		}
		path := p
		if !filepath.IsAbs(path) {
			path = filepath.Join(filepath.Dir(d.file), path)
		}
		data, err := d.readBounded(path, MaxHostFileSize)
		if err != nil {
			d.fail(ea, "read hosts file: %v", err)
			continue
		}
		d.hostPaths = append(d.hostPaths, path)
		d.hostBytes += len(data)
		if d.hostBytes > MaxHostFilesSize {
			d.fail(ea, "the hosts files of this config hold more than %d bytes (16 MiB) together", MaxHostFilesSize)
			return
		}
		hosts, errs := ParseHostList(data)
		for _, e := range errs {
			if d.errs.room(d.loc.line(ea.path)) {
				d.errs.add(&Error{File: path, Line: e.Line, Key: ea.path, Where: ea.where + " (line " + strconv.Itoa(d.loc.line(ea.path)) + " of " + d.file + ")", Msg: e.Msg})
			}
		}
		if len(hosts) == 0 && len(errs) == 0 {
			d.fail(ea, "%s lists no host", p)
		}
		r.Hosts = append(r.Hosts, hosts...)
	}
}

// readBounded reads at most max bytes of path, and refuses a longer file without reading
// the rest (a device, a file that grows).
func (d *decoder) readBounded(path string, max int) ([]byte, error) {
	if d.readFile != nil {
		b, err := d.readFile(path)
		if err == nil && len(b) > max {
			return nil, fmt.Errorf("%s is larger than %d bytes", path, max)
		}
		return b, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes (1 MiB)", path, max)
	}
	return b, nil
}

// hostPresets decodes a rule's hosts_preset: each name's hosts (LookupHostPreset) are added
// to r.Hosts.
func (d *decoder) hostPresets(r *rules.Rule, a at, v any) {
	for i, name := range d.strings(a, v) {
		list, ok := LookupHostPreset(name)
		if !ok {
			msg := fmt.Sprintf("%q is not a hosts preset; want one of %s", name, strings.Join(HostPresetNames(), ", "))
			if s := suggest(name, HostPresetNames()); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			d.fail(a.elem(i), "%s", msg)
			continue
		}
		for _, s := range list {
			h, err := rules.ParseHost(s)
			if err != nil {
				panic("conf: hosts preset " + name + ": " + err.Error()) // a test parses every preset
			}
			r.Hosts = append(r.Hosts, h)
		}
	}
}

// hostPresets are the lists hosts_preset names: the hosts a coding agent needs to reach each
// service, from the service's own documentation (docs/config.md cites each source). A
// "*.suffix" entry matches subdomains only, so the bare name is listed beside it where the
// service uses it.
var hostPresets = map[string][]string{
	// npm: the registry (metadata and tarballs). docs.npmjs.com, "npm-registry".
	"npm": {"registry.npmjs.org", "registry.yarnpkg.com"},
	// PyPI: the index and the files it serves. docs.pypi.org, "Index API" and
	// warehouse's "files.pythonhosted.org".
	"pypi": {"pypi.org", "files.pythonhosted.org"},
	// GitHub: the site, its API, git over HTTPS, raw files, release assets and archives,
	// and its container registry. docs.github.com, "About GitHub's IP addresses" (the
	// domains of the meta API).
	"github": {"github.com", "api.github.com", "codeload.github.com", "uploads.github.com",
		"*.githubusercontent.com", "ghcr.io", "pkg-containers.githubusercontent.com"},
	// Go: the module mirror and the checksum database (GOPROXY, GOSUMDB defaults).
	// go.dev/ref/mod, "Module proxies" and "Checksum database".
	"go": {"proxy.golang.org", "sum.golang.org"},
	// crates.io: the site and API, the sparse index and the crate files.
	// doc.rust-lang.org/cargo, "Registries"; the crates.io "index.crates.io" notice.
	"crates": {"crates.io", "index.crates.io", "static.crates.io"},
	// Docker Hub: the registry, its token service and the layer stores (Docker's own R2
	// bucket, not all of R2). docs.docker.com, "Allowlist for Docker Desktop" (the
	// "Docker Pull/Push" and authentication entries).
	"dockerhub": {"registry-1.docker.io", "auth.docker.io", "index.docker.io", "hub.docker.com",
		"production.cloudflare.docker.com", "production.cloudfront.docker.com",
		"docker-images-prod.6aa30f8b08e16409b46e0173d6de2f56.r2.cloudflarestorage.com"},
	// The VS Code extension marketplace and its caches. code.visualstudio.com, "Network
	// connections in Visual Studio Code" (the marketplace entries).
	"vscode": {"marketplace.visualstudio.com", "*.gallery.vsassets.io", "*.gallerycdn.vsassets.io",
		"vscode.blob.core.windows.net", "update.code.visualstudio.com", "az764295.vo.msecnd.net"},
	// Model APIs, each its provider's API reference.
	"openai":     {"api.openai.com"},
	"anthropic":  {"api.anthropic.com"},
	"gemini":     {"generativelanguage.googleapis.com"},
	"mistral":    {"api.mistral.ai"},
	"openrouter": {"openrouter.ai"},
}

// HostPresetNames returns the names hosts_preset takes, sorted.
func HostPresetNames() []string {
	names := make([]string, 0, len(hostPresets))
	for n := range hostPresets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// LookupHostPreset returns the hosts of the preset name, as a rule's hosts writes them.
func LookupHostPreset(name string) ([]string, bool) {
	l, ok := hostPresets[name]
	return slices.Clone(l), ok
}

// DoHEndpoints returns the well-known DNS-over-HTTPS endpoints, by name and by address,
// that a caged flow may not reach unless [dns] allow_doh = true: the providers built into
// the major browsers (Chromium's list of DoH providers, Firefox's trusted recursive
// resolvers) and the resolvers' own documentation. Entries are a rule's hosts syntax.
func DoHEndpoints() []string {
	return []string{
		// Cloudflare (developers.cloudflare.com/1.1.1.1): 1.1.1.1, its families (malware
		// 1.1.1.2, family 1.1.1.3) and Firefox's mozilla.cloudflare-dns.com.
		"cloudflare-dns.com", "*.cloudflare-dns.com", "one.one.one.one",
		"1.1.1.1", "1.0.0.1", "1.1.1.2", "1.0.0.2", "1.1.1.3", "1.0.0.3",
		"2606:4700:4700::1111", "2606:4700:4700::1001", "2606:4700:4700::1112",
		"2606:4700:4700::1002", "2606:4700:4700::1113", "2606:4700:4700::1003",
		// Google Public DNS (developers.google.com/speed/public-dns).
		"dns.google", "dns.google.com", "dns64.dns.google",
		"8.8.8.8", "8.8.4.4", "2001:4860:4860::8888", "2001:4860:4860::8844",
		"2001:4860:4860::6464", "2001:4860:4860::64",
		// Quad9 (quad9.net/service/service-addresses-and-features).
		"dns.quad9.net", "dns9.quad9.net", "dns10.quad9.net", "dns11.quad9.net",
		"9.9.9.9", "149.112.112.112", "9.9.9.10", "149.112.112.10", "9.9.9.11", "149.112.112.11",
		"2620:fe::fe", "2620:fe::9", "2620:fe::10", "2620:fe::fe:10", "2620:fe::11", "2620:fe::fe:11",
		// NextDNS (Firefox's TRR list): every profile is a path or subdomain of these.
		"dns.nextdns.io", "*.dns.nextdns.io", "firefox.dns.nextdns.io",
		// AdGuard DNS (adguard-dns.io/kb/general/dns-providers).
		"dns.adguard.com", "dns.adguard-dns.com", "*.adguard-dns.com", "dns-family.adguard.com",
		"dns-unfiltered.adguard.com", "94.140.14.14", "94.140.15.15", "94.140.14.15",
		"94.140.15.16", "94.140.14.140", "94.140.14.141",
		"2a10:50c0::ad1:ff", "2a10:50c0::ad2:ff",
		// Cisco OpenDNS (support.opendns.com, "DNS-over-HTTPS").
		"doh.opendns.com", "doh.familyshield.opendns.com", "dns.opendns.com",
		"208.67.222.222", "208.67.220.220", "208.67.222.123", "208.67.220.123",
		"2620:119:35::35", "2620:119:53::53",
		// Mullvad (mullvad.net/help/dns-over-https-and-dns-over-tls).
		"dns.mullvad.net", "*.dns.mullvad.net", "194.242.2.2", "2a07:e340::2",
		// Other public resolvers of Chromium's provider list and the curl project's list of
		// public DoH servers: CleanBrowsing, Control D, DNS.SB, Comcast, Spectrum, AliDNS,
		// DNSPod, SWITCH, CZ.NIC.
		"doh.cleanbrowsing.org", "freedns.controld.com", "dns.controld.com", "doh.dns.sb",
		"doh.xfinity.com", "doh-01.spectrum.com", "dns.alidns.com", "doh.pub",
		"dns.switch.ch", "odvr.nic.cz",
	}
}

// CanaryName is Firefox's canary domain: a resolver that answers it NXDOMAIN tells Firefox
// not to turn DNS over HTTPS on by itself (support.mozilla.org, "Canary domain -
// use-application-dns.net"). The router's DNS always does.
const CanaryName = "use-application-dns.net"
