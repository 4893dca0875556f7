package proxy

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// errRequestTimeout ends a call that had no answer within limits.request_timeout: a deadline,
// so the client is told 504.
var errRequestTimeout = fmt.Errorf("request timeout: %w", context.DeadlineExceeded)

// requestTimeout is a call's context, bounded by limits.request_timeout until stop. It arms
// lazily: the cancel context and its timer are made the first time anything can observe them
// (Done, Err, or a child context, which calls Done), so a call that never waits (a cache hit)
// makes neither. Making them was 3.5 % of a cache hit's CPU in eoc-proxy's profile under
// scripts/benchout (2026-12-03); BenchmarkCacheHit counts the allocations.
//
// Once armed, every method is the armed context's, so the context package recognises it as a
// cancel context: a child registers with it instead of starting a goroutine to watch it.
// Before, Deadline and Value are the parent's; nothing has been cancelled that the parent
// does not know of.
type requestTimeout struct {
	parent context.Context
	at     time.Time // when the timeout fires

	armed atomic.Pointer[context.Context]

	mu      sync.Mutex // guards the rest, and arming
	cancel  context.CancelCauseFunc
	timer   *time.Timer
	stopped bool // the bound no longer applies (a stream began)
	ended   bool // the call is over
}

// withRequestTimeout bounds parent by d (not at all when d <= 0) until stop; end releases the
// context when the call is over.
func withRequestTimeout(parent context.Context, d time.Duration) *requestTimeout {
	return &requestTimeout{parent: parent, at: time.Now().Add(d), stopped: d <= 0}
}

func (c *requestTimeout) arm() context.Context {
	if a := c.armed.Load(); a != nil {
		return *a
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.armed.Load(); a != nil {
		return *a
	}
	ctx, cancel := context.WithCancelCause(c.parent)
	c.cancel = cancel
	switch left := time.Until(c.at); {
	case c.ended:
		cancel(nil)
	case c.stopped:
	case left <= 0:
		cancel(errRequestTimeout)
	default:
		c.timer = time.AfterFunc(left, func() { cancel(errRequestTimeout) })
	}
	c.armed.Store(&ctx)
	return ctx
}

func (c *requestTimeout) Deadline() (time.Time, bool) { return c.parent.Deadline() }
func (c *requestTimeout) Done() <-chan struct{}       { return c.arm().Done() }
func (c *requestTimeout) Err() error                  { return c.arm().Err() }

func (c *requestTimeout) Value(key any) any {
	if a := c.armed.Load(); a != nil {
		return (*a).Value(key)
	}
	return c.parent.Value(key)
}

// stop lifts the bound (a stream has begun: the backend's own timeouts bound it from now on). It
// may be called more than once.
func (c *requestTimeout) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	if c.timer != nil {
		c.timer.Stop()
	}
}

// end cancels the context: the call is over.
func (c *requestTimeout) end() {
	c.mu.Lock()
	c.ended = true
	if c.timer != nil {
		c.timer.Stop()
	}
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel(nil)
	}
}
