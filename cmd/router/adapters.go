package main

import (
	"fmt"
	"io"

	"github.com/agentcage/router/windivert/adapters"
)

func cmdAdapters(args []string, stdout, stderr io.Writer) int {
	return listAdapters(args, stdout, stderr, adapters.NewSystem())
}

// listAdapters is `router adapters` over sys.
func listAdapters(args []string, stdout, stderr io.Writer, sys adapters.System) int {
	fs := newFlags("adapters", "[--json]",
		"Windows: lists the VM-facing adapters (VirtualBox host-only, VMware VMnet, Hyper-V vEthernet\nincluding the Default Switch, WSL) with their addresses and subnets, whether IP forwarding is\non and whether Windows NAT carries their guests out (then no capture sees them), and WSL2's\ndnsTunneling and Hyper-V firewall settings where Windows tells them.", stderr)
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	as, wsl, err := adapters.List(sys)
	if err != nil {
		fmt.Fprintf(stderr, "router adapters: %v\n", err)
		return exitUsage
	}
	if *asJSON {
		type out struct {
			Adapters []adapters.Adapter `json:"adapters"`
			WSL      adapters.WSL       `json:"wsl"`
		}
		return writeJSON(stdout, stderr, out{as, wsl})
	}
	adapters.Write(stdout, as, wsl)
	return exitOK
}
