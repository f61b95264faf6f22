//go:build race

package lint

// raceOn: the race detector slows Check some tenfold; TestCheckScales then stops at 5k rules.
const raceOn = true
