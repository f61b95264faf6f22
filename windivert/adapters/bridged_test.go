package adapters

import (
	"io/fs"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestBridgedVMs(t *testing.T) {
	root := "/"
	if runtime.GOOS == "windows" {
		root = `C:\`
	}
	abs := func(p string) string { return filepath.Join(root, filepath.FromSlash(p)) }
	vbox := abs("home/u/.VirtualBox")
	inv := abs("home/u/AppData/Roaming/VMware/inventory.vmls")
	files := map[string]string{
		filepath.Join(vbox, "VirtualBox.xml"): `<VirtualBox><Global><MachineRegistry>
    <MachineEntry uuid="{1}" src="` + abs("vms/agent/agent.vbox") + `"/>
    <MachineEntry uuid="{2}" src="` + abs("vms/lan/lan.vbox") + `"/>
  </MachineRegistry></Global></VirtualBox>`,
		// NAT in use, a bridged setting kept under DisabledModes, a disabled bridged adapter.
		abs("vms/agent/agent.vbox"): `<VirtualBox><Machine name="agent"><Hardware><Network>
  <Adapter slot="0" enabled="true"><DisabledModes><BridgedInterface name="Wi-Fi"/></DisabledModes><NAT/></Adapter>
  <Adapter slot="1" enabled="false"><BridgedInterface name="Ethernet"/></Adapter>
</Network></Hardware></Machine></VirtualBox>`,
		abs("vms/lan/lan.vbox"): `<VirtualBox><Machine name="lan"><Hardware><Network>
  <Adapter slot="0" enabled="true"><DisabledModes><NAT/></DisabledModes><BridgedInterface name="Intel(R) Ethernet Connection I219-V"/></Adapter>
</Network></Hardware></Machine></VirtualBox>`,
		inv: `.encoding = "UTF-8"
vmlist1.config = "` + abs("vmware/nat/nat.vmx") + `"
vmlist2.config = "` + abs("vmware/br/br.vmx") + `"
vmlist3.config = "` + abs("vmware/gone/gone.vmx") + `"
index0.field0.name = "guest"`,
		abs("vmware/nat/nat.vmx"): `displayName = "agent"
ethernet0.present = "TRUE"
ethernet0.connectionType = "nat"
ethernet1.present = "FALSE"
ethernet1.connectionType = "bridged"`,
		abs("vmware/br/br.vmx"): `displayName = "lan box"
ethernet0.present = "TRUE"
ethernet0.connectionType = "bridged"
ethernet1.present = "TRUE"
ethernet1.connectionType = "custom"
ethernet1.vnet = "VMnet0"`,
	}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, fs.ErrNotExist
	}
	bs, err := BridgedVMs(vbox, inv, read)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range bs {
		got = append(got, b.String())
	}
	want := []string{
		`virtualbox VM "lan" adapter 0 is bridged to Intel(R) Ethernet Connection I219-V`,
		`vmware VM "lan box" adapter ethernet0 is bridged`,
		`vmware VM "lan box" adapter ethernet1 is bridged`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var b strings.Builder
	WriteBridged(&b, bs)
	if !strings.Contains(b.String(), "BRIDGED (no capture sees these guests") {
		t.Errorf("report: %s", b.String())
	}
	if _, err := BridgedVMs(abs("nowhere"), abs("nothing.vmls"), read); err == nil {
		t.Error("nothing readable, no error")
	}
	if bs, err := BridgedVMs(abs("nowhere"), inv, read); err != nil || len(bs) != 2 {
		t.Errorf("VirtualBox missing: %v %v, want VMware's two", bs, err)
	}
}
