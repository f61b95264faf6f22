// Package guard is the router's fail-closed guard on Windows: WFP filters that block the
// caged apps (hypervisors and the apps of proxy and block rules) whenever the router is
// not running, and let them through to the capture only while it runs.
//
// Block by default, permit only while the daemon lives: the blocks are persistent (they
// survive a crash, a stop, the service manager's restart delays, a broken config, a
// refused driver and a reboot, and boot-time twins cover the boot before the filtering
// engine starts); the permits live in a dynamic WFP session, which Windows deletes when
// the process ends, however it ends. Adding or removing filters at the ALE layers makes
// Windows re-authorize existing connections, so a permit's removal also cuts what it let
// through.
//
// The pieces: NewPlan turns an Env (plain data: caged app paths, the router's path and
// service, its ports, the forwards and inbounds, the DNS scope, the cage subnets) into the objects, with fixed
// keys (UUIDv5 of a fixed namespace), so a reinstall replaces, never duplicates. Guard
// installs (Install), arms (Arm), disarms (Disarm) and removes (Remove) them through a
// wfp.Engine. ResolveApps finds the caged executables on the machine.
//
// How the daemon uses it (the order is the contract):
//
//	start:   Install(plan) → open listeners → open WinDivert → run the engine → Arm()
//	reload:  Install(newPlan) (re-arms when armed)
//	stop, or the engine failing: Disarm() → close WinDivert → exit non-zero
//	         (the service manager restarts it; meanwhile the blocks hold)
//	router service install: Install(plan) before the first start
//	router cleanup, router service uninstall: Remove()
//
// Decisions where Windows leaves a choice:
//   - "Remote is this machine" is the condition flag FWP_CONDITION_FLAG_IS_LOOPBACK:
//     Windows sets it whenever both ends are this host, whatever the address, including
//     the LAN and host-only addresses of its own interfaces (the same notion WinDivert
//     calls loopback). No list of the host's addresses is kept, so nothing goes stale when
//     an adapter changes. FWPM_CONDITION_IP_LOCAL_ADDRESS_TYPE only says unicast/multicast
//     and cannot express it.
//   - ICMP: the caged-app blocks carry no protocol condition, so they hold for whatever
//     the connect layers classify for the app (TCP, UDP, and ICMP sent from its sockets);
//     the permit D1 names TCP and UDP only, so a caged app's ICMP is refused in every
//     state (the router cannot carry it). Port conditions come with a TCP/UDP condition,
//     because for ICMP Windows puts the type and code in the port fields.
//   - With [dns] capture = "all" (the default with local = true), D2 lets every process's
//     port-53 traffic through the connect layer while the router runs (the capture, below
//     it, answers it); DoT (853) stays blocked, as the capture drops it. S2 lets the
//     router's own DNS out at any time. With "caged" none of the three exist: other
//     processes' DNS is not the router's business.
//   - The router's accept permits are hard (they clear the action right): Windows
//     Firewall, evaluated after the guard's sublayer, asks nobody for a service and
//     blocks inbound on a Public network. The transparent listener and DNS take any
//     source (reflected packets carry the original destination as source); each forward
//     and inbound only its allowed sources, and D4 blocks the rest even if a firewall rule allowed
//     router.exe. The permits name router.exe's app ID and, as a service, its service SID
//     (the service's SID type must be "unrestricted").
//   - The provider names no service: Windows would not enforce a provider's persistent
//     filters while its service is disabled, and the blocks must hold then too.
//   - The boot-time twins (P3, S1, H1, A2, A3) are blocks only: before the filtering
//     engine starts nothing is permitted to the caged apps, the model port included, and
//     a guest on a VM-facing adapter reaches no host service, DHCP included.
//   - The walls (A0-A3, accept layers) are what keeps the guests of host-only and internal
//     networks off the host's services: a guest there reaches the host's stack directly,
//     through no process the guard could name. They match the adapter's interface LUID
//     (A2: a connection arriving there, whatever address it was made to, IPv6 link-local
//     included) or a VM-facing or cage subnet as the remote address (A3: also when the
//     adapter could not be listed), and "not loopback" (FWP_MATCH_FLAGS_NONE_SET of the
//     loopback flag), so this machine's own connections to its adapter addresses pass.
//     They are persistent soft blocks in the guard's sublayer: the router's dynamic hard
//     permits (D3, heavier) let its forwards and inbounds take their allowed sources while
//     it runs; A1 lets DHCP (UDP 67, 547) through. A0, heavier than D3, keeps the guests
//     off the router's own listener and DNS port, which D3 opens to any source. The Default Switch and WSL are not
//     walled: Windows NATs them in the kernel (they are uncaged anyway) and their DNS is a
//     host service on the adapter's address.
//   - P4 keeps the caged apps off link-local destinations (169.254.0.0/16, fe80::/10),
//     heavier than D1, so also while the router runs: the capture never diverts them, and
//     a cloud host's metadata service lives there.
//   - P1 leaves vmware-vmx.exe its own service on this machine, vmware-authd on 902 and
//     912; vmnat.exe, which carries the guests' NAT, gets no such exception.
package guard
