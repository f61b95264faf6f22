package conf

import (
	"net/netip"
	"time"

	"github.com/agentcage/router/rules/modelapi"
)

// This file is the one source of every default: the daemon, the capture, the DNS server and
// the docs take theirs from here.

// Defaults for keys the file leaves out.
const (
	DefaultListenerPort   = 47100 // [capture] listener_port: the transparent TCP listener
	DefaultDNSPort        = 47153 // [capture] dns_port: where captured DNS is answered
	DefaultUDPPort        = 47101 // [capture] udp_port: the transparent UDP socket (Linux)
	DefaultMark           = 0x524f5554
	DefaultTable          = "router"
	DefaultDNSMode        = DNSFakeIP
	DefaultDNSTransport   = DNSOverTCP
	DefaultProxyType      = ProxySOCKS5
	DefaultResolver       = "1.1.1.1:53"
	DefaultFakeTTL        = 10 * time.Second
	DefaultIdleTimeout    = 15 * time.Minute // long enough for a model that thinks for minutes
	DefaultConnectTimeout = 10 * time.Second
	// DefaultSockmap is off: on this project's benchmark (a 6.18 kernel) a download through
	// the sockmap was slower and cost more CPU than the splice relay (the kernel sends what
	// it redirects from a work queue that retries a full socket a jiffy later, and a
	// receiver that falls behind makes the router copy). See Relay.Sockmap.
	DefaultSockmap   = false
	DefaultLogLevel  = "info"
	DefaultLogFormat = "text"
	// DefaultMaxBody is a forward's max_body: 64 MiB holds a batch of 2,048 embedding
	// inputs of 8,000 tokens each (about 32 MB of JSON text) or a chat with a few base64
	// images at OpenAI's 20 MB per image, and still stops a guest from streaming gigabytes
	// into the model server's memory.
	DefaultMaxBody = 64 << 20
	// DefaultForwardIdleTimeout is an HTTP forward's idle_timeout: how long a guest's
	// connection may wait between two requests. It runs between requests only (never while a
	// model thinks or streams), so it can be short: a client's keep-alive reuse within it
	// still saves a connect, and a guest's idle connections give their slots back soon.
	DefaultForwardIdleTimeout = 2 * time.Minute
	// DefaultAskTimeout is how long a flow held under ask waits for an answer. The
	// client's connection was accepted at once, so what runs meanwhile is its wait for a
	// first answer, which most clients allow 30 s or more (curl and Go none by default; pip
	// 15 s, so a pip behind a prompt needs a quick click or a longer --timeout). 30 s gives
	// someone watching the time to read a prompt and click, and fails an unanswered step
	// soon instead of hanging the agent.
	DefaultAskTimeout = 30 * time.Second
	// MaxAskTimeout bounds [policy] ask_timeout.
	MaxAskTimeout = 10 * time.Minute
	// DefaultApproved is the router's own rules file, beside the config.
	DefaultApproved = "approved.toml"
	// DefaultConsoleListen is the address docs give for [console] listen (off unless set).
	DefaultConsoleListen = "127.0.0.1:9478"
	// DefaultMaxHeldPerSource and DefaultMaxHeld bound the flows held under ask: a source
	// past its share, or any past the total, is refused at once (reason ask-denied).
	DefaultMaxHeldPerSource = 64
	DefaultMaxHeld          = 1024
)

// DefaultForwardAPI is a forward's api when the key is left out: the OpenAI-compatible and
// the Ollama inference calls. A raw pipe ("tcp") is never a default.
func DefaultForwardAPI() []modelapi.Kind { return modelapi.Default() }

// The Linux UDP capture's policy routing (not keys): TPROXY marks the UDP it hands to the
// router with UDPCaptureMark, and a rule "fwmark UDPCaptureMark lookup UDPRouteTable" delivers
// it locally through the one route of that table, "local default dev lo". The mark must differ
// from [capture] mark (conf refuses a mark equal to it).
const (
	UDPCaptureMark = 0x524f5550 // "ROUP"
	UDPRouteTable  = 0x524f     // 21071
)

// CagedSocketMark (not a key) is the socket mark the Linux kernel puts on every socket a
// caged process opens (the apps of proxy and block rules, the hypervisor presets' apps), so
// that nftables captures them, loopback included. It must differ from [capture] mark.
const CagedSocketMark = 0x52434147 // "RCAG"

// DefaultDNSCapture is [dns] capture's default, which depends on [capture] local: "all"
// with local = true (this host's own DNS is captured too), "caged" without.
func DefaultDNSCapture(local bool) string {
	if local {
		return DNSCaptureAll
	}
	return DNSCaptureCaged
}

// DefaultName is the name of a forward or an inbound that the file names name: name itself,
// or when empty its listen address ("192.168.56.1:47831"), which logs, status and refusals
// show.
func DefaultName(name string, listen netip.AddrPort) string {
	if name == "" && listen.IsValid() {
		return listen.String()
	}
	return name
}

// DefaultPool is the fake-IP pool (RFC 2544 benchmarking space, never routed).
func DefaultPool() netip.Prefix { return netip.MustParsePrefix("198.18.0.0/15") }
