package proxy

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// A whole answer's call has a deadline, and Deadline shows it; a stream's bound can be lifted,
// so its Deadline is the parent's.
func TestRequestTimeoutDeadline(t *testing.T) {
	ctx, bound := withRequestTimeout(context.Background(), time.Hour, false)
	defer bound.end()
	if at, ok := ctx.Deadline(); !ok || time.Until(at) < 59*time.Minute {
		t.Fatalf("deadline %v %v, want about an hour from now", at, ok)
	}
	ctx, bound = withRequestTimeout(context.Background(), time.Hour, true)
	defer bound.end()
	if _, ok := ctx.Deadline(); ok {
		t.Fatal("a stream's bound shows as a deadline the parent does not have")
	}
}

// The timeout fires with errRequestTimeout as the cause, streaming or not.
func TestRequestTimeoutFires(t *testing.T) {
	for _, stream := range []bool{false, true} {
		ctx, bound := withRequestTimeout(context.Background(), 20*time.Millisecond, stream)
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("stream %v: the timeout did not fire", stream)
		}
		if ctx.Err() == nil || !errors.Is(context.Cause(ctx), errRequestTimeout) {
			t.Fatalf("stream %v: err %v, cause %v", stream, ctx.Err(), context.Cause(ctx))
		}
		bound.end()
	}
}

// Observed only after the bound passed (a call that computed for longer than the timeout), Err
// says so at once.
func TestRequestTimeoutPassedBeforeArming(t *testing.T) {
	ctx, bound := withRequestTimeout(context.Background(), time.Millisecond, false)
	defer bound.end()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the timeout never fired")
	}
	if !errors.Is(context.Cause(ctx), errRequestTimeout) || ctx.Err() == nil {
		t.Fatalf("err %v, cause %v", ctx.Err(), context.Cause(ctx))
	}
}

// stop lifts a stream's bound; end still cancels.
func TestRequestTimeoutStop(t *testing.T) {
	ctx, bound := withRequestTimeout(context.Background(), 20*time.Millisecond, true)
	bound.stop()
	select {
	case <-ctx.Done():
		t.Fatalf("fired after stop: %v", context.Cause(ctx))
	case <-time.After(200 * time.Millisecond):
	}
	bound.end()
	if !errors.Is(ctx.Err(), context.Canceled) || errors.Is(context.Cause(ctx), errRequestTimeout) {
		t.Fatalf("after end: err %v, cause %v", ctx.Err(), context.Cause(ctx))
	}
}

// A context ended is cancelled, and one whose parent is cancelled is done.
func TestRequestTimeoutEndAndParent(t *testing.T) {
	for _, stream := range []bool{false, true} {
		ctx, bound := withRequestTimeout(context.Background(), time.Hour, stream)
		bound.end()
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("stream %v: after end: %v", stream, ctx.Err())
		}
		parent, cancel := context.WithCancel(context.Background())
		ctx, bound = withRequestTimeout(parent, time.Hour, stream)
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("stream %v: not done after its parent", stream)
		}
		bound.end()
	}
}

// Children register with the bound's cancel context instead of starting a goroutine each, and
// the timeout reaches them.
func TestRequestTimeoutChildren(t *testing.T) {
	ctx, bound := withRequestTimeout(context.Background(), 50*time.Millisecond, true)
	defer bound.end()
	before := runtime.NumGoroutine()
	children := make([]context.Context, 0, 100)
	for range 100 {
		child, cancel := context.WithCancel(ctx)
		defer cancel()
		children = append(children, child)
	}
	if n := runtime.NumGoroutine(); n >= before+100 {
		t.Fatalf("%d goroutines for 100 children (%d before)", n, before)
	}
	for _, child := range children {
		select {
		case <-child.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("a child outlived the timeout")
		}
		if !errors.Is(context.Cause(child), errRequestTimeout) {
			t.Fatalf("child's cause: %v", context.Cause(child))
		}
	}
}

// Nothing is armed by a call that waits on nothing: its Deadline, Value and Err (while the bound
// holds) are answered without the context and timer that hold the bound.
func TestRequestTimeoutArmsOnlyToWait(t *testing.T) {
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, "v")
	for _, stream := range []bool{false, true} {
		ctx, bound := withRequestTimeout(parent, time.Hour, stream)
		_, _ = ctx.Deadline()
		if ctx.Value(key{}) != "v" || ctx.Err() != nil {
			t.Fatalf("stream %v: value %v, err %v", stream, ctx.Value(key{}), ctx.Err())
		}
		if bound.armed.Load() {
			t.Fatalf("stream %v: armed without a wait", stream)
		}
		if stream {
			bound.stop()
		}
		bound.end()
		<-ctx.Done()
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("stream %v: ended unarmed: %v", stream, ctx.Err())
		}
		ctx, bound = withRequestTimeout(parent, time.Hour, stream)
		select {
		case <-ctx.Done():
			t.Fatalf("stream %v: done at once", stream)
		default:
		}
		if !bound.armed.Load() || ctx.Value(key{}) != "v" {
			t.Fatalf("stream %v: armed %v, value %v after Done", stream, bound.armed.Load(), ctx.Value(key{}))
		}
		bound.end()
		<-ctx.Done()
	}
}

// A bound that passed before anything waited on it is seen by Err, with its cause, at once; a
// stream's lifted bound is not.
func TestRequestTimeoutPassedUnobserved(t *testing.T) {
	for _, stream := range []bool{false, true} {
		ctx, bound := withRequestTimeout(context.Background(), time.Nanosecond, stream)
		time.Sleep(time.Millisecond)
		if ctx.Err() == nil || !errors.Is(context.Cause(ctx), errRequestTimeout) {
			t.Fatalf("stream %v: err %v, cause %v", stream, ctx.Err(), context.Cause(ctx))
		}
		bound.end()
	}
	ctx, bound := withRequestTimeout(context.Background(), time.Nanosecond, true)
	bound.stop()
	time.Sleep(time.Millisecond)
	if ctx.Err() != nil {
		t.Fatalf("a lifted bound ended the stream: %v", context.Cause(ctx))
	}
	select {
	case <-ctx.Done():
		t.Fatalf("a lifted bound ended the stream once armed: %v", context.Cause(ctx))
	default:
	}
	bound.end()
	<-ctx.Done()
}
