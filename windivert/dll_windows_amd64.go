package windivert

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"
)

// DLL is WinDivert.dll loaded from an install directory. It implements Driver, and offers
// the user-mode helpers of the DLL (CompileFilter, EvalFilter, CalcChecksums), which work
// without the kernel driver.
//
// Load checks both files against the pinned SHA-256 values before loading, loads the DLL by
// its absolute path only (never through the DLL search order: no planting), and keeps a
// handle on the DLL file that denies writing and deleting it until Release. The DLL
// itself installs WinDivert64.sys from the same directory as a kernel service at the first
// Open (and removes the service entry at once, so the driver unloads when its last handle
// closes or at reboot).
//
// windows/amd64 only: the pinned files are the x64 build, and the calls pass UINT64
// arguments in one register, which is the amd64 calling convention (on 386 they would take
// two stack slots).
//
// A DLL is safe for concurrent use. Release unloads it; all handles opened through it must
// be closed before (Release does not track them), and no method may be called after.
type DLL struct {
	dir  string
	mod  windows.Handle
	lock windows.Handle // GENERIC_READ, FILE_SHARE_READ: nobody may write or delete the file

	open, recv, recvEx, send, sendEx, shutdown, close, setParam, getParam uintptr
	compile, eval, checksums                                              uintptr

	once       sync.Once
	releaseErr error
}

// Load verifies and loads WinDivert.dll from dir, an absolute path (the directory of
// router.exe where Install put the files).
func Load(dir string) (*DLL, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("windivert: load: %q is not an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	if err := verifyFile(filepath.Join(dir, SysName), SysSHA256); err != nil {
		return nil, fmt.Errorf("windivert: load: %w", err)
	}
	path := filepath.Join(dir, DLLName)
	lock, err := lockAndVerify(path, DLLSHA256)
	if err != nil {
		return nil, fmt.Errorf("windivert: load: %w", err)
	}
	mod, err := windows.LoadLibraryEx(path, 0, windows.LOAD_WITH_ALTERED_SEARCH_PATH)
	if err != nil {
		windows.CloseHandle(lock)
		return nil, fmt.Errorf("windivert: load %s: %w", path, err)
	}
	d := &DLL{dir: dir, mod: mod, lock: lock}
	for _, p := range []struct {
		name string
		addr *uintptr
	}{
		{"WinDivertOpen", &d.open},
		{"WinDivertRecv", &d.recv},
		{"WinDivertRecvEx", &d.recvEx},
		{"WinDivertSend", &d.send},
		{"WinDivertSendEx", &d.sendEx},
		{"WinDivertShutdown", &d.shutdown},
		{"WinDivertClose", &d.close},
		{"WinDivertSetParam", &d.setParam},
		{"WinDivertGetParam", &d.getParam},
		{"WinDivertHelperCompileFilter", &d.compile},
		{"WinDivertHelperEvalFilter", &d.eval},
		{"WinDivertHelperCalcChecksums", &d.checksums},
	} {
		a, err := windows.GetProcAddress(mod, p.name)
		if err != nil {
			d.Release()
			return nil, fmt.Errorf("windivert: load %s: no export %s: %w", path, p.name, err)
		}
		*p.addr = a
	}
	return d, nil
}

// lockAndVerify opens path so that nobody can write or delete it while the handle is open,
// and checks its hash through that handle.
func lockAndVerify(path, want string) (windows.Handle, error) {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return 0, err
	}
	h, err := windows.CreateFile(p, windows.GENERIC_READ, windows.FILE_SHARE_READ, nil,
		windows.OPEN_EXISTING, windows.FILE_ATTRIBUTE_NORMAL, 0)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", path, err)
	}
	f := os.NewFile(uintptr(h), path)
	if err := verifyReader(path, f, want); err != nil {
		f.Close()
		return 0, err
	}
	// Detach the handle from f without closing it: duplicate, then close f.
	var dup windows.Handle
	cur := windows.CurrentProcess()
	if err := windows.DuplicateHandle(cur, h, cur, &dup, 0, false, windows.DUPLICATE_SAME_ACCESS); err != nil {
		f.Close()
		return 0, fmt.Errorf("duplicate handle of %s: %w", path, err)
	}
	f.Close()
	if _, err := windows.Seek(dup, 0, io.SeekStart); err != nil {
		windows.CloseHandle(dup)
		return 0, err
	}
	return dup, nil
}

// Dir is the directory the DLL was loaded from.
func (d *DLL) Dir() string { return d.dir }

// Release unloads the DLL and lets go of the file. Later calls return the first result.
func (d *DLL) Release() error {
	d.once.Do(func() {
		d.releaseErr = errors.Join(windows.FreeLibrary(d.mod), windows.CloseHandle(d.lock))
	})
	return d.releaseErr
}

// lastErr turns the errno captured by SyscallN into an Errno (ERROR_INVALID_PARAMETER if
// the DLL failed without setting one).
func lastErr(e syscall.Errno) error {
	if e == 0 {
		return ErrInvalidParameter
	}
	return Errno(e)
}

func bufPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// Open implements Driver (WinDivertOpen).
func (d *DLL) Open(filter string, layer Layer, priority int16, flags Flag) (uintptr, error) {
	f, err := windows.BytePtrFromString(filter)
	if err != nil {
		return 0, ErrInvalidParameter
	}
	r, _, e := syscall.SyscallN(d.open, uintptr(unsafe.Pointer(f)), uintptr(layer),
		uintptr(int64(priority)), uintptr(flags))
	if windows.Handle(r) == windows.InvalidHandle {
		return 0, lastErr(e)
	}
	return r, nil
}

// Recv implements Driver (WinDivertRecv).
func (d *DLL) Recv(h uintptr, buf []byte, addr *Address) (int, error) {
	var n uint32
	r, _, e := syscall.SyscallN(d.recv, h, uintptr(bufPtr(buf)), uintptr(len(buf)),
		uintptr(unsafe.Pointer(&n)), uintptr(unsafe.Pointer(addr)))
	if r == 0 {
		return int(n), lastErr(e)
	}
	return int(n), nil
}

// RecvEx implements Driver (WinDivertRecvEx, synchronous).
func (d *DLL) RecvEx(h uintptr, buf []byte, addrs []Address) (int, int, error) {
	var n uint32
	addrLen := uint32(len(addrs) * AddressSize)
	r, _, e := syscall.SyscallN(d.recvEx, h, uintptr(bufPtr(buf)), uintptr(len(buf)),
		uintptr(unsafe.Pointer(&n)), 0, uintptr(unsafe.Pointer(&addrs[0])),
		uintptr(unsafe.Pointer(&addrLen)), 0)
	count := int(addrLen) / AddressSize
	if r == 0 {
		return int(n), count, lastErr(e)
	}
	return int(n), count, nil
}

// Send implements Driver (WinDivertSend).
func (d *DLL) Send(h uintptr, pkt []byte, addr *Address) (int, error) {
	var n uint32
	r, _, e := syscall.SyscallN(d.send, h, uintptr(bufPtr(pkt)), uintptr(len(pkt)),
		uintptr(unsafe.Pointer(&n)), uintptr(unsafe.Pointer(addr)))
	if r == 0 {
		return int(n), lastErr(e)
	}
	return int(n), nil
}

// SendEx implements Driver (WinDivertSendEx, synchronous).
func (d *DLL) SendEx(h uintptr, buf []byte, addrs []Address) (int, error) {
	var n uint32
	r, _, e := syscall.SyscallN(d.sendEx, h, uintptr(bufPtr(buf)), uintptr(len(buf)),
		uintptr(unsafe.Pointer(&n)), 0, uintptr(unsafe.Pointer(&addrs[0])),
		uintptr(len(addrs)*AddressSize), 0)
	if r == 0 {
		return int(n), lastErr(e)
	}
	return int(n), nil
}

// Shutdown implements Driver (WinDivertShutdown).
func (d *DLL) Shutdown(h uintptr, how ShutdownHow) error {
	if r, _, e := syscall.SyscallN(d.shutdown, h, uintptr(how)); r == 0 {
		return lastErr(e)
	}
	return nil
}

// Close implements Driver (WinDivertClose).
func (d *DLL) Close(h uintptr) error {
	if r, _, e := syscall.SyscallN(d.close, h); r == 0 {
		return lastErr(e)
	}
	return nil
}

// CancelIO implements Canceler (CancelIoEx on the handle: this process's calls in progress
// return ERROR_OPERATION_ABORTED; the handle's object, which a holder's copy shares, is
// not shut down).
func (d *DLL) CancelIO(h uintptr) error {
	err := windows.CancelIoEx(windows.Handle(h), nil)
	if err == windows.ERROR_NOT_FOUND {
		return nil // nothing in progress
	}
	return err
}

// SetParam implements Driver (WinDivertSetParam).
func (d *DLL) SetParam(h uintptr, p Param, v uint64) error {
	if r, _, e := syscall.SyscallN(d.setParam, h, uintptr(p), uintptr(v)); r == 0 {
		return lastErr(e)
	}
	return nil
}

// GetParam implements Driver (WinDivertGetParam).
func (d *DLL) GetParam(h uintptr, p Param) (uint64, error) {
	var v uint64
	if r, _, e := syscall.SyscallN(d.getParam, h, uintptr(p), uintptr(unsafe.Pointer(&v))); r == 0 {
		return 0, lastErr(e)
	}
	return v, nil
}

// OpenHandle opens a handle through this DLL; see the package-level Open.
func (d *DLL) OpenHandle(filter string, layer Layer, priority int16, flags Flag) (*Handle, error) {
	return Open(d, filter, layer, priority, flags)
}

// CompileFilter checks filter for layer with WinDivertHelperCompileFilter; a filter the DLL
// refuses is reported as a *FilterError with the DLL's message and position.
func (d *DLL) CompileFilter(filter string, layer Layer) error {
	f, err := windows.BytePtrFromString(filter)
	if err != nil {
		return &FilterError{Filter: filter, Layer: layer, Msg: "filter contains a NUL byte"}
	}
	var (
		msg *byte
		pos uint32
	)
	r, _, _ := syscall.SyscallN(d.compile, uintptr(unsafe.Pointer(f)), uintptr(layer), 0, 0,
		uintptr(unsafe.Pointer(&msg)), uintptr(unsafe.Pointer(&pos)))
	if r == 0 {
		fe := &FilterError{Filter: filter, Layer: layer, Pos: int(pos), Msg: "rejected"}
		if msg != nil {
			fe.Msg = windows.BytePtrToString(msg)
		}
		return fe
	}
	return nil
}

// EvalFilter evaluates filter on a packet and its address with WinDivertHelperEvalFilter
// (the layer is addr.Layer(); NETWORK layers need the packet, FLOW and SOCKET need nil).
func (d *DLL) EvalFilter(filter string, pkt []byte, addr *Address) (bool, error) {
	f, err := windows.BytePtrFromString(filter)
	if err != nil {
		return false, &FilterError{Filter: filter, Layer: addr.Layer(), Msg: "filter contains a NUL byte"}
	}
	r, _, e := syscall.SyscallN(d.eval, uintptr(unsafe.Pointer(f)), uintptr(bufPtr(pkt)),
		uintptr(len(pkt)), uintptr(unsafe.Pointer(addr)))
	if r != 0 {
		return true, nil
	}
	if e == 0 {
		return false, nil
	}
	return false, &Error{Op: "eval filter", Err: Errno(e)}
}

// CalcChecksums recomputes the checksums of pkt in place with WinDivertHelperCalcChecksums
// and sets the checksum bits of addr (which may be nil).
func (d *DLL) CalcChecksums(pkt []byte, addr *Address, flags ChecksumFlag) error {
	r, _, e := syscall.SyscallN(d.checksums, uintptr(bufPtr(pkt)), uintptr(len(pkt)),
		uintptr(unsafe.Pointer(addr)), uintptr(flags))
	if r == 0 {
		return &Error{Op: "calc checksums", Err: lastErr(e)}
	}
	return nil
}

var _ Driver = (*DLL)(nil)
var _ Canceler = (*DLL)(nil)
