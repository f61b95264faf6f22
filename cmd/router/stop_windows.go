package main

import (
	"errors"
	"time"
)

// stopDaemon is not offered on Windows: the router runs as a service there.
func stopDaemon(int, time.Duration) error {
	return errors.New("stop the service first: router service stop")
}
