package echotest

import (
	"io"
	"net"
	"testing"
	"time"
)

func TestBanner(t *testing.T) {
	addr := Banner(t, "hello\n", 5*time.Second)
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len("hello\nping"))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != "hello\nping" {
		t.Errorf("read %q, want the banner then the echo", got)
	}
}
