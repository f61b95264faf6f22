package daemon

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
