package windivert

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// headerConstants reads testdata/windivert_h_v2.2.2.txt (lines copied from windivert.h) and
// evaluates each constant: numbers, aliases, "(-NAME)" and "(a + b)".
func headerConstants(t *testing.T) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile("testdata/windivert_h_v2.2.2.txt")
	if err != nil {
		t.Fatal(err)
	}
	enumRe := regexp.MustCompile(`^\s+(WINDIVERT_[A-Z_0-9]+) = ([0-9xA-Fa-f]+),`)
	defRe := regexp.MustCompile(`^#define (WINDIVERT_[A-Z_0-9]+)\s+(.+?)\s*(/\*.*)?$`)
	raw := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := enumRe.FindStringSubmatch(line); m != nil {
			raw[m[1]] = m[2]
		} else if m := defRe.FindStringSubmatch(line); m != nil {
			raw[m[1]] = m[2]
		}
	}
	var eval func(string) int64
	eval = func(s string) int64 {
		s = strings.TrimSpace(s)
		if strings.HasPrefix(s, "(") && strings.HasSuffix(s, ")") {
			s = strings.TrimSpace(s[1 : len(s)-1])
			if a, c, ok := strings.Cut(s, "+"); ok {
				return eval(a) + eval(c)
			}
			if strings.HasPrefix(s, "-") {
				return -eval(s[1:])
			}
		}
		if v, ok := raw[s]; ok {
			return eval(v)
		}
		n, err := strconv.ParseInt(s, 0, 64)
		if err != nil {
			t.Fatalf("cannot evaluate %q", s)
		}
		return n
	}
	out := map[string]int64{}
	for k, v := range raw {
		out[k] = eval(v)
	}
	return out
}

func TestConstantsMatchHeader(t *testing.T) {
	h := headerConstants(t)
	ours := map[string]int64{
		"WINDIVERT_LAYER_NETWORK":              int64(LayerNetwork),
		"WINDIVERT_LAYER_NETWORK_FORWARD":      int64(LayerNetworkForward),
		"WINDIVERT_LAYER_FLOW":                 int64(LayerFlow),
		"WINDIVERT_LAYER_SOCKET":               int64(LayerSocket),
		"WINDIVERT_LAYER_REFLECT":              int64(LayerReflect),
		"WINDIVERT_EVENT_NETWORK_PACKET":       int64(EventNetworkPacket),
		"WINDIVERT_EVENT_FLOW_ESTABLISHED":     int64(EventFlowEstablished),
		"WINDIVERT_EVENT_FLOW_DELETED":         int64(EventFlowDeleted),
		"WINDIVERT_EVENT_SOCKET_BIND":          int64(EventSocketBind),
		"WINDIVERT_EVENT_SOCKET_CONNECT":       int64(EventSocketConnect),
		"WINDIVERT_EVENT_SOCKET_LISTEN":        int64(EventSocketListen),
		"WINDIVERT_EVENT_SOCKET_ACCEPT":        int64(EventSocketAccept),
		"WINDIVERT_EVENT_SOCKET_CLOSE":         int64(EventSocketClose),
		"WINDIVERT_EVENT_REFLECT_OPEN":         int64(EventReflectOpen),
		"WINDIVERT_EVENT_REFLECT_CLOSE":        int64(EventReflectClose),
		"WINDIVERT_FLAG_SNIFF":                 int64(FlagSniff),
		"WINDIVERT_FLAG_DROP":                  int64(FlagDrop),
		"WINDIVERT_FLAG_RECV_ONLY":             int64(FlagRecvOnly),
		"WINDIVERT_FLAG_READ_ONLY":             int64(FlagRecvOnly),
		"WINDIVERT_FLAG_SEND_ONLY":             int64(FlagSendOnly),
		"WINDIVERT_FLAG_WRITE_ONLY":            int64(FlagSendOnly),
		"WINDIVERT_FLAG_NO_INSTALL":            int64(FlagNoInstall),
		"WINDIVERT_FLAG_FRAGMENTS":             int64(FlagFragments),
		"WINDIVERT_PARAM_QUEUE_LENGTH":         int64(ParamQueueLength),
		"WINDIVERT_PARAM_QUEUE_TIME":           int64(ParamQueueTime),
		"WINDIVERT_PARAM_QUEUE_SIZE":           int64(ParamQueueSize),
		"WINDIVERT_PARAM_VERSION_MAJOR":        int64(ParamVersionMajor),
		"WINDIVERT_PARAM_VERSION_MINOR":        int64(ParamVersionMinor),
		"WINDIVERT_PARAM_MAX":                  int64(ParamVersionMinor),
		"WINDIVERT_SHUTDOWN_RECV":              int64(ShutdownRecv),
		"WINDIVERT_SHUTDOWN_SEND":              int64(ShutdownSend),
		"WINDIVERT_SHUTDOWN_BOTH":              int64(ShutdownBoth),
		"WINDIVERT_PRIORITY_HIGHEST":           PriorityHighest,
		"WINDIVERT_PRIORITY_LOWEST":            PriorityLowest,
		"WINDIVERT_PARAM_QUEUE_LENGTH_DEFAULT": QueueLengthDefault,
		"WINDIVERT_PARAM_QUEUE_LENGTH_MIN":     QueueLengthMin,
		"WINDIVERT_PARAM_QUEUE_LENGTH_MAX":     QueueLengthMax,
		"WINDIVERT_PARAM_QUEUE_TIME_DEFAULT":   QueueTimeDefault,
		"WINDIVERT_PARAM_QUEUE_TIME_MIN":       QueueTimeMin,
		"WINDIVERT_PARAM_QUEUE_TIME_MAX":       QueueTimeMax,
		"WINDIVERT_PARAM_QUEUE_SIZE_DEFAULT":   QueueSizeDefault,
		"WINDIVERT_PARAM_QUEUE_SIZE_MIN":       QueueSizeMin,
		"WINDIVERT_PARAM_QUEUE_SIZE_MAX":       QueueSizeMax,
		"WINDIVERT_BATCH_MAX":                  BatchMax,
		"WINDIVERT_MTU_MAX":                    MTUMax,
		"WINDIVERT_HELPER_NO_IP_CHECKSUM":      int64(NoIPChecksum),
		"WINDIVERT_HELPER_NO_ICMP_CHECKSUM":    int64(NoICMPChecksum),
		"WINDIVERT_HELPER_NO_ICMPV6_CHECKSUM":  int64(NoICMPv6Checksum),
		"WINDIVERT_HELPER_NO_TCP_CHECKSUM":     int64(NoTCPChecksum),
		"WINDIVERT_HELPER_NO_UDP_CHECKSUM":     int64(NoUDPChecksum),
	}
	for name, want := range h {
		got, ok := ours[name]
		if !ok {
			t.Errorf("%s = %d in windivert.h has no counterpart here", name, want)
			continue
		}
		if got != want {
			t.Errorf("%s: got %d, windivert.h says %d", name, got, want)
		}
	}
	for name := range ours {
		if _, ok := h[name]; !ok {
			t.Errorf("%s is not in the header copy", name)
		}
	}
	if len(h) < 50 {
		t.Errorf("parsed only %d constants from the header copy", len(h))
	}
}

func TestStrings(t *testing.T) {
	tests := []struct{ got, want string }{
		{LayerSocket.String(), "SOCKET"},
		{LayerNetworkForward.String(), "NETWORK_FORWARD"},
		{Layer(9).String(), "Layer(9)"},
		{EventSocketConnect.String(), "CONNECT"},
		{Event(42).String(), "Event(42)"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
