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

// requestTimeout is a call's context bounded by limits.request_timeout (none when the bound is
// 0). A whole answer's call has a deadline (Deadline shows it). A stream's bound ends when its
// first byte goes out (stop), since from then on the backend's own timeouts bound it, cutting it
// only when it stops flowing; a bound that can be lifted is no deadline, so a stream's is a timer
// that cancels the context with errRequestTimeout, and its Deadline is the parent's.
//
// It arms lazily: the standard library's context that holds the bound (WithDeadlineCause, or
// WithCancelCause and a timer for a stream) is made the first time something waits on it (Done,
// which a child context asks for too) or asks whether it has ended (Err) when that could be so,
// so a call that waits on nothing (a cache hit) makes neither context nor timer. Once armed,
// Done, Err and Value are the armed context's, so the context package recognises it as a cancel
// context: a child registers with it, and context.Cause finds the cause. Before, Value is the
// parent's: nothing has been cancelled that the parent does not know of (context.Cause, which
// reads it, is asked after Err, which arms a bound that has passed). A call that ends unarmed
// is done all the same (Done closed, Err context.Canceled), with nothing made.
type requestTimeout struct {
	parent context.Context
	at     time.Time // when the bound passes; zero without one
	stream bool

	// The flags are set under mu and read without it: armed says inner is set.
	armed, stopped, ended atomic.Bool // stopped: a stream's bound is lifted; ended: the call is over

	mu     sync.Mutex // guards arming and the rest
	inner  context.Context
	cancel context.CancelCauseFunc // a stream's or an unbounded call's
	expire context.CancelFunc      // a whole answer's deadline context's
	timer  *time.Timer             // a stream's bound
}

// withRequestTimeout returns parent bounded by d, for a call that streams or not; the bound's
// end releases the context when the call is over.
func withRequestTimeout(parent context.Context, d time.Duration, stream bool) (context.Context, *requestTimeout) {
	c := new(requestTimeout)
	c.init(parent, d, stream)
	return c, c
}

// init makes c parent bounded by d (see withRequestTimeout); c must be new.
func (c *requestTimeout) init(parent context.Context, d time.Duration, stream bool) {
	c.parent, c.stream = parent, stream
	if d > 0 {
		c.at = time.Now().Add(d)
	}
}

// arm makes the context that holds the bound, once; nil when the call ended unarmed.
func (c *requestTimeout) arm() context.Context {
	if c.armed.Load() {
		return c.inner
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed.Load() {
		return c.inner
	}
	if c.ended.Load() {
		return nil
	}
	switch {
	case c.at.IsZero():
		c.inner, c.cancel = context.WithCancelCause(c.parent)
	case !c.stream:
		c.inner, c.expire = context.WithDeadlineCause(c.parent, c.at, errRequestTimeout)
	default:
		c.inner, c.cancel = context.WithCancelCause(c.parent)
		if !c.stopped.Load() {
			if left := time.Until(c.at); left > 0 {
				cancel := c.cancel
				c.timer = time.AfterFunc(left, func() { cancel(errRequestTimeout) })
			} else {
				c.cancel(errRequestTimeout)
			}
		}
	}
	c.armed.Store(true)
	return c.inner
}

// Deadline is the bound of a whole answer's call, or the parent's when that is sooner; a
// stream's is the parent's.
func (c *requestTimeout) Deadline() (time.Time, bool) {
	at, ok := c.parent.Deadline()
	if c.stream || c.at.IsZero() || (ok && at.Before(c.at)) {
		return at, ok
	}
	return c.at, true
}

// Done arms the bound: something waits on it.
func (c *requestTimeout) Done() <-chan struct{} {
	if ctx := c.arm(); ctx != nil {
		return ctx.Done()
	}
	return closedDone
}

// Err is nil while the parent is live and the bound has not passed, without arming it; else it
// arms it and is the armed context's.
func (c *requestTimeout) Err() error {
	if !c.armed.Load() && c.parent.Err() == nil && !c.passed() && !c.ended.Load() {
		return nil
	}
	if ctx := c.arm(); ctx != nil {
		return ctx.Err()
	}
	return context.Canceled
}

// passed says the bound has passed, and was not lifted.
func (c *requestTimeout) passed() bool {
	if c.at.IsZero() || c.stopped.Load() {
		return false
	}
	return !time.Now().Before(c.at)
}

func (c *requestTimeout) Value(key any) any {
	if c.armed.Load() {
		return c.inner.Value(key)
	}
	return c.parent.Value(key)
}

func (c *requestTimeout) String() string { return "proxy.requestTimeout" }

// closedDone is the Done of a call that ended before anything waited on it.
var closedDone = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// stop lifts a stream's bound (its first byte went out). It may be called more than once.
func (c *requestTimeout) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped.Store(true)
	if c.timer != nil {
		c.timer.Stop()
	}
}

// end cancels the context: the call is over.
func (c *requestTimeout) end() {
	c.mu.Lock()
	c.ended.Store(true)
	if c.timer != nil {
		c.timer.Stop()
	}
	cancel, expire := c.cancel, c.expire
	c.mu.Unlock()
	switch {
	case expire != nil:
		expire()
	case cancel != nil:
		cancel(nil)
	}
}
