package modelfwd

import (
	"io"

	"github.com/agentcage/router/rules/modelapi"
)

// checkedBody is a request body as the proxy reads it, judged as it streams
// (modelapi.BodyCheck): the bytes of a read go on only once the check has read them, and a
// read that settles a refusal returns the *modelapi.BodyError instead of its bytes, as
// does the end of a body that is not one whole JSON value. The proxy's client then gives up
// the request before its body is whole, closing its connection to the server, and the
// forward answers the refusal (proxyError). A server never parses a body it did not receive
// whole, and every complete JSON value it could read from what it did receive was checked:
// a field is refused when its value ends, before the value around it can end. A small body
// never leaves the client's write buffer at all.
type checkedBody struct {
	rc    io.ReadCloser
	check *modelapi.BodyCheck
}

func (b *checkedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		if _, cerr := b.check.Write(p[:n]); cerr != nil {
			return 0, cerr
		}
	}
	if err == io.EOF {
		if cerr := b.check.Close(); cerr != nil {
			return 0, cerr
		}
	}
	return n, err
}

func (b *checkedBody) Close() error { return b.rc.Close() }
