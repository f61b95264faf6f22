package auditlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// MaxLine bounds a line of the flow log when it is read back (its records are a few hundred
// bytes).
const MaxLine = 64 << 10

// LineError is a line of the flow log that is not a record.
type LineError struct {
	File string
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// Read calls add with each record of the flow log r (named file, for errors), in order. A
// line that is not a JSON record ends the read with a *LineError, except a last line cut
// short (the daemon may be writing it). It is the one reader of the log: `router learn` and
// `router diff` both read through it.
func Read(r io.Reader, file string, add func(Record)) error {
	br := bufio.NewReaderSize(r, MaxLine)
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			return &LineError{file, n, fmt.Errorf("a line longer than %d bytes", MaxLine)}
		}
		last := err == io.EOF
		if err != nil && !last {
			return fmt.Errorf("read %s: %w", file, err)
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			var rec Record
			if jerr := json.Unmarshal(line, &rec); jerr != nil {
				if last {
					return nil // a record still being written
				}
				return &LineError{file, n, fmt.Errorf("not a flow log record: %w", jerr)}
			}
			add(rec)
		}
		if last {
			return nil
		}
	}
}
