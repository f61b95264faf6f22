// Package proc attributes a flow to the process that owns it: image name, full path and, on
// Windows, the services hosted by an svchost.exe process. Rules match on these fields.
//
// The lookup differs by platform: on Linux the owner of a socket is found from its addresses
// (netlink sock_diag gives the socket's inode, /proc maps the inode to a PID); on Windows the
// capture learns the PID from WinDivert's SOCKET layer and asks for the rest by PID.
package proc

import "github.com/agentcage/router/rules"

// Info is one entry of a process list (LinuxFinder.Processes): the process as a flow's owner
// lookup knows it (rules.Owner: a lookup returns that alone), and what the list adds for
// status, which no rule matches.
type Info struct {
	rules.Owner
	// Comm is the name the process goes by (Linux: /proc/PID/comm, the name it was started
	// as or set itself, cut to 15 bytes) when it differs from App. A process sets it, so it
	// never names a flow's owner: it is shown, never matched.
	Comm string
	// PPID is the parent's PID; 0 when unknown.
	PPID int
	// NetNS identifies the network namespace its main thread is in (the namespace file's
	// inode); 0 when unknown.
	NetNS uint64
}
