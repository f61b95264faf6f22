// Package proc attributes a flow to the process that owns it: image name, full path and, on
// Windows, the services hosted by an svchost.exe process. Rules match on these fields.
//
// The lookup differs by platform: on Linux the owner of a socket is found from its addresses
// (netlink sock_diag gives the socket's inode, /proc maps the inode to a PID); on Windows the
// capture learns the PID from WinDivert's SOCKET layer and asks for the rest by PID.
package proc

// Info describes the process that owns a flow. The zero Info means "unknown owner": rules
// with apps or services do not match it.
type Info struct {
	PID  int
	Name string // image name, e.g. "VBoxHeadless" or "VirtualBoxVM.exe"
	Path string // full path of the executable, when known
	// Comm is the name the process goes by (Linux: /proc/PID/comm, the name it was started
	// as or set itself, cut to 15 bytes) when it differs from Name, in a process list
	// (LinuxFinder.Processes) only: a process sets it, so a flow's owner is known by its
	// executable alone and a lookup leaves Comm empty. Empty elsewhere.
	Comm string
	// PPID is the parent's PID, in a process list (Linux) only; 0 when unknown.
	PPID int
	// NetNS identifies the network namespace its main thread is in (the namespace file's
	// inode), in a process list (Linux) only; 0 when unknown.
	NetNS uint64
	// Services are the names of the Windows services hosted by the process (svchost.exe);
	// empty elsewhere.
	Services []string
}
