//go:build linux

package main

import "math"

// results holds every figure per row, metric and round (NaN: not measured).
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
