package socks5_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
)

// h decodes hex written with optional spaces: h("05 01 00").
func h(s string) string {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(fmt.Sprintf("bad hex %q: %v", s, err))
	}
	return string(b)
}

// step is one exchange of a scripted server: once the client has written
// the bytes of client (after those of the earlier steps), the server sends
// server.
type step struct {
	client string
	server string
}

// errDeadlock is what a scripted Read returns when the client waits for
// bytes the server would only send after more client bytes: on a real
// connection both sides would wait for the deadline.
var errDeadlock = errors.New("script: client reads, server waits for the client")

// scriptConn is the server side of a conversation as a script of bytes.
// It checks that the client writes exactly the scripted bytes, and, in lock
// step, that the client writes only after it has read every byte the server
// sent. The server's bytes of a step are released when the client has
// written all client bytes up to that step; when every step is released and
// read, Read returns io.EOF (the server closed).
type scriptConn struct {
	steps    []step
	lockstep bool // writes only with no unread server bytes
	oneByte  bool // Read returns at most one byte

	want     string // all client bytes of the script
	written  []byte
	writes   int
	released int
	in       bytes.Buffer // server bytes sent but not yet read
	err      error        // first script violation
}

func newScript(lockstep bool, steps ...step) *scriptConn {
	s := &scriptConn{steps: steps, lockstep: lockstep}
	for _, st := range steps {
		s.want += st.client
	}
	s.release()
	return s
}

func (s *scriptConn) fail(err error) error {
	if s.err == nil {
		s.err = err
	}
	return err
}

func (s *scriptConn) release() {
	n := 0
	for i := 0; i < len(s.steps); i++ {
		n += len(s.steps[i].client)
		if i < s.released {
			continue
		}
		if len(s.written) < n {
			return
		}
		s.in.WriteString(s.steps[i].server)
		s.released++
	}
}

func (s *scriptConn) Write(p []byte) (int, error) {
	s.writes++
	if s.lockstep && s.in.Len() > 0 {
		return 0, s.fail(fmt.Errorf("script: client wrote % x with %d server bytes unread", p, s.in.Len()))
	}
	s.written = append(s.written, p...)
	if !strings.HasPrefix(s.want, string(s.written)) {
		return 0, s.fail(fmt.Errorf("script: client wrote % x, want % x", s.written, s.want))
	}
	s.release()
	return len(p), nil
}

func (s *scriptConn) Read(p []byte) (int, error) {
	if s.in.Len() > 0 {
		if s.oneByte && len(p) > 1 {
			p = p[:1]
		}
		return s.in.Read(p)
	}
	for _, st := range s.steps[s.released:] {
		if st.server != "" {
			return 0, s.fail(errDeadlock)
		}
	}
	return 0, io.EOF // the server has nothing more to send: it closed
}

// conversation builds the script of one handshake. client holds the
// client's messages in order, server the server's answers (fewer when the
// server stops early; the last may be cut short; the server closes after
// its last byte). trailer follows the last answer: the target's first
// bytes. In lock step, message i is answered by answer i, and the client
// must have written its first sent messages, each in its own write.
// Pipelined, the client must send all its messages in one write. It returns
// the conn and the bytes the client must have written.
func conversation(pipeline bool, client, server []string, trailer string, sent int) (conn *scriptConn, wantWritten string) {
	server = append([]string(nil), server...)
	if len(server) == 0 {
		server = []string{""}
	}
	server[len(server)-1] += trailer
	if pipeline {
		all := strings.Join(client, "")
		return newScript(false, step{all, strings.Join(server, "")}), all
	}
	var steps []step
	for i, msg := range client {
		ans := ""
		if i < len(server) {
			ans = server[i]
		}
		steps = append(steps, step{msg, ans})
	}
	return newScript(true, steps...), strings.Join(client[:sent], "")
}

// cut returns the answers cut to their first n bytes in all.
func cut(answers []string, n int) []string {
	var out []string
	for _, a := range answers {
		if n <= 0 {
			break
		}
		if len(a) > n {
			a = a[:n]
		}
		out = append(out, a)
		n -= len(a)
	}
	return out
}
