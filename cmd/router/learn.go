package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/agentcage/router/cmd/router/learn"
	"github.com/agentcage/router/conf"
	"github.com/agentcage/router/router/auditlog"
)

// cmdLearn reads the flow log of a session (run with a rule that proxies every caged flow
// and [log] flows set) and prints what the caged traffic reached, or, with --suggest, an
// allow-list for it.
func cmdLearn(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("learn",
		"Reads the flow log ([log] flows) of a session in which a rule proxied every caged flow,\nand prints each destination the caged traffic reached (name, or the address of a flow that\ncame without one) with its flows, bytes, ports and when it was first and last seen. With\n--suggest it prints an allow-list instead: rules with hosts, one per registrable domain,\nthe shipped presets where they cover what was seen, as TOML to review and paste in place of\nthe catch-all rule. The rotated files (PATH.1 ...) are read too, oldest first.", stderr)
	cfgPath := fs.String("config", "", "the config `file` (its [log] flows names the log)")
	flows := fs.String("flows", "", "the flow log `file`, instead of the config's")
	suggest := fs.Bool("suggest", false, "print a proposed allow-list as TOML")
	proxy := fs.String("proxy", "", "the proxy `name` the proposed rules use (default: the one that carried most flows)")
	asJSON := jsonFlag(fs)
	if code, stop := parseFlags(fs, args); stop {
		return code
	}
	if *cfgPath == "" && *flows == "" {
		fmt.Fprintln(stderr, "router learn: --config or --flows is required")
		return exitUsage
	}
	var cfg *conf.Config
	if *cfgPath != "" {
		var err error
		if cfg, err = conf.Load(*cfgPath, stateOptions(conf.Options{SkipSecrets: true})); err != nil {
			fmt.Fprintln(stderr, err)
			return exitUsage
		}
		if *flows == "" {
			*flows = cfg.Log.Flows
		}
		if *flows == "" {
			// A learning session's default (router run --learn).
			*flows = filepath.Join(cfg.Policy.StateDir, conf.LearningFlows)
			if _, err := os.Stat(*flows); err != nil {
				fmt.Fprintf(stderr, "router learn: %s sets no [log] flows and there is no %s in the state directory %s: nothing was recorded (run a session with `router run --learn`, then learn)\n", *cfgPath, conf.LearningFlows, cfg.Policy.StateDir)
				return exitUsage
			}
		}
		if *proxy != "" {
			if _, ok := cfg.Proxy(*proxy); !ok {
				fmt.Fprintf(stderr, "router learn: --proxy %q: %s has no such [proxy]\n", *proxy, *cfgPath)
				return exitUsage
			}
		}
	}
	s := learn.NewSession()
	if err := readFlowLogs(*flows, s.Add); err != nil {
		fmt.Fprintf(stderr, "router learn: %v\n", err)
		return exitUsage
	}
	switch {
	case *suggest:
		var presets []learn.Preset
		for _, name := range conf.HostPresetNames() {
			hosts, _ := conf.LookupHostPreset(name)
			presets = append(presets, learn.Preset{Name: name, Hosts: hosts})
		}
		if err := s.Suggest(stdout, learn.Options{Proxy: *proxy, Presets: presets, Source: *flows}); err != nil {
			fmt.Fprintf(stderr, "router learn: %v\n", err)
			return exitUsage
		}
	case *asJSON:
		return writeJSON(stdout, stderr, learnJSON(s))
	default:
		printSession(stdout, s)
	}
	return exitOK
}

// readFlowLogs reads path's rotated files, oldest first (PATH.N ... PATH.1), then path, and
// calls add with each record.
func readFlowLogs(path string, add func(auditlog.Record)) error {
	files := auditlog.Files(path)
	for _, name := range files {
		f, err := os.Open(name)
		if errors.Is(err, fs.ErrNotExist) && name == path && len(files) > 1 {
			continue // rotated just now
		}
		if err != nil {
			return fmt.Errorf("open the flow log: %w", err)
		}
		err = auditlog.Read(f, name, add)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func printSession(w io.Writer, s *learn.Session) {
	if len(s.Dest) == 0 {
		fmt.Fprintf(w, "no caged flows in the flow log (%d other records)\n", s.Other)
		return
	}
	fmt.Fprintf(w, "%d caged flows to %d destinations, %s to %s\n", s.Records, len(s.Dest),
		s.First.Local().Format(time.DateTime), s.Last.Local().Format(time.DateTime))
	fmt.Fprintf(w, "%-40s %6s %7s %10s %10s  %-12s %s\n", "destination", "flows", "refused", "up", "down", "ports", "first / last seen")
	for _, d := range s.Sorted() {
		name := d.Name
		if name == "" {
			name = d.Addr.String() + " (no name)"
		}
		fmt.Fprintf(w, "%-40s %6d %7d %10d %10d  %-12s %s / %s\n", name, d.Flows, d.Refused, d.Up, d.Down, d.PortsText(),
			d.First.Local().Format(time.TimeOnly), d.Last.Local().Format(time.TimeOnly))
	}
	if s.BadName > 0 {
		fmt.Fprintf(w, "(%d flows named something that is no plain host name: left out)\n", s.BadName)
	}
}

type learnDest struct {
	Name    string         `json:"name,omitempty"`
	Addr    string         `json:"addr,omitempty"`
	Flows   int            `json:"flows"`
	Refused int            `json:"refused,omitempty"`
	Reasons map[string]int `json:"reasons,omitempty"`
	Up      int64          `json:"up"`
	Down    int64          `json:"down"`
	Ports   []uint16       `json:"ports,omitempty"`
	First   time.Time      `json:"first"`
	Last    time.Time      `json:"last"`
}

func learnJSON(s *learn.Session) any {
	out := []learnDest{}
	for _, d := range s.Sorted() {
		l := learnDest{Name: d.Name, Flows: d.Flows, Refused: d.Refused, Up: d.Up, Down: d.Down, Ports: d.PortList(), First: d.First, Last: d.Last}
		if len(d.Reasons) > 0 {
			l.Reasons = d.Reasons
		}
		if d.Name == "" {
			l.Addr = d.Addr.String()
		}
		out = append(out, l)
	}
	return map[string]any{"records": s.Records, "destinations": out}
}
