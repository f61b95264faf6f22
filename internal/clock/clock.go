// Package clock is the time source of the packages that read the time and arm timers:
// Clock, injected; System, the machine's; and in clocktest a fake one that moves only when
// a test advances it.
package clock

import "time"

// Clock is the time a package reads and the timers it arms.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed; stop cancels the call and
	// reports whether it did (false: f ran or runs).
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// System is the machine's clock.
type System struct{}

// Now is time.Now.
func (System) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (System) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
