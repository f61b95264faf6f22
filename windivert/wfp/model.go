package wfp

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/uuid"
)

// Key identifies a provider, sublayer or filter: a GUID, held as its 16 bytes in the order
// of its text form (RFC 4122), which is how Windows prints it. The zero Key is invalid.
type Key [16]byte

// NameKey returns the name-based (version 5, SHA-1) UUID of name in namespace: the same
// inputs give the same key on every machine and every run, so a reinstall finds and
// replaces its own objects instead of adding copies.
func NameKey(namespace Key, name string) Key {
	return Key(uuid.NewSHA1(uuid.UUID(namespace), []byte(name)))
}

// ParseKey parses a GUID in its text form, with or without braces.
func ParseKey(s string) (Key, error) {
	u, err := uuid.Parse(strings.Trim(s, "{}"))
	if err != nil {
		return Key{}, fmt.Errorf("parse key %q: %w", s, err)
	}
	return Key(u), nil
}

// String returns the key in Windows' braced form, upper case.
func (k Key) String() string { return "{" + strings.ToUpper(uuid.UUID(k).String()) + "}" }

// IsZero reports whether k is the zero key.
func (k Key) IsZero() bool { return k == Key{} }

// Layer is a filtering layer the guard uses.
type Layer uint8

// The layers. Connect is where an outbound connection (TCP connect, first UDP send, ICMP
// from a socket) is authorized, Accept where an inbound one is; Forward sees packets the
// host routes between interfaces (a Hyper-V internal switch with forwarding on).
const (
	LayerConnectV4 Layer = iota + 1 // FWPM_LAYER_ALE_AUTH_CONNECT_V4
	LayerConnectV6                  // FWPM_LAYER_ALE_AUTH_CONNECT_V6
	LayerAcceptV4                   // FWPM_LAYER_ALE_AUTH_RECV_ACCEPT_V4
	LayerAcceptV6                   // FWPM_LAYER_ALE_AUTH_RECV_ACCEPT_V6
	LayerForwardV4                  // FWPM_LAYER_IPFORWARD_V4
	LayerForwardV6                  // FWPM_LAYER_IPFORWARD_V6
)

var layerNames = [...]string{"", "connect-v4", "connect-v6", "accept-v4", "accept-v6", "forward-v4", "forward-v6"}

func (l Layer) String() string {
	if int(l) < len(layerNames) && l != 0 {
		return layerNames[l]
	}
	return fmt.Sprintf("layer(%d)", uint8(l))
}

// Valid reports whether l is one of the layers above.
func (l Layer) Valid() bool { return l >= LayerConnectV4 && l <= LayerForwardV6 }

// IPv6 reports whether the layer sees IPv6 traffic.
func (l Layer) IPv6() bool { return l == LayerConnectV6 || l == LayerAcceptV6 || l == LayerForwardV6 }

// IsForward reports whether l is an IP forwarding layer (no process, no ports).
func (l Layer) IsForward() bool { return l == LayerForwardV4 || l == LayerForwardV6 }

// Action is what a filter does with what it matches.
type Action uint8

// The actions.
const (
	Block Action = iota + 1
	Permit
)

func (a Action) String() string {
	switch a {
	case Block:
		return "block"
	case Permit:
		return "permit"
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// Field is what a condition tests.
type Field uint8

// The fields. Each names the value member of Condition it uses.
const (
	// FieldApp: the process's executable is Path (an absolute file path; the engine turns
	// it into Windows' app ID, the NT device path, when the filter is added).
	// FWPM_CONDITION_ALE_APP_ID. Not at the forward layers.
	FieldApp Field = iota + 1
	// FieldUser: the process token holds SID (e.g. a service SID, "S-1-5-80-…").
	// FWPM_CONDITION_ALE_USER_ID with a security descriptor granting that SID.
	FieldUser
	// FieldProtocol: the IP protocol is Proto. FWPM_CONDITION_IP_PROTOCOL.
	FieldProtocol
	// FieldLocalPort, FieldRemotePort: the port is in Ports. FWPM_CONDITION_IP_LOCAL_PORT,
	// FWPM_CONDITION_IP_REMOTE_PORT. Not at the forward layers.
	FieldLocalPort
	FieldRemotePort
	// FieldLocalAddr, FieldRemoteAddr: the address is in Prefix.
	// FWPM_CONDITION_IP_LOCAL_ADDRESS, FWPM_CONDITION_IP_REMOTE_ADDRESS. Not at forward.
	FieldLocalAddr
	FieldRemoteAddr
	// FieldSourceAddr: the forwarded packet's source address is in Prefix.
	// FWPM_CONDITION_IP_SOURCE_ADDRESS, forward layers only.
	FieldSourceAddr
	// FieldFlags: every bit of Flags is set in the classification's condition flags
	// (FWPM_CONDITION_FLAGS, match "all set"), or with None, none of them is (match "none
	// set"). Not at the forward layers.
	FieldFlags
	// FieldInterface: the connection's local interface (where an inbound one arrived,
	// where an outbound one leaves) is the adapter whose LUID is LUID.
	// FWPM_CONDITION_IP_LOCAL_INTERFACE. Not at the forward layers.
	FieldInterface
)

var fieldNames = [...]string{"", "app", "user", "protocol", "local-port", "remote-port", "local-addr", "remote-addr", "source-addr", "flags", "interface"}

func (f Field) String() string {
	if int(f) < len(fieldNames) && f != 0 {
		return fieldNames[f]
	}
	return fmt.Sprintf("field(%d)", uint8(f))
}

// FlagLoopback is FWP_CONDITION_FLAG_IS_LOOPBACK: Windows sets it when both ends of the
// connection are this machine, whatever the address (127.0.0.0/8, ::1 or any address of
// this host's interfaces).
const FlagLoopback uint32 = 0x00000001

// IP protocol numbers used in conditions.
const (
	ProtoICMP   uint8 = 1
	ProtoTCP    uint8 = 6
	ProtoUDP    uint8 = 17
	ProtoICMPv6 uint8 = 58
)

// PortRange is an inclusive range of ports; a single port has From == To.
type PortRange struct{ From, To uint16 }

// Port is the range of one port.
func Port(p uint16) PortRange { return PortRange{p, p} }

// Contains reports whether p is in r.
func (r PortRange) Contains(p uint16) bool { return r.From <= p && p <= r.To }

func (r PortRange) String() string {
	if r.From == r.To {
		return fmt.Sprint(r.From)
	}
	return fmt.Sprintf("%d-%d", r.From, r.To)
}

// Condition is one test of a filter. Field says which of the value members is used; the
// constructors below fill them.
type Condition struct {
	Field  Field
	Path   string       // FieldApp
	SID    string       // FieldUser
	Proto  uint8        // FieldProtocol
	Ports  PortRange    // FieldLocalPort, FieldRemotePort
	Prefix netip.Prefix // FieldLocalAddr, FieldRemoteAddr, FieldSourceAddr
	Flags  uint32       // FieldFlags
	None   bool         // FieldFlags: none of Flags is set (else all of them are)
	LUID   uint64       // FieldInterface
}

// App matches the process whose executable is path.
func App(path string) Condition { return Condition{Field: FieldApp, Path: path} }

// User matches a process whose token holds sid.
func User(sid string) Condition { return Condition{Field: FieldUser, SID: sid} }

// Protocol matches IP protocol p.
func Protocol(p uint8) Condition { return Condition{Field: FieldProtocol, Proto: p} }

// LocalPort matches a local port in r.
func LocalPort(r PortRange) Condition { return Condition{Field: FieldLocalPort, Ports: r} }

// RemotePort matches a remote port in r.
func RemotePort(r PortRange) Condition { return Condition{Field: FieldRemotePort, Ports: r} }

// LocalAddr matches a local address in p.
func LocalAddr(p netip.Prefix) Condition { return Condition{Field: FieldLocalAddr, Prefix: p} }

// RemoteAddr matches a remote address in p.
func RemoteAddr(p netip.Prefix) Condition { return Condition{Field: FieldRemoteAddr, Prefix: p} }

// SourceAddr matches a forwarded packet whose source address is in p.
func SourceAddr(p netip.Prefix) Condition { return Condition{Field: FieldSourceAddr, Prefix: p} }

// FlagsSet matches when every bit of f is set in the condition flags.
func FlagsSet(f uint32) Condition { return Condition{Field: FieldFlags, Flags: f} }

// FlagsClear matches when no bit of f is set in the condition flags. It is a condition
// on the same field as FlagsSet: in one filter the two are OR-ed, like any two conditions
// on one field.
func FlagsClear(f uint32) Condition { return Condition{Field: FieldFlags, Flags: f, None: true} }

// Interface matches a connection whose local interface is the adapter with LUID luid.
func Interface(luid uint64) Condition { return Condition{Field: FieldInterface, LUID: luid} }

func (c Condition) String() string {
	var v string
	switch c.Field {
	case FieldApp:
		v = fmt.Sprintf("%q", c.Path)
	case FieldUser:
		v = c.SID
	case FieldProtocol:
		v = protoName(c.Proto)
	case FieldLocalPort, FieldRemotePort:
		v = c.Ports.String()
	case FieldLocalAddr, FieldRemoteAddr, FieldSourceAddr:
		v = c.Prefix.String()
	case FieldFlags:
		if c.Flags == FlagLoopback {
			v = "loopback"
		} else {
			v = fmt.Sprintf("%#x", c.Flags)
		}
		if c.None {
			return c.Field.String() + "!=" + v
		}
	case FieldInterface:
		v = fmt.Sprintf("%#x", c.LUID)
	}
	return c.Field.String() + "=" + v
}

func protoName(p uint8) string {
	switch p {
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	case ProtoICMP:
		return "icmp"
	case ProtoICMPv6:
		return "icmpv6"
	}
	return fmt.Sprint(p)
}

// check reports a condition that cannot stand at layer l.
func (c Condition) check(l Layer) error {
	fwd := l.IsForward()
	switch c.Field {
	case FieldApp:
		if c.Path == "" {
			return fmt.Errorf("condition %v: empty path", c)
		}
	case FieldUser:
		if !strings.HasPrefix(c.SID, "S-") {
			return fmt.Errorf("condition %v: not a SID", c)
		}
	case FieldProtocol:
	case FieldLocalPort, FieldRemotePort:
		if c.Ports.From > c.Ports.To {
			return fmt.Errorf("condition %v: empty port range", c)
		}
	case FieldLocalAddr, FieldRemoteAddr, FieldSourceAddr:
		if !c.Prefix.IsValid() || c.Prefix.Addr().Is4() == l.IPv6() || c.Prefix.Addr().Is4In6() {
			return fmt.Errorf("condition %v: address family does not match layer %v", c, l)
		}
	case FieldFlags:
	case FieldInterface:
		if c.LUID == 0 {
			return fmt.Errorf("condition %v: zero interface LUID", c)
		}
	default:
		return fmt.Errorf("condition %v: unknown field", c)
	}
	// The forward layers classify packets, not sockets: of our fields only the source
	// address exists there.
	if (c.Field == FieldSourceAddr) != fwd {
		return fmt.Errorf("condition %v: not available at layer %v", c, l)
	}
	return nil
}

// Provider is the owner of a sublayer and filters, shown in Windows' tools.
type Provider struct {
	Key        Key
	Name       string
	Persistent bool
}

// Sublayer groups filters; its Weight orders it among all sublayers (higher first).
type Sublayer struct {
	Key        Key
	Provider   Key
	Name       string
	Weight     uint16
	Persistent bool
}

// Filter is one rule. Conditions on the same field are OR-ed, on different fields AND-ed.
//
// Lifetime: Persistent and BootTime are exclusive (WFP refuses both); with neither the
// filter lives as long as the session that added it if that session is dynamic, else until
// the engine stops.
type Filter struct {
	Key        Key
	Name       string
	Provider   Key
	Sublayer   Key
	Layer      Layer
	Weight     uint64
	Action     Action
	Hard       bool // a hard permit (FWPM_FILTER_FLAG_CLEAR_ACTION_RIGHT): lower sublayers cannot block
	Persistent bool
	BootTime   bool
	Conditions []Condition
	// Digest is opaque data the owner stores with the filter (FWPM_FILTER0.providerData)
	// and gets back from Session.Filters; the guard keeps a digest of the rest there so a
	// reinstall leaves unchanged filters alone.
	Digest []byte
}

// Validate reports what Windows would refuse in f before it reaches an engine.
func (f *Filter) Validate() error {
	switch {
	case f.Key.IsZero():
		return fmt.Errorf("filter %q: zero key", f.Name)
	case f.Name == "":
		return fmt.Errorf("filter %v: no name", f.Key)
	case !f.Layer.Valid():
		return fmt.Errorf("filter %q: invalid %v", f.Name, f.Layer)
	case f.Action != Block && f.Action != Permit:
		return fmt.Errorf("filter %q: invalid %v", f.Name, f.Action)
	case f.Persistent && f.BootTime:
		return fmt.Errorf("filter %q: persistent and boot-time are exclusive", f.Name)
	case f.Hard && f.Action != Permit:
		return fmt.Errorf("filter %q: only a permit can be hard", f.Name)
	}
	for _, c := range f.Conditions {
		if err := c.check(f.Layer); err != nil {
			return fmt.Errorf("filter %q: %w", f.Name, err)
		}
	}
	return nil
}

// String renders the filter on one line, for logs and golden files.
func (f *Filter) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s w=%d %s", f.Layer, f.Key, f.Weight, f.Action)
	if f.Hard {
		b.WriteString(" hard")
	}
	switch {
	case f.Persistent:
		b.WriteString(" persistent")
	case f.BootTime:
		b.WriteString(" boot-time")
	default:
		b.WriteString(" session")
	}
	fmt.Fprintf(&b, " %q", f.Name)
	for _, c := range f.Conditions {
		b.WriteString(" ")
		b.WriteString(c.String())
	}
	return b.String()
}
