package checkip

import (
	"net/netip"
	"testing"
	"unicode/utf8"
)

// The seeds live in testdata/fuzz/<target>/ (plain text, JSON, trace pages, garbage; model
// lists of both shapes; STUN answers of both families and broken ones).

func FuzzParseEcho(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		a, err := ParseEcho(body)
		if err != nil {
			if msg := err.Error(); !utf8.ValidString(msg) || len(msg) > 200 {
				t.Fatalf("error message is not short printable text: %q", msg)
			}
			return
		}
		if !a.IsValid() || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() || a.Is4In6() {
			t.Fatalf("ParseEcho(%q) = %v: not an acceptable exit address", body, a)
		}
		// What a plain-text echo server would send for a parses back to a.
		b, err := ParseEcho([]byte(a.String() + "\n"))
		if err != nil || b != a {
			t.Fatalf("ParseEcho(%q) = %v, %v; want %v", a.String(), b, err, a)
		}
	})
}

func FuzzParseModels(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		ids, err := ParseModels(body)
		if err != nil {
			if msg := err.Error(); !utf8.ValidString(msg) || len(msg) > 300 {
				t.Fatalf("error message is not short printable text: %q", msg)
			}
			return
		}
		seen := map[string]bool{}
		for _, id := range ids {
			if id == "" || seen[id] {
				t.Fatalf("ParseModels(%q) = %q: empty or repeated id", body, ids)
			}
			seen[id] = true
			for _, r := range clean(id) {
				if r < ' ' || r == 0x7f {
					t.Fatalf("clean(%q) kept control rune %U", id, r)
				}
			}
		}
	})
}

func FuzzParseSTUNResponse(f *testing.F) {
	f.Fuzz(func(t *testing.T, msg []byte, txid []byte) {
		var id [12]byte
		copy(id[:], txid)
		ap, err := ParseSTUNResponse(msg, id)
		if err == nil && (!ap.IsValid() || ap.Addr().Is4In6() || ap.Addr().Zone() != "") {
			t.Fatalf("ParseSTUNResponse(%x) = %v: not a usable address", msg, ap)
		}
		// Round trip: whatever 16 bytes and port the input holds, an answer built for that
		// address parses back to it.
		var raw [18]byte
		copy(raw[:], msg)
		for _, a := range []netip.Addr{netip.AddrFrom4([4]byte(raw[:4])), netip.AddrFrom16([16]byte(raw[:16]))} {
			seen := netip.AddrPortFrom(a, uint16(raw[16])<<8|uint16(raw[17]))
			resp, err := STUNAnswer(STUNRequest(id), seen)
			if err != nil {
				t.Fatalf("STUNAnswer(%v): %v", seen, err)
			}
			got, err := ParseSTUNResponse(resp, id)
			want := netip.AddrPortFrom(a.Unmap(), seen.Port())
			if err != nil || got != want {
				t.Fatalf("round trip of %v = %v, %v", want, got, err)
			}
		}
	})
}

func FuzzHostAddrParsers(f *testing.F) {
	f.Add([]byte("eth0\t00000000\t0202000A\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"))
	f.Add([]byte("00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000002 00000400 00000001 00000000 00450003 eth0\n"))
	f.Add([]byte("nameserver 10.0.2.3\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ParseProcRoute(b)
		ParseProcIPv6Route(b)
		ParseResolvConf(b)
	})
}
