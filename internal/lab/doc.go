// Package lab builds the router's test world out of Linux network namespaces: an "internet", a
// hypervisor "host" and a VM "guest", wired like a VirtualBox NAT setup, with real servers that
// record what they see. The end-to-end tests, the benchmarks and the routerlab demo share it.
//
//	guest 10.0.2.15/24 (eth0) ── veth ── (vmnet) 10.0.2.2/24  host  198.51.100.2/24 (uplink) ── veth ── (isp0) 198.51.100.1/24  inet
//	      default via 10.0.2.2               ip_forward=1, table ip hvnat masquerade     2001:db8:100::2/64     2001:db8:100::1/64
//	                                         default via 198.51.100.1                                        lo: 203.0.113.10 (services)
//	                                         model server on 127.0.0.1:47831                                 lo: 203.0.113.50 (SOCKS exit)
//
// In "inet": an IP-echo HTTP server (203.0.113.10:80), a DNS server for the lab.test zone
// (203.0.113.10:53, UDP and TCP), a UDP echo (203.0.113.10:7), go-socks5 (198.51.100.1:1080)
// and dante-server (198.51.100.1:1081), both leaving from 203.0.113.50, and an nftables leak
// counter on the uplink; StartTinyproxy adds Debian's tinyproxy, an HTTP CONNECT proxy leaving
// from an exit address of its own, for the tests that want one. In "host": the hypervisor's NAT
// (masquerade in table ip hvnat, removable) and a fake OpenAI-compatible model server on
// 127.0.0.1:47831. Each namespace has /etc/netns/<name>/resolv.conf pointing at the lab DNS
// server, so commands started through Netns.Command resolve names inside the lab.
//
// More guests on demand: AddUserNATGuest puts a namespace behind a real slirp4netns or pasta
// running in "host", and StartQEMUGuest (Linux) boots a real QEMU virtual machine (TCG, the
// machine's kernel, a busybox initramfs) on QEMU's own -netdev user in "host", which the test
// drives through its serial console.
//
// Every name carries a per-instance prefix "rl<pid>-<hex>-" so parallel labs and stale runs never
// collide; Cleanup removes what a killed process left behind. The lab needs root and the tools
// ip, nft and danted; on other systems New returns an error (the package still compiles, so
// cross-platform callers build).
//
// Traffic stays inside the lab's namespaces: nothing is routed to the machine's own network.
package lab

// Addresses and names of the lab. They are fixed; the namespaces isolate parallel labs.
const (
	// InetUplinkAddr is the internet side of the uplink: the SOCKS proxies listen here.
	InetUplinkAddr = "198.51.100.1"
	// HostUplinkAddr is the host's own address on the uplink: what a leak looks like.
	HostUplinkAddr = "198.51.100.2"
	// InetUplinkAddr6 and HostUplinkAddr6 are the IPv6 twins (2001:db8:100::/64), so that an
	// IPv6 leak from the host is countable.
	InetUplinkAddr6 = "2001:db8:100::1"
	HostUplinkAddr6 = "2001:db8:100::2"
	// ServiceAddr (on inet's lo) carries the echo, DNS and UDP echo servers.
	ServiceAddr = "203.0.113.10"
	// ExitAddr (on inet's lo) is the address the SOCKS proxies connect from.
	ExitAddr = "203.0.113.50"
	// GatewayAddr is the host's VM-facing address (the hypervisor's NAT gateway).
	GatewayAddr = "10.0.2.2"
	// GuestAddr is the guest's address; GuestNetwork its subnet.
	GuestAddr    = "10.0.2.15"
	GuestNetwork = "10.0.2.0/24"

	// EchoURL answers the client's address as text; EchoURL+"json" as {"ip": "..."}.
	// EchoTLSURL is the same echo over HTTPS (with Options.EchoTLS), with a certificate for
	// EchoName signed by a CA of the lab's own (Lab.EchoCAPEM); both record in HTTPLog.
	EchoURL    = "http://203.0.113.10/"
	EchoTLSURL = "https://" + EchoName + "/"
	// EchoName resolves to ServiceAddr in the lab DNS; WhoamiName resolves to the asker's
	// source address (A or AAAA, and TXT "addr:port"). HTTPS/SVCB and AAAA of EchoName are
	// empty answers (NOERROR, no data); LoopName answers loopback, the HomeNames their
	// address of the host or of the second guest; other names under
	// lab.test are NXDOMAIN; names outside lab.test are REFUSED.
	EchoName   = "echo.lab.test"
	WhoamiName = "whoami.lab.test"
	// DNSAddr is the lab resolver (UDP and TCP), also in every namespace's resolv.conf.
	DNSAddr = "203.0.113.10:53"
	// SilentZone's names are never answered by the lab resolver (it reads the query and
	// says nothing), as a name whose servers are down.
	SilentZone = "silent.lab.test."
	// UDPEchoAddr answers each datagram with the sender's address as "ip:port", except a
	// datagram "size:N" (N from 1 to 65,507), answered with N bytes of SizedAnswer(N). It
	// reads datagrams of any size whole (Len in UDPLog).
	UDPEchoAddr = "203.0.113.10:7"
	// GoSocksAddr is go-socks5 v0.1.0 (optional user/password, see Options); DanteAddr is
	// Debian's danted (no authentication). Both connect out from ExitAddr and resolve names
	// through the lab DNS.
	GoSocksAddr = "198.51.100.1:1080"
	DanteAddr   = "198.51.100.1:1081"

	// ModelAddr is the fake model server in the host namespace (loopback only); ModelID is
	// the one model it lists.
	ModelAddr = "127.0.0.1:47831"
	ModelID   = "strata-lab-model"
)

// Interface names inside the namespaces.
const (
	HostUplinkDev = "uplink" // host, towards inet
	HostVMDev     = "vmnet"  // host, towards the guest
	InetUplinkDev = "isp0"   // inet, towards the host
	GuestDev      = "eth0"   // guest, towards the host
)

// nft table names. The leak table lives in inet, the hypervisor NAT table in host.
const (
	LeakTable = "rl_leak" // family inet; set proxy_ports holds the ports that are not leaks
	NATTable  = "hvnat"   // family ip
)
