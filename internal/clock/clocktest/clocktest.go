// Package clocktest holds a fake clock.Clock: time moves only when a test advances it.
package clocktest

import (
	"sync"
	"time"
)

// Clock is a clock.Clock whose time moves only by Advance, which runs the timers that
// come due, in order, in the caller's goroutine.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	next   int
	timers map[int]timer
}

type timer struct {
	at time.Time
	f  func()
}

// New returns a Clock at start.
func New(start time.Time) *Clock { return &Clock{now: start, timers: map[int]timer{}} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc arms f for d from now.
func (c *Clock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.next
	c.next++
	c.timers[id] = timer{at: c.now.Add(d), f: f}
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, armed := c.timers[id]
		delete(c.timers, id)
		return armed
	}
}

// Pending is the number of armed timers.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Advance moves the clock d forward, running each timer due by then at its own time, the
// earliest first (a timer armed by one that runs is run too when due).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	for {
		id, due := -1, timer{}
		for i, t := range c.timers {
			if !t.at.After(end) && (id < 0 || t.at.Before(due.at) || t.at.Equal(due.at) && i < id) {
				id, due = i, t
			}
		}
		if id < 0 {
			break
		}
		delete(c.timers, id)
		c.now = due.at
		c.mu.Unlock()
		due.f()
		c.mu.Lock()
	}
	c.now = end
	c.mu.Unlock()
}
