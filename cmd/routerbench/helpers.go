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
	cmdSink  = "__sink"  // __sink [-https ADDR -cert FILE -key FILE] ADDR...: the lean sink on each address (and the HTTPS file server), until SIGTERM
	cmdSocks = "__socks" // __socks LISTEN EXIT: go-socks5 v0.1.0 connecting out from EXIT
	cmdModel = "__model" // __model -events N -gap D ADDR...: the streaming fake model server on each address, until SIGTERM
	cmdLoad  = "__load"  // __load get|rate|idle|fetch|stream FLAGS: one load run, JSON on stdout
)

// The agent's workload: the package-manager burst's file sizes (bench.FetchSizes) and the
// streamed model reply's shape.
const (
	fetchMin, fetchMax = 2 << 10, 200 << 10
	fetchSeed          = 27 // the same files, in the same order, for every row and round
	fetchPar           = 16
	streamEvents       = 40
	streamGap          = 2 * time.Millisecond
)

func helper(name string, args []string) int {
	var err error
	switch name {
	case cmdSink:
		err = runSink(args)
	case cmdSocks:
		err = runSocks(args)
	case cmdModel:
		err = runModel(args)
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

func runSink(args []string) error {
	fs := flag.NewFlagSet(cmdSink, flag.ContinueOnError)
	https := fs.String("https", "", "also serve the HTTPS file server (bench.FileServer) on this `address`")
	certFile := fs.String("cert", "", "its certificate, PEM `file`")
	keyFile := fs.String("key", "", "its key, PEM `file`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	addrs := fs.Args()
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
	if *https != "" {
		cert, err := os.ReadFile(*certFile)
		if err != nil {
			return err
		}
		key, err := os.ReadFile(*keyFile)
		if err != nil {
			return err
		}
		fsrv, err := bench.NewFileServer(cert, key)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", *https)
		if err != nil {
			return err
		}
		defer fsrv.Close()
		go fsrv.Serve(ln)
	}
	fmt.Println("ready")
	waitTerm()
	return nil
}

func runModel(args []string) error {
	fs := flag.NewFlagSet(cmdModel, flag.ContinueOnError)
	srv := bench.StreamServer{}
	fs.IntVar(&srv.Events, "events", streamEvents, "content events per streamed reply")
	fs.DurationVar(&srv.Gap, "gap", streamGap, "pause between events")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("no address")
	}
	for _, a := range fs.Args() {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return err
		}
		defer ln.Close()
		go srv.Serve(ln)
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
		return fmt.Errorf("usage: %s get|rate|idle|fetch|stream [flags] TARGET", cmdLoad)
	}
	mode := args[0]
	fs := flag.NewFlagSet(cmdLoad+" "+mode, flag.ContinueOnError)
	src := fs.String("src", "", "source `address`")
	socksAddr := fs.String("socks", "", "SOCKS5 server to go through")
	size := fs.Int64("size", 1<<30, "bytes per connection")
	count := fs.Int("n", 5000, "connections")
	par := fs.Int("par", 32, "connections at a time")
	host := fs.String("host", "", "rate: send the request's HTTP/1.1 form with this Host `name`; fetch: the name asked for (SNI, Host)")
	caFile := fs.String("ca", "", "fetch: the PEM `file` of the one certificate trusted")
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
	case "fetch":
		ca, err := os.ReadFile(*caFile)
		if err != nil {
			return err
		}
		res, err := bench.Fetch(ctx, d, target, *host, ca, bench.FetchSizes(*count, fetchMin, fetchMax, fetchSeed), *par)
		if err != nil {
			return err
		}
		return out.Encode(res)
	case "stream":
		res, err := bench.Stream(ctx, d, target, *count)
		if err != nil {
			return err
		}
		return out.Encode(res)
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
