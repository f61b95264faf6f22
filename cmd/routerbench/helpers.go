//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/agentcage/router/internal/bench"
	socks5 "github.com/things-go/go-socks5"
)

// The hidden subcommands: the driver re-executes itself inside a namespace (`ip netns exec`)
// for every server and every load run, so that each is a process of its own and its CPU
// time is billed to it alone.
const (
	cmdSink  = "__sink"  // __sink ADDR...: the lean sink on each address, until SIGTERM
	cmdSocks = "__socks" // __socks LISTEN EXIT: go-socks5 v0.1.0 connecting out from EXIT
	cmdLoad  = "__load"  // __load get|rate|idle FLAGS: one load run, JSON on stdout
)

func helper(name string, args []string) int {
	var err error
	switch name {
	case cmdSink:
		err = runSink(args)
	case cmdSocks:
		err = runSocks(args)
	case cmdLoad:
		err = runLoad(args)
	default:
		err = fmt.Errorf("unknown helper %q", name)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "routerbench %s: %v\n", name, err)
		return 1
	}
	return 0
}

// waitTerm blocks until SIGTERM or SIGINT.
func waitTerm() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
}

func runSink(addrs []string) error {
	if len(addrs) == 0 {
		return fmt.Errorf("no address")
	}
	s := bench.NewSink()
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return err
		}
		defer ln.Close()
		go s.Serve(ln)
	}
	fmt.Println("ready")
	waitTerm()
	return nil
}

func runSocks(args []string) error {
	fs := flag.NewFlagSet(cmdSocks, flag.ContinueOnError)
	plain := fs.Bool("nosplice", false, "hide the dialed connection's type, so go-socks5 copies with buffers and holds no pipe while a flow is idle")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return fmt.Errorf("usage: %s [-nosplice] LISTEN EXIT", cmdSocks)
	}
	args = fs.Args()
	exit, err := netip.ParseAddr(args[1])
	if err != nil {
		return err
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: exit.AsSlice()}}
	dial := d.DialContext
	if *plain {
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return noSplice{c}, nil
		}
	}
	srv := socks5.NewServer(socks5.WithDial(dial))
	ln, err := net.Listen("tcp", args[0])
	if err != nil {
		return err
	}
	defer ln.Close()
	// go-socks5's own Serve returns at the first accept error (out of descriptors while the
	// memory rows hold thousands of flows): accept here and retry instead.
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			go func() {
				srv.ServeConn(c)
				c.Close()
			}()
		}
	}()
	fmt.Println("ready")
	waitTerm()
	return nil
}

// noSplice hides a connection's ReaderFrom and WriterTo (so io.Copy uses a buffer, not
// splice pipes) but keeps CloseWrite, which go-socks5 uses to pass a half-close on.
type noSplice struct{ net.Conn }

func (c noSplice) CloseWrite() error { return c.Conn.(*net.TCPConn).CloseWrite() }

func runLoad(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: %s get|rate|idle [flags] TARGET", cmdLoad)
	}
	mode := args[0]
	fs := flag.NewFlagSet(cmdLoad+" "+mode, flag.ContinueOnError)
	src := fs.String("src", "", "source `address`")
	socksAddr := fs.String("socks", "", "SOCKS5 server to go through")
	size := fs.Int64("size", 1<<30, "bytes per connection")
	count := fs.Int("n", 5000, "connections")
	par := fs.Int("par", 32, "connections at a time")
	host := fs.String("host", "", "rate: send the request's HTTP/1.1 form with this Host `name`")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("want one target, got %q", fs.Args())
	}
	target := fs.Arg(0)
	d := bench.Dialer{Socks: *socksAddr}
	if *src != "" {
		a, err := netip.ParseAddr(*src)
		if err != nil {
			return err
		}
		d.Src = a
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	out := json.NewEncoder(os.Stdout)
	switch mode {
	case "get":
		res, err := bench.Get(ctx, d, target, *size)
		if err != nil {
			return err
		}
		return out.Encode(res)
	case "rate":
		return out.Encode(bench.RateRequest(ctx, d, target, bench.Request(int(*size), *host), *count, *par, int(*size)))
	case "idle":
		set, err := bench.Idle(ctx, d, target, *count, *par)
		if err != nil {
			return err
		}
		defer set.Close()
		if err := out.Encode(map[string]int{"open": set.Len()}); err != nil {
			return err
		}
		// Hold the flows until the driver closes our stdin (or stops us).
		done := make(chan struct{})
		go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
		}
		return nil
	default:
		return fmt.Errorf("unknown load mode %q", mode)
	}
}
