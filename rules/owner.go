package rules

// Owner is what a capture knows of the process that owns a flow: the one type every capture,
// owner lookup (package router/proc), rule query (Query), policy flow (package
// rules/policy's Flow) and carried flow hands on, so that no layer copies its fields one by
// one or drops one on the way. The zero Owner is "unknown owner": rules with apps or
// services do not match it.
//
// It holds what names the process by what it runs, never a name the process can set for
// itself (Linux's /proc/PID/comm, argv[0]): a guest that can rename itself must not
// become another app. Fields the platform cannot know stay empty.
type Owner struct {
	// PID is the process's id. Filled by the owner lookups (Linux: the socket's inode
	// through sock_diag, then /proc; Windows: WinDivert's SOCKET layer, or the IP Helper
	// tables). Not forgeable, but reusable: once the process ends its PID can name another
	// (the Windows lookup by an event's time refuses a PID reused since). It names the
	// process in logs and status only: no rule matches it.
	PID int
	// App is the image name (the executable's file name, e.g. "VBoxHeadless" or
	// "VirtualBoxVM.exe"), and AppPath the executable's full path when known. Filled by the
	// owner lookups from the file the kernel started (Linux: /proc/PID/exe, or /proc/PID/comm
	// when that link cannot be read: a kernel thread, which runs no file; Windows: the
	// process's image path), and by explain's --app and --path. A process cannot rename it: it can only run another
	// file, and on Linux a child of a caged process stays caged by CagedSocket whatever it
	// runs. A guest in a VM has no process on this host at all.
	App     string
	AppPath string
	// Services are the Windows services the process hosts (an svchost.exe's, from the
	// service control manager); empty elsewhere. A service's name is chosen by whoever
	// installed it (an administrator), never by a caged process or a guest.
	Services []string
	// CagedSocket says the kernel marked the flow's socket as a caged process's at its
	// creation (Linux: the cage's program, by the executable the process or a caged
	// ancestor runs), whether or not the rest of the owner is known. Filled by the capture
	// from the socket's mark, never by an owner lookup: a capture that looks the process up
	// after reading the mark keeps it (Learn). Not forgeable: the kernel sets it before the
	// process holds the socket, and a caged process cannot clear it. Rules do not read it:
	// package rules/policy folds it into Query.Caged.
	CagedSocket bool
}

// Named reports whether o names a process the rules can match: an image name, a path or a
// service.
func (o *Owner) Named() bool {
	return o.App != "" || o.AppPath != "" || len(o.Services) > 0
}

// Learn takes what an owner lookup found of the process (found: PID, App, AppPath,
// Services) and keeps what the capture itself saw of the socket (CagedSocket).
func (o *Owner) Learn(found Owner) {
	found.CagedSocket = o.CagedSocket
	*o = found
}
