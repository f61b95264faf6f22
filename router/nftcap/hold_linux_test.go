package nftcap

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestHoldTable: the hold table that a Holder owns survives `nft flush ruleset` (the
// router's table does not), refuses changes from another process, and cannot be removed
// while the Holder is open; once it is closed the table stays, owned by nobody, and Remove
// takes both tables away. Install without a Holder leaves a held table to its owner.
func TestHoldTable(t *testing.T) {
	ns := newNetNS(t, "hold")
	spec := typicalSpec()
	spec.VMInterfaces = []string{"vnet*"}
	h, err := NewHolder(WithNetNS(ns.fd))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := Install(spec, WithNetNS(ns.fd), WithHolder(h)); err != nil {
		t.Fatal(err)
	}
	// nft 1.0.6 prints an owned table with its owner's name ("# progname"), not its flags.
	hold := listTable(t, ns, HoldTable("router"))
	for _, want := range []string{"# progname", "hook forward priority filter + 1", `iifname "vnet*" drop`, "ip6 saddr @vm6 drop"} {
		if !strings.Contains(hold, want) {
			t.Errorf("hold table lacks %q:\n%s", want, hold)
		}
	}
	// Again through the same Holder: replaced, still owned.
	if err := Install(spec, WithNetNS(ns.fd), WithHolder(h)); err != nil {
		t.Fatalf("install again through the holder: %v", err)
	}
	// Another Holder is refused the held table; its socket stays usable (see below).
	h2, err := NewHolder(WithNetNS(ns.fd))
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	if err := Install(spec, WithNetNS(ns.fd), WithHolder(h2)); !errors.Is(err, unix.EPERM) {
		t.Errorf("install through a second holder: %v, want a refusal", err)
	}
	// Without a Holder: the router's table is replaced, the held one left alone.
	if err := Install(spec, WithNetNS(ns.fd)); err != nil {
		t.Fatalf("install without the holder while one holds: %v", err)
	}
	ns.nft(t, "flush ruleset\n")
	if installed(t, ns, "router") {
		t.Error("the router's table survived a flush: the test does not test what it says")
	}
	if !installed(t, ns, HoldTable("router")) {
		t.Fatal("the hold table did not survive nft flush ruleset")
	}
	if out, err := exec.Command("ip", "netns", "exec", ns.name, "nft", "delete", "table", "inet", HoldTable("router")).CombinedOutput(); err == nil {
		t.Errorf("another process deleted the held table:\n%s", out)
	}
	if err := Remove("router", WithNetNS(ns.fd)); err == nil || !errors.Is(err, unix.EPERM) {
		t.Errorf("Remove while held: %v, want a refusal", err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if !installed(t, ns, HoldTable("router")) {
		t.Fatal("the hold table went with its holder")
	}
	// The second Holder, refused before, adopts the table its owner left, twice (its
	// socket reads its own answers).
	for range 2 {
		if err := Install(spec, WithNetNS(ns.fd), WithHolder(h2)); err != nil {
			t.Fatalf("install over an orphaned hold table: %v", err)
		}
	}
	ns.nft(t, "flush ruleset\n")
	if !installed(t, ns, HoldTable("router")) {
		t.Fatal("the adopted hold table did not survive a flush")
	}
	h2.Close()
	if err := Remove("router", WithNetNS(ns.fd)); err != nil {
		t.Fatal(err)
	}
	if installed(t, ns, "router") || installed(t, ns, HoldTable("router")) {
		t.Error("Remove left a table")
	}
}
