package main

import (
	"flag"
	"io"
	"slices"
	"strings"
)

// The man page and the shell completions are generated from the commands' own flag sets,
// so that they never drift from what the commands accept: describe runs each command with
// --help and a flagCollector as its stderr; the command's flag set registers itself there
// (newFlags, and check-ip's parser, look for a Collect method on their stderr) and --help
// ends the command before it does anything.

// flagCollector is a stderr that keeps the flag sets registered with it and discards what
// is written to it.
type flagCollector struct {
	sets []collected
}

type collected struct {
	fs            *flag.FlagSet
	usage, detail string // the argument line and the long help; "" when the command gave none
}

func (c *flagCollector) Write(p []byte) (int, error) { return len(p), nil }

// Collect keeps fs (check-ip's parser calls it).
func (c *flagCollector) Collect(fs *flag.FlagSet) { c.sets = append(c.sets, collected{fs: fs}) }

// collectUsage keeps fs with its usage line and long help (newFlags calls it).
func (c *flagCollector) collectUsage(fs *flag.FlagSet, usage, detail string) {
	c.sets = append(c.sets, collected{fs: fs, usage: usage, detail: detail})
}

// flagDoc is one flag as the man page and the completions show it.
type flagDoc struct {
	Name  string
	Arg   string // the argument's name ("" for a boolean flag)
	Usage string
	Def   string // the default, "" when none worth showing
}

// commandDoc is one command as the man page and the completions show it.
type commandDoc struct {
	Name, Usage, Summary, Detail string
	Flags                        []flagDoc
}

// describe returns every listed command with its flags, in the order of commands().
func describe() []commandDoc {
	var out []commandDoc
	for _, c := range commands() {
		col := &flagCollector{}
		c.run([]string{"--help"}, io.Discard, col)
		d := commandDoc{Name: c.name, Usage: c.usage, Summary: c.summary}
		if len(col.sets) > 0 {
			s := col.sets[0]
			d.Detail = s.detail
			s.fs.VisitAll(func(f *flag.Flag) {
				arg, usage := flag.UnquoteUsage(f)
				if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
					arg = ""
				}
				def := f.DefValue
				if def == "false" || def == "0" || def == "[]" || arg == "" {
					def = ""
				}
				d.Flags = append(d.Flags, flagDoc{Name: f.Name, Arg: arg, Usage: strings.Join(strings.Fields(usage), " "), Def: def})
			})
		}
		slices.SortStableFunc(d.Flags, func(a, b flagDoc) int { return strings.Compare(a.Name, b.Name) })
		out = append(out, d)
	}
	return out
}

// takesFile reports whether a flag's argument is a file or a path (completed with file names).
func (f flagDoc) takesFile() bool {
	a := strings.ToLower(f.Arg)
	return strings.Contains(a, "file") || strings.Contains(a, "path") || f.Name == "config" || f.Name == "o"
}
