package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// StreamServer is a fake OpenAI-compatible model server for the streamed reply of the
// agent's workload: POST /v1/chat/completions answers Events server-sent events Gap apart,
// each stamped with the time it was written, then "data: [DONE]"; GET /v1/models lists one
// model. The stamp lets a client on the same machine tell each event's latency from the
// server's write to its own read.
type StreamServer struct {
	Events int
	Gap    time.Duration
}

// streamModel is the one model the StreamServer lists.
const streamModel = "bench-model"

// stampPrefix starts every content event; the stamp (Unix ns) follows up to the comma.
const stampPrefix = `{"ns":`

// Handler is the server's HTTP handler.
func (s StreamServer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"`+streamModel+`","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := range s.Events {
			if i > 0 && s.Gap > 0 {
				time.Sleep(s.Gap)
			}
			fmt.Fprintf(w, "data: %s%d,\"object\":\"chat.completion.chunk\",\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"token %d \"}}]}\n\n",
				stampPrefix, time.Now().UnixNano(), streamModel, i)
			if rc.Flush() != nil {
				return
			}
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	return mux
}

// Serve serves the model on ln until ln is closed; it then returns nil.
func (s StreamServer) Serve(ln net.Listener) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	err := srv.Serve(ln)
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// StreamResult is a series of streamed replies.
type StreamResult struct {
	Streams int `json:"streams"`
	Events  int `json:"events"` // content events per stream
	// TTFB: from writing the request to reading the first event, µs.
	TTFBP50 float64 `json:"ttfb_p50_us"`
	TTFBP99 float64 `json:"ttfb_p99_us"`
	// Gap: between two events' reads, as the client saw them, µs.
	GapP50 float64 `json:"gap_p50_us"`
	GapP99 float64 `json:"gap_p99_us"`
	// Latency: from the server's write (the event's stamp) to the client's read, µs; the
	// events after the first.
	LatP50 float64 `json:"lat_p50_us"`
	LatP99 float64 `json:"lat_p99_us"`
}

// Stream asks the StreamServer at target (dialed with d) for n streamed chat completions,
// one after another on one keep-alive connection, as a coding agent's HTTP client does, and
// times each event. Every stream must end with [DONE] and carry as many events as the first.
func Stream(ctx context.Context, d Dialer, target string, n int) (StreamResult, error) {
	c, err := d.Dial(ctx, target)
	if err != nil {
		return StreamResult{}, fmt.Errorf("stream: connect: %w", err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	br := bufio.NewReader(c)
	body := `{"model":"` + streamModel + `","stream":true,"messages":[{"role":"user","content":"write the function"}]}`
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: " + target + "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
	var ttfb, gaps, lat []time.Duration
	res := StreamResult{Streams: n, Events: -1}
	for k := range n {
		c.SetDeadline(time.Now().Add(30 * time.Second))
		start := time.Now()
		if _, err := io.WriteString(c, req); err != nil {
			return res, fmt.Errorf("stream %d: request: %w", k, err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return res, fmt.Errorf("stream %d: response: %w", k, err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return res, fmt.Errorf("stream %d: %s", k, resp.Status)
		}
		ev := bufio.NewReader(resp.Body)
		events, done := 0, false
		var last time.Time
		for !done {
			line, err := ev.ReadString('\n')
			if err != nil {
				resp.Body.Close()
				return res, fmt.Errorf("stream %d: after %d events: %w", k, events, err)
			}
			data, ok := trimData(line)
			if !ok {
				continue
			}
			if data == "[DONE]" {
				done = true
				continue
			}
			now := time.Now()
			stamp, _, _ := strings.Cut(strings.TrimPrefix(data, stampPrefix), ",")
			ns, err := strconv.ParseInt(stamp, 10, 64)
			if err != nil {
				resp.Body.Close()
				return res, fmt.Errorf("stream %d: event %q: no stamp", k, data)
			}
			if events == 0 {
				ttfb = append(ttfb, now.Sub(start))
			} else {
				gaps = append(gaps, now.Sub(last))
				lat = append(lat, now.Sub(time.Unix(0, ns)))
			}
			last = now
			events++
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if res.Events < 0 {
			res.Events = events
		} else if events != res.Events {
			return res, fmt.Errorf("stream %d: %d events, the first stream had %d", k, events, res.Events)
		}
	}
	res.TTFBP50, res.TTFBP99 = us(quantile(ttfb, 0.5)), us(quantile(ttfb, 0.99))
	res.GapP50, res.GapP99 = us(quantile(gaps, 0.5)), us(quantile(gaps, 0.99))
	res.LatP50, res.LatP99 = us(quantile(lat, 0.5)), us(quantile(lat, 0.99))
	return res, nil
}
