package adapters

import (
	"io/fs"
	"path/filepath"
	"runtime"
	"testing"
)

func TestHostResolverVMs(t *testing.T) {
	root := "/"
	if runtime.GOOS == "windows" {
		root = `C:\`
	}
	abs := func(p string) string { return filepath.Join(root, filepath.FromSlash(p)) }
	dir := abs("home/u/.VirtualBox")
	files := map[string]string{
		filepath.Join(dir, "VirtualBox.xml"): `<?xml version="1.0"?>
<VirtualBox xmlns="http://www.virtualbox.org/" version="1.12-windows">
  <Global><MachineRegistry>
    <MachineEntry uuid="{1}" src="` + abs("vms/agent/agent.vbox") + `"/>
    <MachineEntry uuid="{2}" src="` + abs("vms/plain/plain.vbox") + `"/>
    <MachineEntry uuid="{3}" src="` + abs("vms/gone/gone.vbox") + `"/>
  </MachineRegistry></Global>
</VirtualBox>`,
		abs("vms/agent/agent.vbox"): `<VirtualBox><Machine name="agent"><Hardware><Network>
  <Adapter slot="0" enabled="true"><NAT localhost-reachable="true"><DNS pass-domain="true" use-proxy="false" use-host-resolver="true"/></NAT></Adapter>
</Network></Hardware></Machine></VirtualBox>`,
		abs("vms/plain/plain.vbox"): `<VirtualBox><Machine name="plain"><Hardware><Network>
  <Adapter slot="0" enabled="true"><NAT><DNS use-proxy="true" use-host-resolver="false"/></NAT></Adapter>
</Network></Hardware></Machine></VirtualBox>`,
	}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, fs.ErrNotExist
	}
	vms, err := HostResolverVMs(dir, read)
	if err != nil || len(vms) != 1 || vms[0] != "agent" {
		t.Fatalf("%v %v, want [agent]", vms, err)
	}
	if _, err := HostResolverVMs(abs("nowhere"), read); err == nil {
		t.Error("no VirtualBox.xml, no error")
	}
}
