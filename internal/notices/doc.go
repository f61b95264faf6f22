// Package notices holds no code. Its test keeps THIRD_PARTY_NOTICES.md, at the module's
// root, true for what the router binaries link: it asks `go list -deps` which packages
// cmd/router links for linux/amd64 and windows/amd64 (the same modules `go version -m`
// reports in the built binaries, without building them) and checks that the file's module
// table lists exactly those modules, versions and platforms, and that every license file and
// license header that comes with them is quoted there.
//
// The test needs the go command and the modules in the module cache (or the module proxy),
// so it runs on Linux and macOS only: under Wine there is no go command.
package notices
