//go:build linux

package main

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/agentcage/router/internal/bench"
)

// results holds every figure per row, metric and round (NaN: not measured). The metrics:
//
//	tput                      download MiB/s
//	cpu_gib, mach_gib         CPU s/GiB: the proxy process; the machine (user+nice+system+
//	                          irq+softirq+steal of /proc/stat, all CPUs)
//	mach_irq_gib              the machine's irq+softirq s/GiB (part of mach_gib)
//	lab_gib, up_gib           the lab's processes and kernel threads; the upstream alone
//	sockmaps                  eBPF sockmaps/sockhashes the proxy held after the download
//	{rate,seq}_cps            connections per second (rate: -par at a time; seq: one at a time)
//	{rate,seq}_p50, _p99      µs from connect to EOF
//	{rate,seq}_cpu_us, _mach_us, _lab_us, _up_us   CPU µs per connection, as above
//	idle<N>_kib               RSS growth per idle flow held, N flows (a fresh process)
//	idle<N>_rss0, _rss        RSS KiB at rest and holding; _fds, _pipes, _threads while holding
//	agent_wall                the agent's HTTPS burst: wall time, s
//	agent_p50, _p99           per fetch, ms from the request to the body's last byte
//	agent_mach_s, _cpu_s      CPU s of the burst: the machine; the proxy process
//	model_{ttfb,gap,lat}_p50, _p99   the streamed model reply, µs: time to the first event,
//	                          gaps between events as the client read them, and each later
//	                          event's latency from the server's write (router rows: through
//	                          the forward; the others straight to the server)
type results struct {
	rounds int
	v      map[string]map[string][]float64
}

func newResults(rounds int) *results {
	return &results{rounds: rounds, v: map[string]map[string][]float64{}}
}

func (r *results) set(row, metric string, round int, x float64) {
	m := r.v[row]
	if m == nil {
		m = map[string][]float64{}
		r.v[row] = m
	}
	s := m[metric]
	if s == nil {
		s = make([]float64, r.rounds)
		for i := range s {
			s[i] = math.NaN()
		}
		m[metric] = s
	}
	s[round] = x
}

func (r *results) get(row, metric string) []float64 {
	if s := r.v[row][metric]; s != nil {
		return s
	}
	s := make([]float64, r.rounds)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

// meta describes a run: its settings and what each row ran.
type meta struct {
	Rounds   int      `json:"rounds"`
	Size     int64    `json:"size_bytes"`
	Conns    int      `json:"rate_conns"`
	Par      int      `json:"rate_par"`
	Seq      int      `json:"seq_conns"`
	Fetches  int      `json:"agent_fetches,omitempty"`
	Streams  int      `json:"agent_streams,omitempty"`
	Idle     []int    `json:"idle_flows"`
	Rows     []string `json:"rows"`
	Builds   []build  `json:"builds"`
	Duration string   `json:"duration"`
}

type build struct {
	Row  string `json:"row"`
	What string `json:"what"`
}

// jsonSpread is a paired figure: per round (null where a round lacks a side) and its median
// and range.
type jsonSpread struct {
	Rounds []*float64 `json:"rounds"`
	Median *float64   `json:"median"`
	Min    *float64   `json:"min"`
	Max    *float64   `json:"max"`
}

// jsonDump is what -json writes: the settings, every figure of every round (null: not
// measured), and every paired figure: each metric of each row divided by the same metric of
// each reference row in the same round ("tput/redsocks"), and the latencies minus the
// reference's ("seq_p50-upstream").
type jsonDump struct {
	Meta    meta                             `json:"meta"`
	Figures map[string]map[string][]*float64 `json:"figures"`
	Paired  map[string]map[string]jsonSpread `json:"paired"`
}

func dump(m meta, names []string, res *results) jsonDump {
	d := jsonDump{Meta: m, Figures: map[string]map[string][]*float64{}, Paired: map[string]map[string]jsonSpread{}}
	for row, metrics := range res.v {
		d.Figures[row] = map[string][]*float64{}
		for metric, v := range metrics {
			d.Figures[row][metric] = nullable(v)
		}
	}
	for _, row := range names {
		paired := map[string]jsonSpread{}
		for _, base := range []string{rowDirect, rowUpstream, rowRedsocks, rowSingbox, rowRouterBase} {
			if base == row || !slices.Contains(names, base) {
				continue
			}
			for metric := range res.v[row] {
				if _, ok := res.v[base][metric]; !ok {
					continue
				}
				if isLatency(metric) {
					paired[metric+"-"+base] = spreadJSON(bench.PairedDiffs(res.get(row, metric), res.get(base, metric)))
				} else {
					paired[metric+"/"+base] = spreadJSON(bench.PairedRatios(res.get(row, metric), res.get(base, metric)))
				}
			}
		}
		if len(paired) > 0 {
			d.Paired[row] = paired
		}
	}
	return d
}

// results is the inverse of dump: the settings the report needs and every figure.
func (d jsonDump) results() (options, *results, error) {
	m := d.Meta
	if m.Rounds < 1 || len(m.Rows) == 0 {
		return options{}, nil, errors.New("not a routerbench -json dump (no rounds or rows)")
	}
	o := options{rounds: m.Rounds, size: m.Size, conns: m.Conns, par: m.Par, seq: m.Seq, fetches: m.Fetches, streams: m.Streams, idle: m.Idle}
	res := newResults(m.Rounds)
	for row, metrics := range d.Figures {
		for metric, v := range metrics {
			if len(v) != m.Rounds {
				return options{}, nil, fmt.Errorf("%s %s: %d rounds, want %d", row, metric, len(v), m.Rounds)
			}
			for i, x := range v {
				if x != nil {
					res.set(row, metric, i, *x)
				}
			}
		}
	}
	return o, res, nil
}

func isLatency(metric string) bool {
	return strings.HasSuffix(metric, "_p50") || strings.HasSuffix(metric, "_p99")
}

func spreadJSON(v []float64) jsonSpread {
	s := bench.SpreadOf(v)
	return jsonSpread{Rounds: nullable(v), Median: nullable1(s.Median), Min: nullable1(s.Min), Max: nullable1(s.Max)}
}

// nullable turns NaN (not measured) into JSON null, which encoding/json cannot write as a
// number.
func nullable(v []float64) []*float64 {
	out := make([]*float64, len(v))
	for i, x := range v {
		out[i] = nullable1(x)
	}
	return out
}

func nullable1(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}
