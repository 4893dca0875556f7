package proxy

import (
	"context"
	"fmt"
	"time"
)

// errRequestTimeout ends a call that had no answer within limits.request_timeout: a deadline,
// so the client is told 504.
var errRequestTimeout = fmt.Errorf("request timeout: %w", context.DeadlineExceeded)

// requestTimeout is the bound of a call's context by limits.request_timeout (none when the
// bound is 0). A whole answer's call has a deadline (Deadline shows it). A stream's bound ends
// when its first byte goes out (stop), since from then on the backend's own timeouts bound it,
// cutting it only when it stops flowing; a bound that can be lifted is no deadline, so a
// stream's is a timer that cancels the context with errRequestTimeout, and its Deadline is the
// parent's.
type requestTimeout struct {
	cancel      context.CancelFunc      // a whole answer's deadline context's
	cancelCause context.CancelCauseFunc // a stream's, or an unbounded call's
	timer       *time.Timer             // a stream's bound; nil otherwise
}

// withRequestTimeout returns parent bounded by d, for a call that streams or not; the bound's
// end releases the context when the call is over.
func withRequestTimeout(parent context.Context, d time.Duration, stream bool) (context.Context, requestTimeout) {
	switch {
	case d <= 0:
		ctx, cancel := context.WithCancel(parent)
		return ctx, requestTimeout{cancel: cancel}
	case !stream:
		ctx, cancel := context.WithDeadlineCause(parent, time.Now().Add(d), errRequestTimeout)
		return ctx, requestTimeout{cancel: cancel}
	}
	ctx, cancel := context.WithCancelCause(parent)
	return ctx, requestTimeout{cancelCause: cancel, timer: time.AfterFunc(d, func() { cancel(errRequestTimeout) })}
}

// stop lifts a stream's bound (its first byte went out). It may be called more than once.
func (c requestTimeout) stop() {
	if c.timer != nil {
		c.timer.Stop()
	}
}

// end cancels the context: the call is over.
func (c requestTimeout) end() {
	c.stop()
	if c.cancel != nil {
		c.cancel()
	} else {
		c.cancelCause(nil)
	}
}
