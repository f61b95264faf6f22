package router

import (
	"io"
	"testing"
	"time"

	"github.com/agentcage/router/router/upload"
)

// BenchmarkRelayUp moves bytes up one relayed loopback flow (splice on Linux, the copy
// elsewhere), 1 MiB an iteration: without an upload budget (the relay's nil counter) and
// with one it never passes (a count per chunk).
func BenchmarkRelayUp(b *testing.B) {
	b.Run("none", func(b *testing.B) { benchRelayUp(b, &meter{}) })
	budget := upload.New(upload.Limits{PerDomain: 1 << 62, Window: time.Hour}, nil, nil)
	b.Run("budget", func(b *testing.B) { benchRelayUp(b, &meter{upload: budget.Flow("g", "example.com")}) })
}

func benchRelayUp(b *testing.B, m *meter) {
	rl := newTestRelay(b, time.Minute)
	app, a := tcpPair(b)
	bc, peer := tcpPair(b)
	done := make(chan result, 1)
	rl.start(a, bc, m, func(r result) { done <- r })
	chunk := make([]byte, 1<<20)
	b.SetBytes(int64(len(chunk)))
	read := make(chan error, 1)
	go func() {
		_, err := io.CopyN(io.Discard, peer, int64(b.N)*int64(len(chunk)))
		read <- err
	}()
	b.ResetTimer()
	for range b.N {
		if _, err := app.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-read; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	app.Close()
	peer.Close()
	<-done
}
