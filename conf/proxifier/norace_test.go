//go:build !race

package proxifier_test

const raceOn = false
