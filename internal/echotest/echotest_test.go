package echotest

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/agentcage/router/internal/winetest"
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

func TestUDP(t *testing.T) {
	if !winetest.UDPUsable(t) {
		return // Wine 8 makes no UDP socket at all (UDPUsable logs it): nothing to echo
	}
	addr := UDP(t, "echo:")
	c, err := net.Dial("udp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	n, err := c.Read(b)
	if err != nil || string(b[:n]) != "echo:ping" {
		t.Errorf("answer %q, %v; want the prefix then the datagram", b[:n], err)
	}
}
