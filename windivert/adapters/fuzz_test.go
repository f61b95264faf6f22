package adapters

import (
	"strings"
	"testing"
)

// The settings files read here are the user's, not ours: any bytes must parse or fail
// without a panic.

func FuzzParseWSLConfig(f *testing.F) {
	f.Add("[wsl2]\ndnsTunneling=true\nfirewall=false\nnetworkingMode=mirrored\n")
	f.Add("[wsl2\n=\n[]\n;x\n#y\ndnsTunneling = yes # comment")
	f.Fuzz(func(t *testing.T, s string) {
		if _, err := ParseWSLConfig(strings.NewReader(s)); err != nil && len(s) < 64<<10 {
			t.Fatalf("short input refused: %v", err)
		}
	})
}

func FuzzHostResolver(f *testing.F) {
	f.Add(`<VirtualBox><Machine name="a"><NAT><DNS use-host-resolver="true"/></NAT></Machine></VirtualBox>`)
	f.Add(`<NAT><NAT></NAT><DNS use-host-resolver="true"/></NAT></DNS>`)
	f.Fuzz(func(t *testing.T, s string) {
		hostResolver([]byte(s))
		attrs([]byte(s), "MachineEntry", "src")
	})
}

func FuzzBridged(f *testing.F) {
	f.Add([]byte(`<Machine name="a"><Adapter slot="0"><BridgedInterface name="x"/></Adapter></Machine>`))
	f.Add([]byte("ethernet0.present = \"TRUE\"\nethernet0.connectionType = \"bridged\"\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		vboxBridged(b)
		vmxBridged(`C:\vm.vmx`, b)
		vmxFiles(b)
	})
}
