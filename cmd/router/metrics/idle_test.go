package metrics

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestIdleConnectionsDoNotBlockScrapes: 64 connections that send nothing (a guest holding
// the endpoint) used to fill its 16 slots for 5 s each, and 7 of 10 scrapes failed. Now the
// oldest idle one makes room for a new connection, and every scrape is answered at once.
func TestIdleConnectionsDoNotBlockScrapes(t *testing.T) {
	base, _ := serve(t, fakeStatus)
	addr := strings.TrimPrefix(base, "http://")
	var idle []net.Conn
	for range 64 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	t.Cleanup(func() {
		for _, c := range idle {
			c.Close()
		}
	})
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var worst time.Duration
	for i := range 10 {
		start := time.Now()
		resp, err := client.Get(base + Path)
		if err != nil {
			t.Errorf("scrape %d: %v", i, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("scrape %d: %s", i, resp.Status)
		}
		worst = max(worst, time.Since(start))
	}
	t.Logf("10 scrapes past 64 idle connections: slowest %v", worst)

	// The idle ones are closed soon (a second without a request): each read ends with the
	// server's close, never a timeout of ours.
	for i, c := range idle {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
			t.Fatalf("idle connection %d: read %v, want it closed by the server within 10 s", i, err)
		}
	}
}
