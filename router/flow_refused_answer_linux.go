package router

import (
	"fmt"

	"github.com/agentcage/router/router/sniff"
	"github.com/agentcage/router/rules/policy"
)

// answerRefused tells s's client that d refused its flow why (Router.answerRefused), from
// the loop: first bytes that are in already and are no HTTP request are reset at once, here;
// otherwise the wait for them and the answer run on a goroutine of the flow's own, which
// ends the flow.
func (l *loop) answerRefused(s *setupFlow, d policy.Decision) {
	r, f := s.ls.r, &s.f
	n, err := recvPeek(s.fd[0], l.sniffBuf[:])
	if err != nil {
		n = 0
	}
	if k := sniff.KindOf(l.sniffBuf[:n]); k != sniff.KindMore && k != sniff.KindHTTP {
		l.endEarly(s)
		return
	}
	c, err := fileConn(s.fd[0])
	s.fd[0], s.closed = -1, true
	if err != nil {
		f.Err = fmt.Errorf("hand the refused flow to a goroutine: %w", err)
		r.endFlowLater(f, func() { r.release(s.h) })
		return
	}
	go func() {
		r.answerRefused(c, f, d, nil)
		r.endFlow(f, func() { r.release(s.h) })
	}()
}
