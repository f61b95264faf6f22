package cagemark

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// Offsets in the programs' stack (from R10) and in the structures they read.
const (
	stKey       = -4  // u32: key 0 of the config map
	stMark      = -8  // u32: the mark, for bpf_setsockopt
	stPtr       = -16 // u64: a pointer read from the kernel
	stLPM       = -88 // u32 prefix length, then the nameLen bytes of the name: the names trie's key
	stName      = -84
	stSelf      = -112        // the calling process's key in the procs map: u32 tgid, u32 0, u64 start time
	stProc      = -128        // an ancestor's key in the procs map
	stVal       = -136        // u8 1: the procs map's value
	nameLen     = nameMax + 1 // bytes of an executable's name the program reads, the NUL included
	offCookie   = 0           // config value: u64 network namespace cookie
	offMark     = 8           //               u32 mark
	offSockMark = 16          // struct bpf_sock: bound_dev_if, family, type, protocol, mark
	offAddrSk   = 64          // struct bpf_sock_addr: ..., msg_src_ip6[4], then the socket
	solSocket   = 1           // SOL_SOCKET
	soMark      = 36          // SO_MARK
)

// hook is one cgroup hook the package attaches a program to.
type hook struct {
	name   string // the program's name (at most 15 bytes)
	typ    ebpf.ProgramType
	attach ebpf.AttachType
}

// hooks: socket creation marks the socket; connect marks a socket a caged process made
// before the program was there (a NAT's pool of sockets opened at its start); sendmsg
// refuses a datagram such an unmarked socket sends unconnected (the kernel lets no
// program set a mark there).
var hooks = []hook{
	{"router_cage", ebpf.CGroupSock, ebpf.AttachCGroupInetSockCreate},
	{"router_cage_c4", ebpf.CGroupSockAddr, ebpf.AttachCGroupInet4Connect},
	{"router_cage_c6", ebpf.CGroupSockAddr, ebpf.AttachCGroupInet6Connect},
	{"router_cage_s4", ebpf.CGroupSockAddr, ebpf.AttachCGroupUDP4Sendmsg},
	{"router_cage_s6", ebpf.CGroupSockAddr, ebpf.AttachCGroupUDP6Sendmsg},
}

// program is the program of hook h, for the kernel layout l. In C:
//
//	c = config[0]; if (!c || bpf_get_netns_cookie(ctx) != c->cookie) return 1;
//	t = bpf_get_current_task();
//	self = {t->tgid, t->group_leader->start_time};   // bpf_probe_read_kernel
//	for (i = 0; i < Generations; i++) {    // unrolled
//		if (procs[{t->tgid, t->group_leader->start_time}]) goto caged;  // caged before
//		key = {nameLen*8, t->mm->exe_file->f_path.dentry->d_name.name};   // bpf_probe_read_kernel(_str)
//		if (t->mm && t->mm->exe_file && names[key]) goto caged;   // longest prefix: an exact name or a "prefix*"
//		p = t->real_parent; if (!p || p == t) return 1; t = p;
//	}
//	return 1;
//	caged:
//	procs[self] = 1;                       // caged for as long as it lives, whatever it executes
//	sock_create:  ctx->mark = c->mark;
//	connect:      if (ctx->sk->mark != c->mark) bpf_setsockopt(ctx, SOL_SOCKET, SO_MARK, &c->mark, 4);
//	sendmsg:      if (ctx->sk->mark != c->mark) return 0;   // EPERM
//	return 1;
//
// The calling task's mm is its process's, shared by every thread: what a thread or the
// process calls itself (comm) plays no part.
func program(h hook, l layout, config, names, procs int) asm.Instructions {
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.StoreImm(asm.RFP, stKey, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, config),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stKey),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.FnGetNetnsCookie.Call(),
		asm.LoadMem(asm.R1, asm.R7, offCookie, asm.DWord),
		asm.JNE.Reg(asm.R0, asm.R1, "pass"),
		asm.FnGetCurrentTask.Call(),
		asm.Mov.Reg(asm.R8, asm.R0),
	}
	// read puts in R3 the pointer at R3+off (0 when it cannot be read).
	read := func(off int16) asm.Instructions {
		return asm.Instructions{
			asm.Add.Imm(asm.R3, int32(off)),
			asm.Mov.Reg(asm.R1, asm.RFP),
			asm.Add.Imm(asm.R1, stPtr),
			asm.Mov.Imm(asm.R2, 8),
			asm.FnProbeReadKernel.Call(),
			asm.LoadMem(asm.R3, asm.RFP, stPtr, asm.DWord),
		}
	}
	// procKey writes at the stack offset at the procs map's key of the task in R8, and
	// jumps to caged when the map has it.
	procKey := func(at int16) asm.Instructions {
		insns := asm.Instructions{
			asm.StoreImm(asm.RFP, at, 0, asm.Word),
			asm.StoreImm(asm.RFP, at+4, 0, asm.Word),
			asm.Mov.Reg(asm.R1, asm.RFP),
			asm.Add.Imm(asm.R1, int32(at)),
			asm.Mov.Imm(asm.R2, 4),
			asm.Mov.Reg(asm.R3, asm.R8),
			asm.Add.Imm(asm.R3, int32(l.taskTgid)),
			asm.FnProbeReadKernel.Call(),
			asm.Mov.Reg(asm.R3, asm.R8),
		}
		insns = append(insns, read(l.taskLeader)...)
		return append(insns,
			asm.Add.Imm(asm.R3, int32(l.taskStart)),
			asm.Mov.Reg(asm.R1, asm.RFP),
			asm.Add.Imm(asm.R1, int32(at)+8),
			asm.Mov.Imm(asm.R2, 8),
			asm.FnProbeReadKernel.Call(),
			asm.LoadMapPtr(asm.R1, procs),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, int32(at)),
			asm.FnMapLookupElem.Call(),
			asm.JNE.Imm(asm.R0, 0, "caged"),
		)
	}
	for i := range Generations {
		up := fmt.Sprintf("up%d", i)
		if i == 0 {
			insns = append(insns, procKey(stSelf)...)
		} else {
			insns = append(insns, procKey(stProc)...)
		}
		insns = append(insns, asm.Mov.Reg(asm.R3, asm.R8))
		insns = append(insns, read(l.taskMM)...)
		insns = append(insns, asm.JEq.Imm(asm.R3, 0, up)) // a kernel thread
		insns = append(insns, read(l.mmExe)...)
		insns = append(insns, asm.JEq.Imm(asm.R3, 0, up))
		insns = append(insns, read(l.fileDentry)...)
		insns = append(insns, read(l.dentryName)...)
		insns = append(insns,
			asm.Mov.Reg(asm.R1, asm.RFP),
			asm.Add.Imm(asm.R1, stName),
			asm.Mov.Imm(asm.R2, nameLen),
			asm.FnProbeReadKernelStr.Call(),
			asm.StoreImm(asm.RFP, stLPM, nameLen*8, asm.Word),
			asm.LoadMapPtr(asm.R1, names),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, stLPM),
			asm.FnMapLookupElem.Call(),
			asm.JNE.Imm(asm.R0, 0, "caged"),
		)
		if i == Generations-1 {
			insns = append(insns, asm.Ja.Label("pass").WithSymbol(up))
			break
		}
		insns = append(insns, asm.Mov.Reg(asm.R3, asm.R8).WithSymbol(up))
		insns = append(insns, read(l.taskParent)...)
		insns = append(insns,
			asm.JEq.Imm(asm.R3, 0, "pass"),
			asm.JEq.Reg(asm.R3, asm.R8, "pass"), // init_task is its own parent
			asm.Mov.Reg(asm.R8, asm.R3),
		)
	}
	insns = append(insns,
		asm.StoreImm(asm.RFP, stVal, 1, asm.Word).WithSymbol("caged"),
		asm.LoadMapPtr(asm.R1, procs),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stSelf),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, stVal),
		asm.Mov.Imm(asm.R4, 0), // BPF_ANY
		asm.FnMapUpdateElem.Call(),
		asm.LoadMem(asm.R8, asm.R7, offMark, asm.Word),
	)
	switch h.attach {
	case ebpf.AttachCGroupInetSockCreate:
		insns = append(insns, asm.StoreMem(asm.R6, offSockMark, asm.R8, asm.Word))
	case ebpf.AttachCGroupInet4Connect, ebpf.AttachCGroupInet6Connect:
		insns = append(insns,
			asm.LoadMem(asm.R1, asm.R6, offAddrSk, asm.DWord),
			asm.LoadMem(asm.R1, asm.R1, offSockMark, asm.Word),
			asm.JEq.Reg(asm.R1, asm.R8, "pass"),
			asm.StoreMem(asm.RFP, stMark, asm.R8, asm.Word),
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Mov.Imm(asm.R2, solSocket),
			asm.Mov.Imm(asm.R3, soMark),
			asm.Mov.Reg(asm.R4, asm.RFP),
			asm.Add.Imm(asm.R4, stMark),
			asm.Mov.Imm(asm.R5, 4),
			asm.FnSetsockopt.Call(),
		)
	default: // sendmsg
		insns = append(insns,
			asm.LoadMem(asm.R1, asm.R6, offAddrSk, asm.DWord),
			asm.LoadMem(asm.R1, asm.R1, offSockMark, asm.Word),
			asm.JEq.Reg(asm.R1, asm.R8, "pass"),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		)
	}
	return append(insns,
		asm.Mov.Imm(asm.R0, 1).WithSymbol("pass"),
		asm.Return(),
	)
}
