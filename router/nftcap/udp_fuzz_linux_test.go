package nftcap

import "testing"

// FuzzParseOrigDst: any control message bytes are parsed without a panic.
func FuzzParseOrigDst(f *testing.F) {
	f.Add([]byte{})
	// cmsghdr (len 32, SOL_IP, IP_ORIGDSTADDR) and a sockaddr_in of 203.0.113.10:7.
	f.Add([]byte{32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0, 2, 0, 0, 7, 203, 0, 113, 10, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		parseOrigDst(b) // must not panic
	})
}

func TestParseOrigDst(t *testing.T) {
	b := []byte{32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0, 2, 0, 0, 7, 203, 0, 113, 10, 0, 0, 0, 0, 0, 0, 0, 0}
	got, err := parseOrigDst(b)
	if err != nil || got.String() != "203.0.113.10:7" {
		t.Errorf("got %v, %v; want 203.0.113.10:7", got, err)
	}
	if _, err := parseOrigDst(nil); err == nil {
		t.Error("no control message: want an error")
	}
}
