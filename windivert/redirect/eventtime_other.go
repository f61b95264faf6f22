//go:build !windows

package redirect

import "time"

// eventTime is zero off Windows: there is no WinDivert clock to read (tests give events
// their time directly).
func eventTime(int64) time.Time { return time.Time{} }
