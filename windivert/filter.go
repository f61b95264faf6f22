package windivert

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/agentcage/router/internal/netaddr"
)

// Filter is an immutable expression of the WinDivert filter language (doc/windivert.html §7
// of WinDivert 2.2.2), built with And, Or, Not and field tests, and rendered by String.
// The zero Filter is "true".
//
// Rendering rules, which matter because of how WinDivert evaluates:
//   - A test of a header field that the packet lacks fails ("tcp.DstPort == 80" is false for
//     UDP), and WinDivert's "not" only inverts the comparison of one test. So Not of a
//     header-field test, or of a compound expression, is rendered as the exact Boolean
//     negation "(X? false: true)"; Not of a field that every packet has (outbound,
//     loopback, tcp, processId, ...) becomes "!field" or the inverted comparison.
//   - And and Or flatten nested operands of the same kind, drop neutral "true"/"false"
//     operands and fold absorbing ones, and parenthesise compound operands.
type Filter struct{ n *node }

type nodeKind uint8

const (
	kTrue nodeKind = iota
	kFalse
	kTest
	kAnd
	kOr
	kIf // ternary: args[0] ? args[1] : args[2]
)

type node struct {
	kind  nodeKind
	field Field
	op    Op
	val   Value
	args  []Filter
}

// Op is a comparison operator of the filter language.
type Op string

// Comparison operators.
const (
	OpEq Op = "=="
	OpNe Op = "!="
	OpLt Op = "<"
	OpLe Op = "<="
	OpGt Op = ">"
	OpGe Op = ">="
	opIs Op = "" // implicit "!= 0"
)

func (o Op) invert() Op {
	switch o {
	case OpEq:
		return OpNe
	case OpNe:
		return OpEq
	case OpLt:
		return OpGe
	case OpLe:
		return OpGt
	case OpGt:
		return OpLe
	case OpGe:
		return OpLt
	}
	return o
}

// Value is the right-hand side of a comparison: a number, an address or a macro. Build it
// with Num, IP or the Macro* constants; other strings are not checked.
type Value string

// Num is a decimal number value.
func Num(n uint64) Value { return Value(strconv.FormatUint(n, 10)) }

// Int is a signed decimal number value (priorities may be negative).
func Int(n int64) Value { return Value(strconv.FormatInt(n, 10)) }

// IP is an IPv4 or IPv6 address value (a zone is dropped). WinDivert compares IPv4 values
// as ::ffff:a.b.c.d against localAddr/remoteAddr, and ip.SrcAddr/ip.DstAddr only with IPv4.
func IP(a netip.Addr) Value { return Value(a.WithZone("").String()) }

// Macros of the filter language ("Layer-specific macros", doc §7).
const (
	MacroTCP         Value = "TCP"
	MacroUDP         Value = "UDP"
	MacroICMP        Value = "ICMP"
	MacroICMPv6      Value = "ICMPV6"
	MacroPacket      Value = "PACKET"
	MacroEstablished Value = "ESTABLISHED"
	MacroDeleted     Value = "DELETED"
	MacroBind        Value = "BIND"
	MacroConnect     Value = "CONNECT"
	MacroAccept      Value = "ACCEPT"
	MacroListen      Value = "LISTEN"
	MacroOpen        Value = "OPEN"
	MacroClose       Value = "CLOSE"
	MacroNetwork     Value = "NETWORK"
	MacroForward     Value = "NETWORK_FORWARD"
	MacroFlow        Value = "FLOW"
	MacroSocket      Value = "SOCKET"
	MacroReflect     Value = "REFLECT"
)

// Field is a field of the filter language.
type Field string

// Fields (doc/windivert.html §7, and the token table of dll/windivert_helper.c).
const (
	FieldTimestamp        Field = "timestamp"
	FieldEvent            Field = "event"
	FieldOutbound         Field = "outbound"
	FieldInbound          Field = "inbound"
	FieldIfIdx            Field = "ifIdx"
	FieldSubIfIdx         Field = "subIfIdx"
	FieldLoopback         Field = "loopback"
	FieldImpostor         Field = "impostor"
	FieldFragment         Field = "fragment"
	FieldEndpointID       Field = "endpointId"
	FieldParentEndpointID Field = "parentEndpointId"
	FieldProcessID        Field = "processId"
	FieldLayer            Field = "layer"
	FieldPriority         Field = "priority"
	FieldLength           Field = "length"
	FieldIP               Field = "ip"
	FieldIPv6             Field = "ipv6"
	FieldICMP             Field = "icmp"
	FieldICMPv6           Field = "icmpv6"
	FieldTCP              Field = "tcp"
	FieldUDP              Field = "udp"
	FieldProtocol         Field = "protocol"
	FieldLocalAddr        Field = "localAddr"
	FieldLocalPort        Field = "localPort"
	FieldRemoteAddr       Field = "remoteAddr"
	FieldRemotePort       Field = "remotePort"
	FieldIPSrcAddr        Field = "ip.SrcAddr"
	FieldIPDstAddr        Field = "ip.DstAddr"
	FieldIPProtocol       Field = "ip.Protocol"
	FieldIPTTL            Field = "ip.TTL"
	FieldIPv6SrcAddr      Field = "ipv6.SrcAddr"
	FieldIPv6DstAddr      Field = "ipv6.DstAddr"
	FieldIPv6NextHdr      Field = "ipv6.NextHdr"
	FieldTCPSrcPort       Field = "tcp.SrcPort"
	FieldTCPDstPort       Field = "tcp.DstPort"
	FieldTCPSyn           Field = "tcp.Syn"
	FieldTCPAck           Field = "tcp.Ack"
	FieldTCPFin           Field = "tcp.Fin"
	FieldTCPRst           Field = "tcp.Rst"
	FieldTCPPayloadLength Field = "tcp.PayloadLength"
	FieldUDPSrcPort       Field = "udp.SrcPort"
	FieldUDPDstPort       Field = "udp.DstPort"
	FieldUDPPayloadLength Field = "udp.PayloadLength"
	FieldICMPType         Field = "icmp.Type"
	FieldICMPv6Type       Field = "icmpv6.Type"
)

// layerMask has bit 1<<Layer set for each layer where a field exists.
type layerMask uint8

const (
	mNet   = layerMask(1 << LayerNetwork)
	mFwd   = layerMask(1 << LayerNetworkForward)
	mFlow  = layerMask(1 << LayerFlow)
	mSock  = layerMask(1 << LayerSocket)
	mRefl  = layerMask(1 << LayerReflect)
	mAll   = mNet | mFwd | mFlow | mSock | mRefl
	mPkt   = mNet | mFwd
	mProto = mNet | mFwd | mFlow | mSock
)

// fieldInfo returns the layers where f exists (the field table of doc §7) and whether every
// packet or event at those layers has a value for it (header fields such as tcp.DstPort
// exist only in packets that have the header; a test on them fails otherwise). ok is
// false for an unknown field.
func fieldInfo(f Field) (layers layerMask, total, ok bool) {
	switch f {
	case "zero", FieldTimestamp, FieldEvent, "true", "false":
		return mAll, true, true
	case FieldOutbound, FieldInbound:
		return mNet | mFlow, true, true
	case FieldIfIdx, FieldSubIfIdx, FieldImpostor, FieldFragment, FieldLength,
		"random8", "random16", "random32":
		return mPkt, true, true
	case FieldLoopback:
		return mNet | mFlow | mSock, true, true
	case FieldEndpointID, FieldParentEndpointID:
		return mFlow | mSock, true, true
	case FieldProcessID:
		return mFlow | mSock | mRefl, true, true
	case FieldLayer, FieldPriority:
		return mRefl, true, true
	case FieldIP, FieldIPv6, FieldICMP, FieldICMPv6, FieldTCP, FieldUDP:
		return mProto, true, true
	case FieldProtocol, FieldLocalAddr, FieldLocalPort, FieldRemoteAddr, FieldRemotePort:
		return mNet | mFlow | mSock, true, true
	}
	s := string(f)
	for _, p := range []string{"ip.", "ipv6.", "icmp.", "icmpv6.", "tcp.", "udp.", "packet"} {
		if strings.HasPrefix(s, p) && len(s) > len(p) || s == "packet" {
			return mPkt, false, true
		}
	}
	return 0, false, false
}

// True is the filter that matches everything.
func True() Filter { return Filter{} }

// False is the filter that matches nothing (a handle used only to inject opens with it).
func False() Filter { return Filter{&node{kind: kFalse}} }

func (f Filter) kind() nodeKind {
	if f.n == nil {
		return kTrue
	}
	return f.n.kind
}

// Is is the test "field" (field != 0): for flags such as outbound, tcp, tcp.Syn.
func (f Field) Is() Filter { return Filter{&node{kind: kTest, field: f, op: opIs}} }

// Cmp is the test "field op value".
func (f Field) Cmp(op Op, v Value) Filter {
	return Filter{&node{kind: kTest, field: f, op: op, val: v}}
}

// Eq is "field == v".
func (f Field) Eq(v Value) Filter { return f.Cmp(OpEq, v) }

// Ne is "field != v".
func (f Field) Ne(v Value) Filter { return f.Cmp(OpNe, v) }

// EqNum is "field == n".
func (f Field) EqNum(n uint64) Filter { return f.Cmp(OpEq, Num(n)) }

// InRange is "lo <= field <= hi" for numbers (ports): "field == lo" when lo == hi, False
// when lo > hi.
func (f Field) InRange(lo, hi uint64) Filter {
	switch {
	case lo > hi:
		return False()
	case lo == hi:
		return f.Cmp(OpEq, Num(lo))
	}
	return And(f.Cmp(OpGe, Num(lo)), f.Cmp(OpLe, Num(hi)))
}

// AddrField names an address of the packet or event, which the filter language spells per
// family at the NETWORK layers (ip.DstAddr / ipv6.DstAddr) and once at the FLOW, SOCKET
// and NETWORK layers (remoteAddr).
type AddrField uint8

// Address fields.
const (
	SrcAddr    AddrField = iota // ip.SrcAddr or ipv6.SrcAddr (NETWORK, NETWORK_FORWARD)
	DstAddr                     // ip.DstAddr or ipv6.DstAddr (NETWORK, NETWORK_FORWARD)
	LocalAddr                   // localAddr (NETWORK, FLOW, SOCKET)
	RemoteAddr                  // remoteAddr (NETWORK, FLOW, SOCKET)
)

func (a AddrField) field(v4 bool) Field {
	switch a {
	case SrcAddr:
		if v4 {
			return FieldIPSrcAddr
		}
		return FieldIPv6SrcAddr
	case DstAddr:
		if v4 {
			return FieldIPDstAddr
		}
		return FieldIPv6DstAddr
	case LocalAddr:
		return FieldLocalAddr
	}
	return FieldRemoteAddr
}

// Eq is "address == a". For ip.*/ipv6.* the packet must be of a's family (an IPv4-mapped
// a counts as IPv4).
func (a AddrField) Eq(addr netip.Addr) Filter {
	addr = addr.Unmap()
	return a.field(addr.Is4()).Eq(IP(addr))
}

// InPrefix is "address within p" as a range test: "first <= address <= last". A
// single-address prefix is an equality; a /0 prefix is the family test ("ip" or "ipv6").
// An IPv4-mapped IPv6 prefix is treated as IPv6; use an IPv4 prefix for IPv4 traffic.
func (a AddrField) InPrefix(p netip.Prefix) Filter {
	p = p.Masked()
	if !p.IsValid() {
		return False()
	}
	v4 := p.Addr().Is4()
	if p.Bits() == 0 {
		if v4 {
			return FieldIP.Is()
		}
		return FieldIPv6.Is()
	}
	first := p.Addr()
	if p.IsSingleIP() {
		return a.field(v4).Eq(IP(first))
	}
	f := a.field(v4)
	return And(f.Cmp(OpGe, IP(first)), f.Cmp(OpLe, IP(netaddr.LastAddr(p))))
}

// InAnyPrefix is InPrefix for a set of prefixes, or'ed (False for none).
func (a AddrField) InAnyPrefix(ps ...netip.Prefix) Filter {
	fs := make([]Filter, 0, len(ps))
	for _, p := range ps {
		fs = append(fs, a.InPrefix(p))
	}
	return Or(fs...)
}

// And is the conjunction of fs; And() is True.
func And(fs ...Filter) Filter { return join(kAnd, fs) }

// Or is the disjunction of fs; Or() is False.
func Or(fs ...Filter) Filter { return join(kOr, fs) }

func join(k nodeKind, fs []Filter) Filter {
	neutral, absorbing := kTrue, kFalse
	if k == kOr {
		neutral, absorbing = kFalse, kTrue
	}
	var args []Filter
	for _, f := range fs {
		switch f.kind() {
		case neutral:
			continue
		case absorbing:
			return f
		case k:
			args = append(args, f.n.args...)
		default:
			args = append(args, f)
		}
	}
	switch len(args) {
	case 0:
		if k == kOr {
			return False()
		}
		return True()
	case 1:
		return args[0]
	}
	return Filter{&node{kind: k, args: args}}
}

// Not is the exact Boolean negation of f (see the rendering rules on Filter).
func Not(f Filter) Filter {
	switch f.kind() {
	case kTrue:
		return False()
	case kFalse:
		return True()
	case kTest:
		if _, total, ok := fieldInfo(f.n.field); ok && total {
			n := *f.n
			if n.op == opIs {
				n.op, n.val = OpEq, "0"
			} else {
				n.op = n.op.invert()
			}
			return Filter{&n}
		}
	case kAnd, kOr:
		if allTotal(f) { // De Morgan is exact when no operand can fail for a missing header
			args := make([]Filter, len(f.n.args))
			for i, a := range f.n.args {
				args[i] = Not(a)
			}
			if f.kind() == kAnd {
				return Or(args...)
			}
			return And(args...)
		}
	case kIf:
		a := f.n.args
		if a[1].kind() == kFalse && a[2].kind() == kTrue {
			return a[0] // Not(Not(x))
		}
	}
	return If(f, False(), True())
}

// allTotal reports whether f is built only of tests on fields that every packet or event has.
func allTotal(f Filter) bool {
	switch f.kind() {
	case kTrue, kFalse:
		return true
	case kTest:
		_, total, ok := fieldInfo(f.n.field)
		return ok && total
	case kAnd, kOr:
		for _, a := range f.n.args {
			if !allTotal(a) {
				return false
			}
		}
		return true
	}
	return false
}

// If is the conditional "(cond? then: els)".
func If(cond, then, els Filter) Filter {
	switch cond.kind() {
	case kTrue:
		return then
	case kFalse:
		return els
	}
	return Filter{&node{kind: kIf, args: []Filter{cond, then, els}}}
}

// String renders f in the WinDivert filter language.
func (f Filter) String() string {
	var sb strings.Builder
	f.render(&sb, false)
	return sb.String()
}

func (f Filter) render(sb *strings.Builder, nested bool) {
	switch f.kind() {
	case kTrue:
		sb.WriteString("true")
	case kFalse:
		sb.WriteString("false")
	case kTest:
		n := f.n
		switch {
		case n.op == opIs:
			sb.WriteString(string(n.field))
		case n.op == OpEq && n.val == "0":
			if _, total, _ := fieldInfo(n.field); total {
				sb.WriteString("!" + string(n.field))
				return
			}
			fallthrough
		default:
			fmt.Fprintf(sb, "%s %s %s", n.field, n.op, n.val)
		}
	case kAnd, kOr:
		sep := " and "
		if f.kind() == kOr {
			sep = " or "
		}
		if nested {
			sb.WriteByte('(')
		}
		for i, a := range f.n.args {
			if i > 0 {
				sb.WriteString(sep)
			}
			a.render(sb, true)
		}
		if nested {
			sb.WriteByte(')')
		}
	case kIf:
		a := f.n.args
		sb.WriteByte('(')
		a[0].render(sb, false)
		sb.WriteString(" ? ")
		a[1].render(sb, true)
		sb.WriteString(" : ")
		a[2].render(sb, true)
		sb.WriteByte(')')
	}
}

// Check reports the first field of f that does not exist at layer, following the field
// table of doc §7 (the DLL's CompileFilter is the final judge, and also catches values).
func (f Filter) Check(layer Layer) error {
	switch f.kind() {
	case kTest:
		m, _, ok := fieldInfo(f.n.field)
		if !ok {
			return fmt.Errorf("unknown filter field %q", f.n.field)
		}
		if m&(1<<layer) == 0 {
			return fmt.Errorf("filter field %q does not exist at layer %s", f.n.field, layer)
		}
	case kAnd, kOr, kIf:
		for _, a := range f.n.args {
			if err := a.Check(layer); err != nil {
				return err
			}
		}
	}
	return nil
}

// FilterError is a filter that WinDivert refused, with its message and the byte position
// where the DLL's compiler stopped.
type FilterError struct {
	Filter string
	Layer  Layer
	Pos    int
	Msg    string
}

func (e *FilterError) Error() string {
	return fmt.Sprintf("windivert: filter %q for layer %s: %s (at position %d)", e.Filter, e.Layer, e.Msg, e.Pos)
}
