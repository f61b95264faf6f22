package redirect

import (
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
)

var (
	kernel32        = windows.NewLazySystemDLL("kernel32.dll")
	procQPCounter   = kernel32.NewProc("QueryPerformanceCounter")
	procQPFrequency = kernel32.NewProc("QueryPerformanceFrequency")
)

// eventTime turns a WinDivert timestamp (a QueryPerformanceCounter value) into the wall
// clock: now, less the counter ticks since. Zero for a zero timestamp or a failing counter.
func eventTime(ts int64) time.Time {
	if ts == 0 {
		return time.Time{}
	}
	var now, freq int64
	if r, _, _ := procQPCounter.Call(uintptr(unsafe.Pointer(&now))); r == 0 {
		return time.Time{}
	}
	if r, _, _ := procQPFrequency.Call(uintptr(unsafe.Pointer(&freq))); r == 0 || freq == 0 {
		return time.Time{}
	}
	ago := time.Duration(float64(now-ts) / float64(freq) * float64(time.Second))
	return time.Now().Add(-ago)
}
