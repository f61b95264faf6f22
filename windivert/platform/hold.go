package platform

import (
	"context"
	"fmt"
	"time"

	"github.com/agentcage/router/windivert"
	"github.com/agentcage/router/windivert/wfp/guard"
)

// keepHandle is the holder's promise (`router hold` on Windows; the window walks run it
// over the fakes): it keeps hv, its copy of the router's diverting WinDivert handle, open
// until guard.Hold returns (the router gone or letting go, and then every permit the
// router armed gone, however long the BFE takes: no give-up, since a closed capture with a
// permit in force lets caged packets out), then makes the packets queued meanwhile expire
// and closes hv. The window's packets are dropped: the last close of the object would
// re-inject those younger than QUEUE_TIME below ALE (windivert.ExpireQueue). It never shuts
// the handle down, which would stop the router's copy too. wait is time.Sleep (a test's
// clock).
func keepHandle(drv windivert.Driver, hv uintptr, c guard.HoldConfig, wait func(time.Duration)) error {
	if err := guard.Hold(context.Background(), c); err != nil {
		return fmt.Errorf("hold: %w", err) // (Hold ends with an error only by its context)
	}
	if err := windivert.ExpireQueue(drv, hv, wait); err != nil {
		// The queue time could not be shortened: wait past the longest one instead.
		wait(windivert.QueueTimeMax*time.Millisecond + windivert.ExpireWait)
	}
	if err := drv.Close(hv); err != nil {
		return fmt.Errorf("hold: close the WinDivert handle: %w", err)
	}
	return nil
}

// holderStart is how the holder's process is started so that it outlives the ways the
// router's process is ended while the permits may still be in force: one decision, which
// the Windows start (startHolder) applies and the window walks judge against each kill.
type holderStart struct {
	// Image is the holder's executable's file name, a link to (or copy of) router.exe
	// beside it: `taskkill /F /IM router.exe` does not match it.
	Image string
	// NewGroup (CREATE_NEW_PROCESS_GROUP) keeps a Ctrl+C or Ctrl+Break sent to the
	// router's console group from reaching it.
	NewGroup bool
	// Detached (DETACHED_PROCESS) gives it no console: closing the router's console
	// window does not end it.
	Detached bool
	// Breakaway (CREATE_BREAKAWAY_FROM_JOB) takes it out of the router's job, e.g. an ssh
	// session's, which ends every process in it; a job that forbids breakaway makes the
	// start fail, and the router refuses to run there (run it as its service).
	Breakaway bool
	// Relay starts it through a relay process (`router hold --relay`) that starts the
	// holder and exits: the holder's parent is gone, so killing the router's process tree
	// (taskkill /T) does not reach it.
	Relay bool
}

// holderPlan is the holder's start.
func holderPlan() holderStart {
	return holderStart{Image: "router-hold.exe", NewGroup: true, Detached: true, Breakaway: true, Relay: true}
}
