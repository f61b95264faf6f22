package modelfwd

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestModelForwardRefusalBeforeBody: a request refused before its body was read (declared
// over max_body, or a chunked body cut at max_body) is answered 403 and the client, which
// writes its whole body before it reads, gets the whole body written, the 403, and then an
// orderly end of stream: never a reset. The client's send buffer is kept small so that the
// body cannot wait in the kernel's buffers: the forward must read it.
func TestModelForwardRefusalBeforeBody(t *testing.T) {
	e := newEnv(t, 0)
	const max = 64 << 10
	_, addr := startModelForward(t, e, 1, 0, max)
	// A JSON body (the forward checks bodies as JSON as they stream), 1 MiB: over max_body.
	body := `{"input":"` + strings.Repeat("x", 1<<20-13) + `"}`
	var chunked strings.Builder
	fmt.Fprintf(&chunked, "POST /api/embed HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n", addr)
	for rest := body; rest != ""; {
		n := min(len(rest), 16<<10)
		fmt.Fprintf(&chunked, "%x\r\n%s\r\n", n, rest[:n])
		rest = rest[n:]
	}
	chunked.WriteString("0\r\n\r\n")
	cases := []struct{ name, raw string }{
		{"declared length", fmt.Sprintf("POST /api/chat HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)},
		{"chunked", chunked.String()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			tc := conn.(*net.TCPConn)
			if err := tc.SetWriteBuffer(4 << 10); err != nil {
				t.Fatal(err)
			}
			conn.SetDeadline(time.Now().Add(waitFor))
			if _, err := io.WriteString(conn, c.raw); err != nil {
				t.Fatalf("writing the request: %v; want the forward to read the refused body", err)
			}
			br := bufio.NewReader(conn)
			resp, b := readAnswer(t, br, "reading the answer")
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "max_body") {
				t.Errorf("answer %d %q; want 403 naming max_body", resp.StatusCode, b)
			}
			if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
				t.Errorf("after the answer: %d bytes, %v; want io.EOF", n, err)
			}
		})
	}
}
