//go:build race

package proxifier_test

// raceOn: the race detector slows the import some tenfold; TestImportLinear then compares
// smaller profiles and leaves the largest out.
const raceOn = true
