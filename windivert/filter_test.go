package windivert

import (
	"net/netip"
	"strings"
	"testing"
)

// testExclusions is the Exclusions value the golden filters are rendered with.
func testExclusions() Exclusions {
	return Exclusions{
		ListenerPorts: []uint16{34010},
		SrcPorts:      []PortRange{{60000, 60999}},
		Upstreams:     []netip.AddrPort{netip.MustParseAddrPort("198.51.100.1:1080"), netip.MustParseAddrPort("[2001:db8::1]:1080")},
		PIDs:          []uint32{4242},
		LocalDsts:     []netip.Prefix{netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fe80::/10")},
	}
}

const (
	goldLinkLocal = "(remoteAddr < 169.254.0.0 or remoteAddr > 169.254.255.255) and " +
		"(remoteAddr < fe80:: or remoteAddr > febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff)"
	goldEx = "localPort != 34010 and (localPort < 60000 or localPort > 60999) and " +
		"(remoteAddr != 198.51.100.1 or remotePort != 1080) and (remoteAddr != 2001:db8::1 or remotePort != 1080)"
)

// NamedFilter is one filter the engine opens, with the layer it is opened at.
type namedFilter struct {
	name   string
	layer  Layer
	filter Filter
	golden string
}

func namedFilters() []namedFilter {
	ex := testExclusions()
	return []namedFilter{
		{"OutboundSYN", LayerNetwork, OutboundSYN(ex),
			"outbound and !loopback and tcp.Syn and tcp.Ack == 0 and " + goldLinkLocal + " and " + goldEx},
		{"OutboundSYN no exclusions", LayerNetwork, OutboundSYN(Exclusions{}),
			"outbound and !loopback and tcp.Syn and tcp.Ack == 0"},
		{"OutboundTCP", LayerNetwork, OutboundTCP(ex),
			"outbound and !loopback and tcp and " + goldLinkLocal + " and " + goldEx},
		{"ReflectBack", LayerNetwork, ReflectBack(34010),
			"outbound and !loopback and tcp and tcp.SrcPort == 34010"},
		{"ReflectBack two ports", LayerNetwork, ReflectBack(34010, 34011),
			"outbound and !loopback and tcp and (tcp.SrcPort == 34010 or tcp.SrcPort == 34011)"},
		{"ListenerGuard", LayerNetwork, ListenerGuard(34010),
			"inbound and !loopback and tcp and tcp.DstPort == 34010"},
		{"DNSQueries", LayerNetwork, DNSQueries(ex),
			"outbound and !loopback and (udp.DstPort == 53 or tcp.DstPort == 53) and " + goldEx},
		{"SocketConnects", LayerSocket, SocketConnects(ex),
			"(event == CONNECT or event == CLOSE) and (tcp or udp or icmp or icmpv6) and !loopback and processId != 4242 and " + goldEx},
		{"SocketConnects no exclusions", LayerSocket, SocketConnects(Exclusions{}),
			"(event == CONNECT or event == CLOSE) and (tcp or udp or icmp or icmpv6) and !loopback"},
	}
}

func TestNamedFiltersGolden(t *testing.T) {
	for _, nf := range namedFilters() {
		t.Run(nf.name, func(t *testing.T) {
			if got := nf.filter.String(); got != nf.golden {
				t.Errorf("got  %s\nwant %s", got, nf.golden)
			}
			if err := nf.filter.Check(nf.layer); err != nil {
				t.Errorf("Check(%s): %v", nf.layer, err)
			}
			if !strings.Contains(nf.golden, "!loopback") {
				t.Errorf("filter does not exclude loopback")
			}
		})
	}
	if got := ReflectBack().String(); got != "false" {
		t.Errorf("ReflectBack() = %q, want false", got)
	}
}

func TestBuilderGolden(t *testing.T) {
	p := netip.MustParsePrefix
	tests := []struct {
		name string
		f    Filter
		want string
	}{
		{"true", True(), "true"},
		{"false", False(), "false"},
		{"empty and", And(), "true"},
		{"empty or", Or(), "false"},
		{"and drops true", And(True(), FieldTCP.Is()), "tcp"},
		{"and absorbs false", And(FieldTCP.Is(), False()), "false"},
		{"or absorbs true", Or(FieldTCP.Is(), True()), "true"},
		{"or drops false", Or(False(), FieldUDP.Is()), "udp"},
		{"flatten", And(FieldOutbound.Is(), And(FieldTCP.Is(), FieldTCPSyn.Is())), "outbound and tcp and tcp.Syn"},
		{"or in and", And(FieldOutbound.Is(), Or(FieldTCP.Is(), FieldUDP.Is())), "outbound and (tcp or udp)"},
		{"and in or", Or(And(FieldIP.Is(), FieldTCP.Is()), FieldIPv6.Is()), "(ip and tcp) or ipv6"},
		{"not total flag", Not(FieldLoopback.Is()), "!loopback"},
		{"not total compare", Not(FieldProcessID.EqNum(4)), "processId != 4"},
		{"not total lt", Not(FieldRemotePort.Cmp(OpLt, Num(1024))), "remotePort >= 1024"},
		{"not header test uses ternary", Not(FieldTCPDstPort.EqNum(80)), "(tcp.DstPort == 80 ? false : true)"},
		{"not header flag uses ternary", Not(FieldTCPSyn.Is()), "(tcp.Syn ? false : true)"},
		{"not not", Not(Not(FieldTCPDstPort.EqNum(80))), "tcp.DstPort == 80"},
		{"not mixed and", Not(And(FieldIPDstAddr.Eq(IP(netip.MustParseAddr("192.0.2.1"))), FieldTCPDstPort.EqNum(1080))),
			"(ip.DstAddr == 192.0.2.1 and tcp.DstPort == 1080 ? false : true)"},
		{"not total and: De Morgan", Not(And(FieldRemotePort.EqNum(1), FieldLocalPort.EqNum(2))), "remotePort != 1 or localPort != 2"},
		{"not true", Not(True()), "false"},
		{"if", If(FieldTCP.Is(), FieldTCPDstPort.EqNum(80), FieldUDPDstPort.EqNum(53)), "(tcp ? tcp.DstPort == 80 : udp.DstPort == 53)"},
		{"if true", If(True(), FieldTCP.Is(), FieldUDP.Is()), "tcp"},
		{"range", FieldTCPDstPort.InRange(8000, 9000), "tcp.DstPort >= 8000 and tcp.DstPort <= 9000"},
		{"range one", FieldTCPDstPort.InRange(443, 443), "tcp.DstPort == 443"},
		{"range empty", FieldTCPDstPort.InRange(9, 8), "false"},
		{"v4 prefix", DstAddr.InPrefix(p("10.0.0.0/8")), "ip.DstAddr >= 10.0.0.0 and ip.DstAddr <= 10.255.255.255"},
		{"v4 prefix unmasked", SrcAddr.InPrefix(p("10.0.2.15/24")), "ip.SrcAddr >= 10.0.2.0 and ip.SrcAddr <= 10.0.2.255"},
		{"v4 host", DstAddr.InPrefix(p("192.0.2.7/32")), "ip.DstAddr == 192.0.2.7"},
		{"v4 any", DstAddr.InPrefix(p("0.0.0.0/0")), "ip"},
		{"v4 odd bits", RemoteAddr.InPrefix(p("192.0.2.128/25")), "remoteAddr >= 192.0.2.128 and remoteAddr <= 192.0.2.255"},
		{"v6 prefix", DstAddr.InPrefix(p("2001:db8::/32")), "ipv6.DstAddr >= 2001:db8:: and ipv6.DstAddr <= 2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"},
		{"v6 prefix /60", SrcAddr.InPrefix(p("2001:db8:0:10::/60")), "ipv6.SrcAddr >= 2001:db8:0:10:: and ipv6.SrcAddr <= 2001:db8:0:1f:ffff:ffff:ffff:ffff"},
		{"v6 host", LocalAddr.InPrefix(p("fd00::2/128")), "localAddr == fd00::2"},
		{"v6 any", DstAddr.InPrefix(p("::/0")), "ipv6"},
		{"mapped addr eq is v4", DstAddr.Eq(netip.MustParseAddr("::ffff:192.0.2.1")), "ip.DstAddr == 192.0.2.1"},
		{"zone dropped", RemoteAddr.Eq(netip.MustParseAddr("fe80::1%eth0")), "remoteAddr == fe80::1"},
		{"any prefix", DstAddr.InAnyPrefix(p("10.0.0.0/8"), p("fd00::/8")),
			"(ip.DstAddr >= 10.0.0.0 and ip.DstAddr <= 10.255.255.255) or (ipv6.DstAddr >= fd00:: and ipv6.DstAddr <= fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff)"},
		{"any prefix none", DstAddr.InAnyPrefix(), "false"},
		{"macro", FieldEvent.Eq(MacroConnect), "event == CONNECT"},
		{"negative int", FieldPriority.Cmp(OpGt, Int(-100)), "priority > -100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.f.String(); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestFilterCheck(t *testing.T) {
	tests := []struct {
		name    string
		f       Filter
		layer   Layer
		wantErr string
	}{
		{"processId at NETWORK", FieldProcessID.EqNum(1), LayerNetwork, `"processId" does not exist at layer NETWORK`},
		{"tcp.DstPort at SOCKET", FieldTCPDstPort.EqNum(1), LayerSocket, `"tcp.DstPort" does not exist at layer SOCKET`},
		{"outbound at SOCKET", And(FieldTCP.Is(), FieldOutbound.Is()), LayerSocket, `"outbound" does not exist`},
		{"unknown field", Field("bogus").Is(), LayerNetwork, `unknown filter field "bogus"`},
		{"nested in ternary", Not(And(FieldIPDstAddr.EqNum(1), FieldLayer.EqNum(1))), LayerNetwork, `"layer" does not exist`},
		{"remoteAddr at NETWORK ok", RemoteAddr.InPrefix(netip.MustParsePrefix("10.0.0.0/8")), LayerNetwork, ""},
		{"packet index ok", Field("packet[0]").EqNum(0x45), LayerNetwork, ""},
		{"processId at REFLECT ok", FieldProcessID.EqNum(1), LayerReflect, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.f.Check(tt.layer)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Check = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Check = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}
