package platform

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/windows"

	"github.com/agentcage/router/windivert"
	"github.com/agentcage/router/windivert/redirect"
	"github.com/agentcage/router/windivert/wfp"
	"github.com/agentcage/router/windivert/wfp/guard"
)

// The WinDivert holder: `router hold`, a child of the router that inherits the diverting
// WinDivert handle and keeps it open (never reading it) until the router is gone, or lets
// it go, and the router's permits are gone too (keepHandle). See docs/windows-guard.md.

// releaseWait bounds how long the router's release waits for the holder to exit: it holds
// on (without the router) while a permit is in force.
const releaseWait = 10 * time.Second

// startHolder starts the holder with a copy of hv and waits for it to say it holds it. The
// release it returns closes the holder's stdin (the router lets go) and waits for it to
// exit (bounded). The holder runs from holderPlan's image, a link to exe beside it.
func startHolder(exe string) func(windivert.Driver, uintptr, uint32) (func() error, error) {
	return startHolderCmd(func(hv uintptr, owner uint32) *exec.Cmd {
		img, err := holderImage(exe, holderPlan().Image)
		if err != nil {
			img = exe // (reported when it fails to start: the start refuses then)
		}
		args := []string{"hold", "--handle", strconv.FormatUint(uint64(hv), 10), "--parent", strconv.FormatUint(uint64(owner), 10)}
		if holderPlan().Relay {
			args = append(args, "--relay")
		}
		return exec.Command(img, args...)
	})
}

// RelayHolder is `router hold --relay`: it starts the holder (this executable, `hold`
// with the same handle and parent) as holderPlan says, passing on the inherited handle and
// its standard handles, and returns without waiting: the holder's parent is then a process
// that has ended, so a kill of the router's process tree does not reach it.
func RelayHolder(handle uintptr, parent uint32) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("hold relay: %w", err)
	}
	return relayHolder(exec.Command(exe, "hold", "--handle", strconv.FormatUint(uint64(handle), 10), "--parent", strconv.FormatUint(uint64(parent), 10)), handle)
}

func relayHolder(cmd *exec.Cmd, handle uintptr) error {
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{AdditionalInheritedHandles: []syscall.Handle{syscall.Handle(handle)}, HideWindow: true, CreationFlags: creationFlags(holderPlan())}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("hold relay: start the holder: %w", err)
	}
	cmd.Process.Release()
	return nil
}

// holderImage returns the path of the holder's image beside exe: a hard link to exe
// (made or remade when it is not one), or a copy when the volume has no links.
func holderImage(exe, name string) (string, error) {
	img := filepath.Join(filepath.Dir(exe), name)
	a, err := os.Stat(exe)
	if err != nil {
		return "", fmt.Errorf("holder image: %w", err)
	}
	if b, err := os.Stat(img); err == nil && os.SameFile(a, b) {
		return img, nil
	}
	os.Remove(img)
	if err := os.Link(exe, img); err == nil {
		return img, nil
	}
	src, err := os.ReadFile(exe)
	if err != nil {
		return "", fmt.Errorf("holder image: %w", err)
	}
	if err := os.WriteFile(img, src, 0o755); err != nil {
		return "", fmt.Errorf("holder image: %w", err)
	}
	return img, nil
}

// creationFlags are the process creation flags of holderPlan's start.
func creationFlags(s holderStart) uint32 {
	var f uint32
	if s.NewGroup {
		f |= windows.CREATE_NEW_PROCESS_GROUP
	}
	if s.Detached {
		f |= windows.DETACHED_PROCESS
	}
	if s.Breakaway {
		f |= windows.CREATE_BREAKAWAY_FROM_JOB
	}
	return f
}

// startHolderCmd is startHolder with the holder's command line made by command (tests run
// their own binary).
func startHolderCmd(command func(hv uintptr, owner uint32) *exec.Cmd) func(windivert.Driver, uintptr, uint32) (func() error, error) {
	return func(_ windivert.Driver, hv uintptr, owner uint32) (func() error, error) {
		cmd := command(hv, owner)
		cmd.SysProcAttr = &syscall.SysProcAttr{AdditionalInheritedHandles: []syscall.Handle{syscall.Handle(hv)}, HideWindow: true, CreationFlags: creationFlags(holderPlan())}
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, fmt.Errorf("holder: %w", err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, fmt.Errorf("holder: %w", err)
		}
		// AdditionalInheritedHandles must be inheritable already; the handle list keeps any
		// other child from inheriting it, and the flag is cleared once the holder has it.
		h := windows.Handle(hv)
		if err := windows.SetHandleInformation(h, windows.HANDLE_FLAG_INHERIT, windows.HANDLE_FLAG_INHERIT); err != nil {
			return nil, fmt.Errorf("holder: make the WinDivert handle inheritable: %w", err)
		}
		err = cmd.Start()
		windows.SetHandleInformation(h, windows.HANDLE_FLAG_INHERIT, 0)
		if errors.Is(err, windows.ERROR_ACCESS_DENIED) {
			return nil, fmt.Errorf("holder: %w (the router runs in a job that forbids breakaway, e.g. an ssh session's: a holder there would end with the job; run the router as its service)", err)
		}
		if err != nil {
			return nil, fmt.Errorf("holder: %w", err)
		}
		// The holder's stdout ends when every process holding it is gone: the relay (if
		// any) at once, the holder when it lets go. cmd.Wait, which closes the pipes, runs
		// only after that.
		ready, drained := make(chan error, 1), make(chan struct{})
		go func() {
			defer close(drained)
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err == nil && line != "holding\n" {
				err = fmt.Errorf("unexpected %q", line)
			}
			ready <- err
			io.Copy(io.Discard, stdout)
		}()
		select {
		case err = <-ready:
		case <-time.After(10 * time.Second):
			err = errors.New("no answer in 10 s")
		}
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, fmt.Errorf("holder: %w", err)
		}
		return func() error {
			stdin.Close()
			select {
			case <-drained:
				cmd.Wait()
				return nil
			case <-time.After(releaseWait):
				go cmd.Wait()
				return errors.New("holder: still holding the WinDivert handle (a permit is still in force); it lets go once Windows deleted them")
			}
		}, nil
	}
}

// RunHolder is `router hold`: it holds handle (inherited from parent) as keepHandle does,
// with WinDivert.dll beside its executable for the queue time. It writes "holding" to
// stdout once it holds it; stdin's end is the router letting go.
func RunHolder(handle uintptr, parent uint32, stdin io.Reader, stdout io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("hold: %w", err)
	}
	drv, release, err := redirect.LoadWinDivert(filepath.Dir(exe))
	if err != nil {
		return fmt.Errorf("hold: %w", err)
	}
	defer release()
	return runHolder(wfp.NewEngine(), drv, handle, parent, stdin, stdout)
}

func runHolder(eng wfp.Engine, drv windivert.Driver, handle uintptr, parent uint32, stdin io.Reader, stdout io.Writer) error {
	proc, err := windows.OpenProcess(windows.SYNCHRONIZE, false, parent)
	if err != nil {
		drv.Close(handle)
		return fmt.Errorf("hold: open the router's process %d: %w", parent, err)
	}
	defer windows.CloseHandle(proc)
	parentGone, stop := make(chan struct{}), make(chan struct{})
	go func() {
		windows.WaitForSingleObject(proc, windows.INFINITE)
		close(parentGone)
	}()
	go func() {
		io.Copy(io.Discard, stdin)
		close(stop)
	}()
	if _, err := io.WriteString(stdout, "holding\n"); err != nil {
		return fmt.Errorf("hold: %w", err)
	}
	return keepHandle(drv, handle, guard.HoldConfig{WFP: eng, Owner: parent, Parent: parentGone, Stop: stop}, time.Sleep)
}
