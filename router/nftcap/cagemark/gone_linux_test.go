package cagemark

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentcage/router/internal/roottest"
)

// TestCollectsGoneNamespaces: the programs left for a namespace that is gone (its router
// killed, the namespace deleted) are detached to make room; a living namespace's stay,
// whether a file names it or only a descriptor holds it.
func TestCollectsGoneNamespaces(t *testing.T) {
	roottest.Require(t, "ip")
	install := func(fd int) {
		t.Helper()
		if err := Install(Config{Names: []string{"cagehv"}, Mark: 0x52434147, NetNS: fd}); err != nil {
			t.Fatal(err)
		}
	}
	del := func(name string) {
		t.Helper()
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Fatalf("ip netns del: %v: %s", err, out)
		}
	}
	goneName := fmt.Sprintf("cagegone%d", os.Getpid())
	gone := addNetNS(t, goneName)
	install(gone)
	goneCookie, err := netnsCookie(gone)
	if err != nil {
		t.Fatal(err)
	}
	_, named := testNetNS(t, "cagenamed")
	install(named)
	heldName, held := testNetNS(t, "cageheld")
	install(held)
	// The one namespace goes; the other is held by this process's descriptor alone.
	del(goneName)
	unix.Close(gone)
	del(heldName)

	cg, err := openCgroupRoot()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(cg)
	if err := collectGone(cg); err != nil {
		t.Fatal(err)
	}
	count := func(cookie uint64) int {
		found, err := attached(cg, cookie)
		if err != nil {
			t.Fatal(err)
		}
		defer found.close()
		return len(found)
	}
	if n := count(goneCookie); n != 0 {
		t.Errorf("%d programs left for the namespace that is gone", n)
	}
	for what, fd := range map[string]int{"named": named, "held by a descriptor": held} {
		c, err := netnsCookie(fd)
		if err != nil {
			t.Fatal(err)
		}
		if n := count(c); n != len(hooks) {
			t.Errorf("the namespace %s: %d programs, want %d", what, n, len(hooks))
		}
	}
}
