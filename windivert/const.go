// Package windivert is a small binding over WinDivert 2.2 (basil00/WinDivert, the user-mode
// WinDivert.dll and its signed kernel driver WinDivert64.sys), written with
// golang.org/x/sys/windows and no cgo.
//
// The package is split so that most of it compiles and is tested on every OS:
//   - constants, the WINDIVERT_ADDRESS mirror (Address), the filter-language builder
//     (Filter) and the named filters of the redirect engine, the error table (Errno), the
//     pinned-file installer (Install, VerifyDir), and the Handle type with its contract,
//     which runs over a Driver (the raw DLL calls) so that fakes can stand in;
//   - windows/amd64 only: DLL (loads WinDivert.dll by absolute path after checking its SHA-256 and
//     that of WinDivert64.sys beside it) which implements Driver and the helpers
//     (CompileFilter, EvalFilter, CalcChecksums).
//
// Constants, structure layouts and numbers are those of include/windivert.h of WinDivert
// 2.2.2 (tag v2.2.2, 2022-09-17); the comments cite the C names. WinDivert is licensed
// under the LGPL v3 or the GPL v2 at the user's choice; this package uses the unmodified
// DLL through LoadLibrary and re-declares only the numerical parameters and data layouts of
// its header (LGPL v3 §3). The DLL and driver are shipped as separate, replaceable files.
package windivert

import "fmt"

// Layer is a WinDivert layer (WINDIVERT_LAYER).
type Layer uint32

// Layers (WINDIVERT_LAYER_*).
const (
	LayerNetwork        Layer = 0 // WINDIVERT_LAYER_NETWORK: packets to/from this host
	LayerNetworkForward Layer = 1 // WINDIVERT_LAYER_NETWORK_FORWARD: forwarded packets
	LayerFlow           Layer = 2 // WINDIVERT_LAYER_FLOW: flow established/deleted events
	LayerSocket         Layer = 3 // WINDIVERT_LAYER_SOCKET: bind/connect/listen/accept/close
	LayerReflect        Layer = 4 // WINDIVERT_LAYER_REFLECT: WinDivert handles opened/closed
)

func (l Layer) String() string {
	switch l {
	case LayerNetwork:
		return "NETWORK"
	case LayerNetworkForward:
		return "NETWORK_FORWARD"
	case LayerFlow:
		return "FLOW"
	case LayerSocket:
		return "SOCKET"
	case LayerReflect:
		return "REFLECT"
	}
	return fmt.Sprintf("Layer(%d)", uint32(l))
}

// Event is a WinDivert event (WINDIVERT_EVENT), carried in Address.Event.
type Event uint8

// Events (WINDIVERT_EVENT_*).
const (
	EventNetworkPacket   Event = 0 // WINDIVERT_EVENT_NETWORK_PACKET
	EventFlowEstablished Event = 1 // WINDIVERT_EVENT_FLOW_ESTABLISHED
	EventFlowDeleted     Event = 2 // WINDIVERT_EVENT_FLOW_DELETED
	EventSocketBind      Event = 3 // WINDIVERT_EVENT_SOCKET_BIND
	EventSocketConnect   Event = 4 // WINDIVERT_EVENT_SOCKET_CONNECT
	EventSocketListen    Event = 5 // WINDIVERT_EVENT_SOCKET_LISTEN
	EventSocketAccept    Event = 6 // WINDIVERT_EVENT_SOCKET_ACCEPT
	EventSocketClose     Event = 7 // WINDIVERT_EVENT_SOCKET_CLOSE
	EventReflectOpen     Event = 8 // WINDIVERT_EVENT_REFLECT_OPEN
	EventReflectClose    Event = 9 // WINDIVERT_EVENT_REFLECT_CLOSE
)

func (e Event) String() string {
	switch e {
	case EventNetworkPacket:
		return "PACKET"
	case EventFlowEstablished:
		return "ESTABLISHED"
	case EventFlowDeleted:
		return "DELETED"
	case EventSocketBind:
		return "BIND"
	case EventSocketConnect:
		return "CONNECT"
	case EventSocketListen:
		return "LISTEN"
	case EventSocketAccept:
		return "ACCEPT"
	case EventSocketClose:
		return "CLOSE"
	case EventReflectOpen:
		return "OPEN"
	case EventReflectClose:
		return "CLOSE(REFLECT)"
	}
	return fmt.Sprintf("Event(%d)", uint8(e))
}

// Flag is a set of WinDivertOpen flags (WINDIVERT_FLAG_*).
type Flag uint64

// Open flags. SNIFF|DROP and RECV_ONLY|SEND_ONLY are invalid; FLOW and REFLECT need
// SNIFF|RECV_ONLY; SOCKET needs RECV_ONLY (without SNIFF the matched operation is blocked).
const (
	FlagSniff     Flag = 0x0001 // WINDIVERT_FLAG_SNIFF: copy packets, do not divert them
	FlagDrop      Flag = 0x0002 // WINDIVERT_FLAG_DROP: drop matching packets; no Recv
	FlagRecvOnly  Flag = 0x0004 // WINDIVERT_FLAG_RECV_ONLY (= READ_ONLY)
	FlagSendOnly  Flag = 0x0008 // WINDIVERT_FLAG_SEND_ONLY (= WRITE_ONLY)
	FlagNoInstall Flag = 0x0010 // WINDIVERT_FLAG_NO_INSTALL: fail if the driver is not loaded
	FlagFragments Flag = 0x0020 // WINDIVERT_FLAG_FRAGMENTS: inbound fragments, not reassembled
)

// Param is a handle parameter (WINDIVERT_PARAM).
type Param uint32

// Parameters (WINDIVERT_PARAM_*).
const (
	ParamQueueLength  Param = 0 // WINDIVERT_PARAM_QUEUE_LENGTH, packets
	ParamQueueTime    Param = 1 // WINDIVERT_PARAM_QUEUE_TIME, milliseconds
	ParamQueueSize    Param = 2 // WINDIVERT_PARAM_QUEUE_SIZE, bytes
	ParamVersionMajor Param = 3 // WINDIVERT_PARAM_VERSION_MAJOR, read-only
	ParamVersionMinor Param = 4 // WINDIVERT_PARAM_VERSION_MINOR, read-only
)

// ShutdownHow selects what Shutdown stops (WINDIVERT_SHUTDOWN).
type ShutdownHow uint32

// Shutdown modes (WINDIVERT_SHUTDOWN_*).
const (
	ShutdownRecv ShutdownHow = 0x1 // WINDIVERT_SHUTDOWN_RECV
	ShutdownSend ShutdownHow = 0x2 // WINDIVERT_SHUTDOWN_SEND
	ShutdownBoth ShutdownHow = 0x3 // WINDIVERT_SHUTDOWN_BOTH
)

// ChecksumFlag disables parts of CalcChecksums (WINDIVERT_HELPER_NO_*_CHECKSUM).
type ChecksumFlag uint64

// Checksum flags.
const (
	NoIPChecksum     ChecksumFlag = 1  // WINDIVERT_HELPER_NO_IP_CHECKSUM
	NoICMPChecksum   ChecksumFlag = 2  // WINDIVERT_HELPER_NO_ICMP_CHECKSUM
	NoICMPv6Checksum ChecksumFlag = 4  // WINDIVERT_HELPER_NO_ICMPV6_CHECKSUM
	NoTCPChecksum    ChecksumFlag = 8  // WINDIVERT_HELPER_NO_TCP_CHECKSUM
	NoUDPChecksum    ChecksumFlag = 16 // WINDIVERT_HELPER_NO_UDP_CHECKSUM
)

// Limits and defaults ("WinDivert constants" in windivert.h).
const (
	PriorityHighest = 30000  // WINDIVERT_PRIORITY_HIGHEST; higher value = earlier (2.x)
	PriorityLowest  = -30000 // WINDIVERT_PRIORITY_LOWEST

	QueueLengthDefault = 4096     // WINDIVERT_PARAM_QUEUE_LENGTH_DEFAULT
	QueueLengthMin     = 32       // WINDIVERT_PARAM_QUEUE_LENGTH_MIN
	QueueLengthMax     = 16384    // WINDIVERT_PARAM_QUEUE_LENGTH_MAX
	QueueTimeDefault   = 2000     // WINDIVERT_PARAM_QUEUE_TIME_DEFAULT, ms
	QueueTimeMin       = 100      // WINDIVERT_PARAM_QUEUE_TIME_MIN, ms
	QueueTimeMax       = 16000    // WINDIVERT_PARAM_QUEUE_TIME_MAX, ms
	QueueSizeDefault   = 4194304  // WINDIVERT_PARAM_QUEUE_SIZE_DEFAULT, bytes
	QueueSizeMin       = 65535    // WINDIVERT_PARAM_QUEUE_SIZE_MIN, bytes
	QueueSizeMax       = 33554432 // WINDIVERT_PARAM_QUEUE_SIZE_MAX, bytes

	// BatchMax is the most addresses one RecvEx/SendEx call takes (WINDIVERT_BATCH_MAX).
	BatchMax = 0xFF
	// MTUMax is the buffer size that holds any single packet (WINDIVERT_MTU_MAX): with LSO
	// and reassembly, captured packets may be far larger than the link MTU.
	MTUMax = 40 + 0xFFFF
)

// VersionMajor and VersionMinor are the driver version this binding is written for; Open
// refuses a driver whose major version differs (an older 1.x driver has another ABI).
const (
	VersionMajor = 2
	VersionMinor = 2
)
