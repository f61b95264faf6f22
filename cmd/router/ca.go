package main

import (
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/broker/tlsca"
)

// cmdCA is `router ca`: the certificate of the router's own CA, the one that signs the
// certificates it shows a guest for the destinations whose TLS it terminates
// ([[credential]] tls_terminate). The CA is made in the state directory the first time
// (this command or the daemon); its key never leaves it.
func cmdCA(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("ca", "Prints the certificate (PEM) of the router's own CA, made in the state directory on first use: install it in the guests whose HTTPS to a destination with tls_terminate = true the router terminates (see docs/config.md).", stderr)
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	dir := conf.DefaultStateDir(runtime.GOOS, os.Getenv)
	ca, err := tlsca.LoadOrCreate(dir)
	if err != nil {
		fmt.Fprintf(stderr, "router ca: %v (the state directory %s)\n", err, dir)
		return exitFindings
	}
	stdout.Write(ca.CertPEM())
	return exitOK
}
