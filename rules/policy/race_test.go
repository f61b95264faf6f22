//go:build race

package policy_test

// raceOn: under the race detector sync.Pool drops what it is given at random, so a
// decision may allocate its scratch anew; the allocation tests then do not count.
const raceOn = true
