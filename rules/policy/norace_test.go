//go:build !race

package policy_test

const raceOn = false
