package checkip

import (
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad hex: %v", err)
	}
	return b
}

// rfc5769TxID is the transaction id of the sample responses in RFC 5769 §2.2 and §2.3.
var rfc5769TxID = [12]byte{0xb7, 0xe7, 0xa7, 0x01, 0xbc, 0x34, 0xd6, 0x86, 0xfa, 0x87, 0xdf, 0xae}

func TestParseSTUNResponseRFC5769(t *testing.T) {
	// The layout of RFC 5769's sample responses: SOFTWARE (odd length, padded),
	// XOR-MAPPED-ADDRESS, MESSAGE-INTEGRITY, FINGERPRINT. The integrity and fingerprint values
	// are placeholders here: the parser does not check them.
	tests := []struct {
		name, msg, want string
	}{
		{"ipv4 §2.2", `
			0101 003c 2112a442 b7e7a701 bc34d686 fa87dfae
			8022 000b 74657374 20766563 746f7220
			0020 0008 0001a147 e112a643
			0008 0014 00000000 00000000 00000000 00000000 00000000
			8028 0004 00000000`, "192.0.2.1:32853"},
		{"ipv6 §2.3", `
			0101 0048 2112a442 b7e7a701 bc34d686 fa87dfae
			8022 000b 74657374 20766563 746f7220
			0020 0014 0002a147 0113a9fa a5d3f179 bc25f4b5 bed2b9d9
			0008 0014 00000000 00000000 00000000 00000000 00000000
			8028 0004 00000000`, "[2001:db8:1234:5678:11:2233:4455:6677]:32853"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSTUNResponse(unhex(t, tt.msg), rfc5769TxID)
			if err != nil {
				t.Fatalf("ParseSTUNResponse: %v", err)
			}
			if got.String() != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestSTUNRoundTrip(t *testing.T) {
	txid := [12]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	for _, seen := range []string{"203.0.113.7:3478", "[2001:db8::7]:65535", "127.0.0.1:1", "[::ffff:192.0.2.1]:80"} {
		t.Run(seen, func(t *testing.T) {
			ap := netip.MustParseAddrPort(seen)
			resp, err := STUNAnswer(STUNRequest(txid), ap)
			if err != nil {
				t.Fatalf("STUNAnswer: %v", err)
			}
			got, err := ParseSTUNResponse(resp, txid)
			if err != nil {
				t.Fatalf("ParseSTUNResponse: %v", err)
			}
			want := netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			if got != want {
				t.Errorf("got %s, want %s", got, want)
			}
		})
	}
}

func TestParseSTUNResponseRejects(t *testing.T) {
	txid := [12]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	good, err := STUNAnswer(STUNRequest(txid), netip.MustParseAddrPort("203.0.113.7:3478"))
	if err != nil {
		t.Fatalf("STUNAnswer: %v", err)
	}
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	tests := []struct {
		name string
		msg  []byte
	}{
		{"empty", nil},
		{"short header", good[:19]},
		{"request, not response", STUNRequest(txid)},
		{"error response", mutate(func(b []byte) []byte { b[1] = 0x11; return b })},
		{"wrong cookie", mutate(func(b []byte) []byte { b[4] ^= 1; return b })},
		{"other transaction", mutate(func(b []byte) []byte { b[19] ^= 1; return b })},
		{"length too long", mutate(func(b []byte) []byte { b[3] += 4; return b })},
		{"length not multiple of 4", mutate(func(b []byte) []byte { b[3]++; return b })},
		{"truncated attribute", mutate(func(b []byte) []byte { b[3] -= 4; return b[:len(b)-4] })},
		{"attribute overruns", mutate(func(b []byte) []byte { b[23] = 0x40; return b })},
		{"bad family", mutate(func(b []byte) []byte { b[25] = 3; return b })},
		{"v4 of wrong size", mutate(func(b []byte) []byte { b[23] = 4; return b })},
		{"no address", unhex(t, "0101 0008 2112a442 0102030405060708090a0b0c 8022 0003 61626300")},
		{"only padding bytes", unhex(t, "0101 0004 2112a442 0102030405060708090a0b0c 0000 00")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := ParseSTUNResponse(tt.msg, txid); err == nil {
				t.Errorf("ParseSTUNResponse(%x) = %s, want an error", tt.msg, got)
			}
		})
	}
}

func TestParseSTUNResponseMappedAddress(t *testing.T) {
	txid := [12]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	// MAPPED-ADDRESS only (an old server): the address is not XORed.
	msg := unhex(t, "0101 000c 2112a442 0102030405060708090a0b0c 0001 0008 0001 0d96 cb007107")
	got, err := ParseSTUNResponse(msg, txid)
	if err != nil {
		t.Fatalf("ParseSTUNResponse: %v", err)
	}
	if want := "203.0.113.7:3478"; got.String() != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestSTUNAnswerRejects(t *testing.T) {
	seen := netip.MustParseAddrPort("203.0.113.7:3478")
	for name, req := range map[string][]byte{
		"short":    make([]byte, 10),
		"response": unhex(t, "0101 0000 2112a442 0102030405060708090a0b0c"),
		"rfc3489":  unhex(t, "0001 0000 00000000 0102030405060708090a0b0c"),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := STUNAnswer(req, seen); err == nil {
				t.Error("want an error")
			}
		})
	}
}
