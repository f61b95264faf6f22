package main

import (
	"fmt"
	"io"
	"strings"
)

// cmdMan prints the man page, router(1), in roff: every command with its usage, its help
// and its flags, as the commands' own flag sets define them (describe). Hidden: the
// package runs it at build time.
func cmdMan(args []string, stdout, stderr io.Writer) int {
	if len(args) != 0 {
		fmt.Fprintln(stderr, "usage: router man")
		return exitUsage
	}
	io.WriteString(stdout, manPage(describe()))
	return exitOK
}

// roff escapes text for a roff line: backslashes, a leading dot or quote, hyphens.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// roffText is a paragraph of text: its lines joined, each escaped.
func roffText(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			b.WriteString(roff(l) + "\n")
		}
	}
	return b.String()
}

func manPage(cmds []commandDoc) string {
	var b strings.Builder
	b.WriteString(`.TH ROUTER 1 "" "router" "User Commands"
.SH NAME
router \- egress firewall and SOCKS5 router for a VM\-caged coding agent
.SH SYNOPSIS
.B router
.I command
[\fIflags\fR]
.br
.B router \-\-version
.SH DESCRIPTION
Every byte the virtual machine emits goes through an upstream proxy, except what a direct
rule allows; DNS never leaks; the cage stays closed when something fails (the fail\-closed
guard blocks VM traffic whenever no router runs).
The daemon runs as the systemd unit
.B router.service
(the guard at boot as
.BR router\-guard.service );
the other commands read the config or ask the running daemon over its control socket.
.SH COMMANDS
`)
	for _, c := range cmds {
		fmt.Fprintf(&b, ".SS \"router %s %s\"\n", roff(c.Name), strings.ReplaceAll(roff(c.Usage), `"`, `\(dq`))
		detail := c.Detail
		if detail == "" {
			detail = c.Summary
		}
		b.WriteString(roffText(detail))
		for _, f := range c.Flags {
			b.WriteString(".TP\n")
			fmt.Fprintf(&b, `.B \-\-%s`, roff(f.Name))
			if f.Arg != "" {
				fmt.Fprintf(&b, ` " \fI%s\fR"`, roff(f.Arg))
			}
			b.WriteString("\n")
			u := f.Usage
			if f.Def != "" {
				u += " (default " + f.Def + ")"
			}
			b.WriteString(roffText(u))
		}
	}
	b.WriteString(`.SH EXIT STATUS
0 on success; 1 when a command ran and found a problem (lint findings, a leak found by
check\-ip, a refused reload); 2 for bad arguments, an invalid config, or a missing privilege
(run, guard and cleanup need root, or CAP_NET_ADMIN; on Windows an elevated prompt).
.SH FILES
.TP
.I /etc/router/router.toml
the config (read\-only to the daemon; examples in /etc/router/examples)
.TP
.I /etc/router/env
the proxy password as ROUTER_PROXY_PASSWORD=..., mode 600 (or password_file)
.TP
.I /var/lib/router
the state directory: the approved rules (approved.toml), a learning session's flow log
(flows.jsonl) and the last good guard
.TP
.I /run/router/control.sock
the control socket of the running daemon (root only)
.SH SEE ALSO
.BR systemctl (1),
.BR nft (8);
/usr/share/doc/router/install.md, /usr/share/doc/router/config.md
`)
	return b.String()
}
