package conf

import (
	"crypto/x509"
	"net"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/agentcage/router/rules"
	"golang.org/x/net/http/httpguts"
)

// Credential is a [[credential]]: a real secret the guest never holds. The guest holds
// Placeholder instead; the router puts Value in its place only in requests to what the
// credential is bound to (a forward, Forward, or a plaintext HTTP destination by name and
// port, Destination), from the guests it is for (Guests), and nowhere else.
// A placeholder seen anywhere else in what a guest sends (a DNS name, a TLS server name, an
// HTTP request to another place, an inbound's CONNECT) is a canary: the flow is refused and
// counted (reason canary), and logged once with the guest and destination.
type Credential struct {
	Name string
	Line int
	// Placeholder is what the guest holds: at least MinPlaceholder bytes of letters, digits,
	// '-', '_' and '.', unique, and no placeholder contains another.
	Placeholder string
	// ValueEnv and ValueFile say where the real value comes from (one of them).
	ValueEnv, ValueFile string
	// Value is the real value (empty when Options.SkipSecrets); never printed.
	Value Secret
	// Forward is the [[forward]] (by name) whose requests get the value; empty when the
	// credential is bound to a Destination (exactly one of the two is set).
	Forward string
	// Destination is the plaintext HTTP destination whose requests get the value, as
	// "name:port": the name in lower case without a trailing dot (never an address).
	Destination string
	// Header is the request header (canonical form) whose value may hold the placeholder;
	// empty: any header. A placeholder in another header is a canary.
	Header string
	// TLSTerminate: the Destination speaks HTTPS, and the router terminates the guest's TLS
	// with a certificate of its own CA for the name, and makes its own TLS connection to the
	// destination, verified with the system's roots (or Roots).
	TLSTerminate bool
	// CAFile names a PEM file of the CAs that verify the destination instead of the system's
	// roots (TLSTerminate only); Roots are its certificates (nil: the system's roots).
	CAFile string
	Roots  *x509.CertPool
	// Guests are the sources the credential is for; empty for every source the forward
	// allows (for a destination: every caged source). A placeholder from any other source is a canary.
	Guests []netip.Prefix
}

// MinPlaceholder is the shortest placeholder: long enough that it never turns up by chance
// in what a guest sends, so that seeing it elsewhere means it was carried there.
const MinPlaceholder = 16

// credentialKeys are the keys of a [[credential]]; "value" is known only to be refused with
// its own message.
var credentialKeys = []string{"name", "placeholder", "value_env", "value_file", "forward", "destination", "header", "tls_terminate", "ca_file", "guests", "value"}

func (d *decoder) credentials(c *Config, v any) {
	list, ok := v.([]map[string]any)
	if !ok {
		d.fail(at{path: "credential"}, "must be an array of tables [[credential]], not %s", typeName(v))
		return
	}
	names := map[string]bool{}
	for i, m := range list {
		a := at{path: "credential[" + strconv.Itoa(i+1) + "]", where: "credential #" + strconv.Itoa(i+1)}
		cr := Credential{Line: d.loc.line(a.path)}
		d.checkKeys(a, m, credentialKeys)
		if v, ok := m["name"]; ok {
			if cr.Name, ok = d.str(a.key("name"), v); ok {
				a.where += " " + strconv.Quote(cr.Name)
				if !validName(cr.Name) {
					d.fail(a.key("name"), "%q: use letters, digits, '-' and '_'", cr.Name)
				} else if names[cr.Name] {
					d.fail(a.key("name"), "%q is used by another [[credential]]", cr.Name)
				}
				names[cr.Name] = true
			}
		} else {
			d.fail(a, "missing key \"name\"")
		}
		if v, ok := m["placeholder"]; ok {
			if cr.Placeholder, ok = d.str(a.key("placeholder"), v); ok && !validPlaceholder(cr.Placeholder) {
				d.fail(a.key("placeholder"), "must be at least %d bytes of letters, digits, '-', '_' and '.' (it stands for the secret in the guest, and must never turn up by chance)", MinPlaceholder)
			}
		} else {
			d.fail(a, "missing key \"placeholder\" (what the guest holds instead of the secret)")
		}
		var single bool
		cr.ValueEnv, cr.ValueFile, single = d.secretPlace(a, m, "value")
		switch {
		case !single:
		case cr.ValueEnv == "" && cr.ValueFile == "":
			if _, inline := m["value"]; !inline {
				d.fail(a, "missing key \"value_env\" or \"value_file\" (where the real value comes from)")
			}
		case d.opts.SkipSecrets:
		case cr.ValueEnv != "":
			cr.Value = NewSecret(d.readSecret(a.key("value_env"), cr.ValueEnv, ""))
		default:
			cr.Value = NewSecret(d.readSecret(a.key("value_file"), "", cr.ValueFile))
		}
		if _, inline := m["value"]; inline {
			d.fail(a.key("value"), "inline secrets are refused: put the value in an environment variable (value_env) or a file (value_file)")
		}
		_, fwd := m["forward"]
		_, dst := m["destination"]
		switch {
		case fwd && dst:
			d.fail(a.key("destination"), "give forward or destination, not both")
		case fwd:
			cr.Forward, _ = d.str(a.key("forward"), m["forward"])
		case dst:
			if s, ok := d.str(a.key("destination"), m["destination"]); ok {
				cr.Destination = d.credentialDestination(a.key("destination"), s)
			}
		default:
			d.fail(a, "missing key \"forward\" or \"destination\" (the [[forward]] by name, or the HTTP destination name:port, whose requests get the value)")
		}
		if v, ok := m["header"]; ok {
			if s, ok := d.str(a.key("header"), v); ok {
				cr.Header = d.credentialHeader(a.key("header"), s)
			}
		}
		if v, ok := m["tls_terminate"]; ok {
			if cr.TLSTerminate, _ = d.boolean(a.key("tls_terminate"), v); cr.TLSTerminate && !dst {
				d.fail(a.key("tls_terminate"), "only a credential bound to a destination terminates TLS (a forward's is plaintext HTTP)")
				cr.TLSTerminate = false
			}
		}
		if v, ok := m["ca_file"]; ok {
			if cr.CAFile, ok = d.str(a.key("ca_file"), v); ok {
				switch {
				case !cr.TLSTerminate:
					d.fail(a.key("ca_file"), "only with tls_terminate = true (the CAs that verify the destination)")
				default:
					cr.Roots = d.caFile(a.key("ca_file"), cr.CAFile)
				}
			}
		}
		if v, ok := m["guests"]; ok {
			cr.Guests = d.prefixes(a.key("guests"), v)
		}
		c.Credentials = append(c.Credentials, cr)
	}
}

// checkCredentials checks what needs the whole config: each credential's forward exists and
// speaks HTTP, and no placeholder is, contains or is contained in another.
func (d *decoder) checkCredentials(c *Config) {
	for i, cr := range c.Credentials {
		a := at{path: "credential[" + strconv.Itoa(i+1) + "]", where: "credential #" + strconv.Itoa(i+1) + " " + strconv.Quote(cr.Name)}
		if cr.Forward != "" {
			var f *Forward
			for j := range c.Forwards {
				if c.Forwards[j].Name == cr.Forward {
					f = &c.Forwards[j]
				}
			}
			switch {
			case f == nil:
				d.fail(a.key("forward"), "no [[forward]] is named %q", cr.Forward)
			case f.Raw():
				d.fail(a.key("forward"), "forward %q passes raw TCP (api = \"tcp\"): the router cannot put a value in its requests", cr.Forward)
			}
		}
		for j := range i {
			o := c.Credentials[j]
			if cr.Destination != "" && cr.Destination == o.Destination && (cr.TLSTerminate != o.TLSTerminate || cr.CAFile != o.CAFile) {
				d.fail(a.key("destination"), "credential %q is bound to %s too: both must agree on tls_terminate and ca_file", o.Name, cr.Destination)
			}
			if cr.Placeholder != "" && o.Placeholder != "" && (strings.Contains(cr.Placeholder, o.Placeholder) || strings.Contains(o.Placeholder, cr.Placeholder)) {
				d.fail(a.key("placeholder"), "overlaps the placeholder of credential %q: each must be unique and contain no other", o.Name)
			}
		}
	}
}

// credentialDestination checks a credential's destination, "name:port", and returns it in
// the form Credential.Destination holds ("" when it is not valid). An address is refused:
// the value is bound to a name the router resolves itself (see docs/config.md).
func (d *decoder) credentialDestination(a at, s string) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		d.fail(a, "%q: want name:port, e.g. \"api.example.com:80\"", s)
		return ""
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		d.fail(a, "%q: the port must be 1 to 65535", s)
		return ""
	}
	if _, err := netip.ParseAddr(host); err == nil {
		d.fail(a, "%q: give the destination's name, not an address (the value is bound to a name the router resolves and dials itself)", s)
		return ""
	}
	h, err := rules.ParseHost(host)
	if err != nil || h.Kind != rules.HostName {
		d.fail(a, "%q: not a host name", s)
		return ""
	}
	return net.JoinHostPort(h.Name, strconv.FormatUint(n, 10))
}

// caFile reads a PEM file of CA certificates (nil when it cannot be read or holds none).
func (d *decoder) caFile(a at, file string) *x509.CertPool {
	b, err := d.opts.ReadFile(file)
	if err != nil {
		d.fail(a, "read the CA file: %v", err)
		return nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		d.fail(a, "%s holds no PEM certificate", file)
		return nil
	}
	return pool
}

// credentialHeader checks a credential's header name and returns it in canonical form ("" when
// it is not valid). Headers that frame or route the request are refused.
func (d *decoder) credentialHeader(a at, s string) string {
	if !httpguts.ValidHeaderFieldName(s) {
		d.fail(a, "%q is not an HTTP header name", s)
		return ""
	}
	c := textproto.CanonicalMIMEHeaderKey(s)
	switch c {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Upgrade", "Te", "Trailer":
		d.fail(a, "%q frames or routes the request: the value cannot go there", s)
		return ""
	}
	return c
}

func validPlaceholder(s string) bool {
	if len(s) < MinPlaceholder || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
