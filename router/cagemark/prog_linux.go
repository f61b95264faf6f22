package cagemark

import "github.com/cilium/ebpf/asm"

// Offsets in the program's stack (from R10) and in its maps' values.
const (
	stKey       = -4  // u32: key 0 of the config map
	stLPM       = -24 // u32 prefix length, then the 16 bytes of comm: the names trie's key
	stComm      = -20
	commLen     = 16 // TASK_COMM_LEN, the NUL included
	offCookie   = 0  // config value: u64 network namespace cookie
	offMark     = 8  //               u32 mark
	offSockMark = 16 // struct bpf_sock: bound_dev_if, family, type, protocol, mark
)

// program runs at every inet socket's creation. In C:
//
//	c = config[0]; if (!c || bpf_get_netns_cookie(sk) != c->cookie) return 1;
//	key = {128, comm}; bpf_get_current_comm(key.comm, 16);
//	if (names[key]) sk->mark = c->mark;   // longest prefix: an exact name or a "prefix*"
//	return 1;                              // never refuses a socket
func program(config, names int) asm.Instructions {
	return asm.Instructions{
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

		asm.StoreImm(asm.RFP, stLPM, commLen*8, asm.Word),
		asm.Mov.Reg(asm.R1, asm.RFP),
		asm.Add.Imm(asm.R1, stComm),
		asm.Mov.Imm(asm.R2, commLen),
		asm.FnGetCurrentComm.Call(),
		asm.LoadMapPtr(asm.R1, names),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stLPM),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R1, asm.R7, offMark, asm.Word),
		asm.StoreMem(asm.R6, offSockMark, asm.R1, asm.Word),

		asm.Mov.Imm(asm.R0, 1).WithSymbol("pass"),
		asm.Return(),
	}
}
