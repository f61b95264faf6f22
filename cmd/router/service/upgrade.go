package service

import (
	"errors"
	"fmt"
)

// UpgradeSteps are the parts of `router service upgrade`; Upgrade runs them in order.
type UpgradeSteps struct {
	// Stop stops the service and waits until it has stopped: its permits are gone, its
	// persistent guard stays (the caged apps are blocked meanwhile).
	Stop func() error
	// Place replaces router.exe and the WinDivert files in the install directory.
	Place func() error
	// Start starts the service (the new binary, or the old one when Place failed).
	Start func() error
	// Guarded reports whether the persistent guard is installed; it is checked before the
	// upgrade and after each step.
	Guarded func() (bool, error)
}

// Upgrade stops the service, replaces its files and starts it again, never touching the
// guard: the persistent blocks hold the caged apps throughout (unlike uninstall and
// install, which remove the guard in between). It refuses to begin without a guard, and it
// stops at the first step after which the guard is gone. When Place fails the old
// binary is started again and the error returned.
func Upgrade(s UpgradeSteps) error {
	check := func(after string) error {
		ok, err := s.Guarded()
		switch {
		case err != nil:
			return fmt.Errorf("upgrade service: check the guard %s: %w", after, err)
		case !ok:
			return fmt.Errorf("upgrade service: the guard is not installed %s; run `router service install` or `router guard --config FILE` first", after)
		}
		return nil
	}
	if err := check("before the upgrade"); err != nil {
		return err
	}
	if err := s.Stop(); err != nil {
		return fmt.Errorf("upgrade service: %w", err)
	}
	if err := check("after the stop"); err != nil {
		return err
	}
	perr := s.Place()
	if perr != nil {
		perr = fmt.Errorf("upgrade service: replace the files (the old ones are started again): %w", perr)
	} else if err := check("after the files were replaced"); err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		return errors.Join(perr, fmt.Errorf("upgrade service: start: %w", err))
	}
	if perr != nil {
		return perr
	}
	return check("after the start")
}
