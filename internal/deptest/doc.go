// Package deptest holds the dependency table of the module and the test that enforces it
// (deps_test.go): for every package of ours, the packages of ours its code may import, and
// those its tests may import besides. The test reads the real imports with `go list` for
// GOOS=linux and GOOS=windows, tests included, and fails on an import that is not in the
// package's row, on a row that allows what the code no longer imports (so the table stays
// the true picture), and on a package that has no row: a package added later fails the test
// until its row is written. The layers (rules imports nothing of ours, the wire packages
// nothing, each platform's capture nothing of the other's, and so on) are stated beside the
// table as rules over it, checked on the real imports too, each with its reason.
//
// Its only code is the test: nothing imports this package.
package deptest
