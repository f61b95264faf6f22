package platform

import (
	"fmt"

	"github.com/agentcage/router/router/capture"
	"github.com/agentcage/router/router/control"
	"github.com/agentcage/router/router/nftcap/cagemark"
	"github.com/agentcage/router/router/proc"
	"github.com/agentcage/router/rules"
)

// cageReader is what kernelCaged reads (the Linux platform; a fake in tests): it lists this
// host's processes and reads the names its kernel program holds.
type cageReader interface {
	Processes() ([]proc.Info, error)
	// KernelCage reads the kernel's cage program for the daemon's network namespace.
	KernelCage() (KernelCage, error)
}

// KernelCage is what the kernel's cage program holds for a network namespace.
type KernelCage struct {
	Names     []string     // the executables' names it cages
	Once      map[int]bool // the processes it caged once and remembers (thread group IDs)
	Installed bool         // false: no program is attached
	NetNS     uint64       // the namespace, as proc.Info.NetNS tells it; 0: unknown
}

// maxKernelCaged bounds the caged processes status lists.
const maxKernelCaged = 100

// kernelCaged returns this host's processes the kernel cages, as its program decides
// (cagemark.Line: the executable the process or one of its ancestors runs, or one it caged
// once and remembers, never the name it gives itself), and a warning for each process of a known hypervisor's binary (every
// preset's user-space NAT on goos, judged by its executable whatever it calls itself) that
// it does not cage: its guests' traffic leaves as this host's own. Processes in another
// network namespace than the daemon's are neither.
func kernelCaged(cr cageReader, goos string) ([]control.KernelCagedStat, []string) {
	kc, err := cr.KernelCage()
	if err != nil {
		return nil, []string{"cannot read the kernel's cage to find uncaged hypervisors: " + err.Error()}
	}
	procs, err := cr.Processes()
	if err != nil {
		return nil, []string{"cannot list the processes to find uncaged hypervisors: " + err.Error()}
	}
	byPID := make(map[int]*proc.Info, len(procs))
	for i := range procs {
		byPID[procs[i].PID] = &procs[i]
	}
	known := rules.Rule{Apps: capture.UserNATApps(goos)}
	var caged []control.KernelCagedStat
	var warns []string
	more := 0
	for i := range procs {
		p := &procs[i]
		if kc.NetNS != 0 && p.NetNS != 0 && p.NetNS != kc.NetNS {
			continue // its sockets are another namespace's, which this cage does not see
		}
		var line []*proc.Info
		var gens []cagemark.Gen
		for q := p; q != nil && len(line) < cagemark.Generations; q = byPID[q.PPID] {
			line = append(line, q)
			gens = append(gens, cagemark.Gen{Exe: exeName(q), Once: kc.Once[q.PID]})
			if q.PPID == 0 || q.PPID == q.PID {
				break
			}
		}
		at := -1
		if kc.Installed {
			at = cagemark.Line(kc.Names, gens)
		}
		if at < 0 {
			if known.MatchApp(&rules.Query{Owner: p.Owner}) {
				warns = append(warns, fmt.Sprintf("%s (pid %d) is a hypervisor's user-space NAT and runs uncaged%s: its guests' traffic leaves as this host's own; name its hypervisor in [capture] hypervisors or its executable's name in a proxy rule's apps",
					p.App, p.PID, goesBy(p)))
			}
			continue
		}
		if len(caged) == maxKernelCaged {
			more++
			continue
		}
		c := control.KernelCagedStat{PID: p.PID, Exe: p.App, Comm: p.Comm}
		if at > 0 {
			c.By, c.ByPID = line[at].App, line[at].PID
		}
		caged = append(caged, c)
	}
	if more > 0 {
		warns = append(warns, fmt.Sprintf("%d more caged processes than status lists", more))
	}
	return caged, warns
}

// exeName is the name the kernel program reads for p: its executable's file name, none
// when its executable cannot be read (a kernel thread).
func exeName(p *proc.Info) string {
	if p.AppPath == "" {
		return ""
	}
	return p.App
}

// goesBy is " (named C)" when p calls itself C.
func goesBy(p *proc.Info) string {
	if p.Comm == "" {
		return ""
	}
	return " (named " + p.Comm + ")"
}
