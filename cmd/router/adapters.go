package main

import (
	"fmt"
	"io"

	"github.com/agentcage/router/windivert/adapters"
)

func cmdAdapters(args []string, stdout, stderr io.Writer) int {
	return listAdapters(args, stdout, stderr, adapters.NewSystem(), bridgedVMs)
}

// listAdapters is `router adapters` over sys, with the bridged VMs bridged finds.
func listAdapters(args []string, stdout, stderr io.Writer, sys adapters.System, bridged func() []adapters.Bridged) int {
	fs := newFlags("adapters",
		"Windows: lists the VM-facing adapters (VirtualBox host-only, VMware VMnet, Hyper-V vEthernet\nincluding the Default Switch, WSL) with their addresses and subnets, whether IP forwarding is\non and whether Windows NAT carries their guests out (then no capture sees them), and WSL2's\ndnsTunneling and Hyper-V firewall settings where Windows tells them, and the VirtualBox and\nVMware VMs with a bridged adapter (no capture sees those guests).", stderr)
	asJSON := jsonFlag(fs)
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	as, wsl, err := adapters.List(sys)
	if err != nil {
		fmt.Fprintf(stderr, "router adapters: %v\n", err)
		return exitUsage
	}
	bs := bridged()
	if *asJSON {
		type out struct {
			Adapters []adapters.Adapter `json:"adapters"`
			WSL      adapters.WSL       `json:"wsl"`
			Bridged  []adapters.Bridged `json:"bridged"`
		}
		return writeJSON(stdout, stderr, out{as, wsl, bs})
	}
	adapters.Write(stdout, as, wsl)
	adapters.WriteBridged(stdout, bs)
	return exitOK
}
