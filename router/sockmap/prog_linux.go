package sockmap

import "github.com/cilium/ebpf/asm"

// maps are the descriptors the program refers to.
type maps struct{ socks, state, cookie, ring int }

// Return codes of an SK_SKB program.
const (
	skDrop = 0
	skPass = 1
)

// Stack slots of the program (offsets from R10).
const (
	stCookie = -8  // u64: the socket's cookie, the key of the cookie map
	stSlot   = -12 // u32: the socket's slot
	stPeer   = -16 // u32: the peer's slot
	stEvent  = -24 // u64: the ring buffer record (slot, 0)
	stSeq    = -28 // u32: the peer's write_seq
)

// program is the stream verdict, run on every segment a socket of the map receives. In C:
//
//	if (skb->len == 0) return SK_DROP;           // a bare FIN: the relay sees it itself
//	slot = cookies[cookie(skb)]; if none: return SK_PASS;
//	st = &state[slot]
//	if (st->passing) {
//		if (st->sent != st->passed) goto pass    // the relay still holds passed bytes
//		st->passing = 0                          // it sent them all: redirect again
//	}
//	peer = socks[slot ^ 1]; if none: goto stop
//	seq = tcp_sk(peer)->write_seq; release(peer)
//	if (!st->seq_set) { st->seq = seq - st->sent; st->seq_set = 1 }  // nothing queued yet
//	// what the peer's psock still queues: all that went to the peer minus what it took
//	if ((u32)(st->redirected + st->sent) - (seq - st->seq) > budget) goto stop
//	st->redirected += len; return sk_redirect_map(skb, socks, slot ^ 1, 0)
//	stop: st->passing = 1; st->trips++; ringbuf_output(slot)
//	pass: st->passed += len; return SK_PASS
//
// The verdicts of one socket never run at once (the socket's lock), so the counters need
// no atomic adds; the relay reads them as aligned words.
func program(m maps, seqOff, budget uint32) asm.Instructions {
	const (
		rSkb   = asm.R6
		rLen   = asm.R7
		rSock  = asm.R8 // the slot, then the peer's socket
		rState = asm.R9
	)
	return asm.Instructions{
		asm.Mov.Reg(rSkb, asm.R1),
		asm.LoadMem(rLen, rSkb, 0, asm.Word), // __sk_buff.len
		asm.JEq.Imm(rLen, 0, "drop"),

		asm.Mov.Reg(asm.R1, rSkb),
		asm.FnGetSocketCookie.Call(),
		asm.StoreMem(asm.RFP, stCookie, asm.R0, asm.DWord),
		asm.LoadMapPtr(asm.R1, m.cookie),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stCookie),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "unknown"),
		asm.LoadMem(rSock, asm.R0, 0, asm.Word),
		asm.StoreMem(asm.RFP, stSlot, rSock, asm.Word),
		asm.LoadMapPtr(asm.R1, m.state),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stSlot),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "unknown"),
		asm.Mov.Reg(rState, asm.R0),
		asm.LoadMem(asm.R1, rState, offPassing, asm.Word),
		asm.JEq.Imm(asm.R1, 0, "peer"),
		asm.LoadMem(asm.R1, rState, offSent, asm.DWord),
		asm.LoadMem(asm.R2, rState, offPassed, asm.DWord),
		asm.JNE.Reg(asm.R1, asm.R2, "pass"),
		asm.StoreImm(rState, offPassing, 0, asm.Word),

		// The peer and how far it is behind.
		asm.Mov.Reg(asm.R1, rSock).WithSymbol("peer"),
		asm.Xor.Imm(asm.R1, 1),
		asm.StoreMem(asm.RFP, stPeer, asm.R1, asm.Word),
		asm.LoadMapPtr(asm.R1, m.socks),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stPeer),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "stop"),
		asm.Mov.Reg(rSock, asm.R0),
		asm.Mov.Reg(asm.R1, rSock),
		asm.FnSkcToTcpSock.Call(),
		asm.JEq.Imm(asm.R0, 0, "release_stop"),
		asm.LoadMem(asm.R1, asm.R0, int16(seqOff), asm.Word),
		asm.StoreMem(asm.RFP, stSeq, asm.R1, asm.Word),
		asm.Mov.Reg(asm.R1, rSock),
		asm.FnSkRelease.Call(),
		asm.LoadMem(asm.R1, asm.RFP, stSeq, asm.Word),
		asm.LoadMem(asm.R2, rState, offSeqSet, asm.Word),
		asm.JNE.Imm(asm.R2, 0, "have_seq"),
		asm.Mov.Reg32(asm.R2, asm.R1),
		asm.LoadMem(asm.R3, rState, offSent, asm.DWord),
		asm.Sub.Reg32(asm.R2, asm.R3),
		asm.StoreMem(rState, offSeq, asm.R2, asm.Word),
		asm.StoreImm(rState, offSeqSet, 1, asm.Word),
		asm.LoadMem(asm.R2, rState, offSeq, asm.Word).WithSymbol("have_seq"),
		asm.Sub.Reg32(asm.R1, asm.R2),                         // how far the peer's write_seq advanced
		asm.LoadMem(asm.R3, rState, offRedirected, asm.DWord), // redirected (its low 32 bits below)
		asm.LoadMem(asm.R2, rState, offSent, asm.DWord),
		asm.Add.Reg32(asm.R3, asm.R2), // plus what the relay sent
		asm.Sub.Reg32(asm.R3, asm.R1), // queued on the peer's psock
		asm.JGT.Imm32(asm.R3, int32(budget), "stop"),

		asm.LoadMem(asm.R1, rState, offRedirected, asm.DWord),
		asm.Add.Reg(asm.R1, rLen),
		asm.StoreMem(rState, offRedirected, asm.R1, asm.DWord),
		asm.Mov.Reg(asm.R1, rSkb),
		asm.LoadMapPtr(asm.R2, m.socks),
		asm.LoadMem(asm.R3, asm.RFP, stPeer, asm.Word),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnSkRedirectMap.Call(),
		asm.Return(),

		asm.Mov.Reg(asm.R1, rSock).WithSymbol("release_stop"),
		asm.FnSkRelease.Call(),
		asm.StoreImm(rState, offPassing, 1, asm.Word).WithSymbol("stop"),
		asm.LoadMem(asm.R1, rState, offTrips, asm.Word),
		asm.Add.Imm32(asm.R1, 1),
		asm.StoreMem(rState, offTrips, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.RFP, stSlot, asm.Word),
		asm.StoreMem(asm.RFP, stEvent, asm.R1, asm.Word),
		asm.StoreImm(asm.RFP, stEvent+4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, m.ring),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stEvent),
		asm.Mov.Imm(asm.R3, 8),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnRingbufOutput.Call(),

		asm.LoadMem(asm.R1, rState, offPassed, asm.DWord).WithSymbol("pass"),
		asm.Add.Reg(asm.R1, rLen),
		asm.StoreMem(rState, offPassed, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, skPass),
		asm.Return(),

		asm.Mov.Imm(asm.R0, skPass).WithSymbol("unknown"),
		asm.Return(),
		asm.Mov.Imm(asm.R0, skDrop).WithSymbol("drop"),
		asm.Return(),
	}
}
