package lint

import (
	"slices"
	"strings"
	"testing"
)

// TestUngatedLoopback: a direct rule that opens the host's loopback to caged traffic at a
// port no forward connects to is an error; at a forward's connect port, a gate serves it.
func TestUngatedLoopback(t *testing.T) {
	var got []string
	for _, f := range short(Check(parseOS(t, "linux", ungatedLoopback), Host{OS: "linux"})) {
		if strings.Contains(f, CheckUngatedModel) {
			got = append(got, f)
		}
	}
	if want := []string{"error ungated-loopback raw-model", "error ungated-loopback by-name"}; !slices.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
