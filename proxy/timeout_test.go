package proxy

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

type probeKey struct{}

// A call that never waits never arms its timeout: Value and Deadline are the parent's, and no
// cancel context or timer is made.
func TestRequestTimeoutUnarmedUntilObserved(t *testing.T) {
	parent := context.WithValue(context.Background(), probeKey{}, "v")
	ctx := withRequestTimeout(parent, time.Hour)
	defer ctx.end()
	if ctx.Value(probeKey{}) != "v" {
		t.Fatal("Value is not the parent's")
	}
	if _, ok := ctx.Deadline(); ok {
		t.Fatal("a deadline the parent does not have")
	}
	if ctx.armed.Load() != nil || ctx.timer != nil {
		t.Fatal("armed without anything observing it")
	}
	if ctx.Err() != nil || ctx.armed.Load() == nil || ctx.timer == nil {
		t.Fatalf("Err: %v; armed %v, timer %v", ctx.Err(), ctx.armed.Load() != nil, ctx.timer != nil)
	}
}

// Armed by Done, the timeout fires with errRequestTimeout as the cause.
func TestRequestTimeoutFires(t *testing.T) {
	ctx := withRequestTimeout(context.Background(), 20*time.Millisecond)
	defer ctx.end()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the timeout did not fire")
	}
	if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(context.Cause(ctx), errRequestTimeout) {
		t.Fatalf("err %v, cause %v", ctx.Err(), context.Cause(ctx))
	}
}

// Observed only after the bound passed (a call that computed for longer than the timeout), Err
// says so at once.
func TestRequestTimeoutPassedBeforeArming(t *testing.T) {
	ctx := withRequestTimeout(context.Background(), time.Millisecond)
	defer ctx.end()
	time.Sleep(5 * time.Millisecond)
	if !errors.Is(context.Cause(ctx), errRequestTimeout) || ctx.Err() == nil {
		t.Fatalf("err %v, cause %v", ctx.Err(), context.Cause(ctx))
	}
}

// stop lifts the bound whether it comes before or after arming; end still cancels.
func TestRequestTimeoutStop(t *testing.T) {
	for _, armFirst := range []bool{false, true} {
		ctx := withRequestTimeout(context.Background(), 20*time.Millisecond)
		if armFirst {
			_ = ctx.Done()
		}
		ctx.stop()
		select {
		case <-ctx.Done():
			t.Fatalf("armFirst %v: fired after stop: %v", armFirst, context.Cause(ctx))
		case <-time.After(200 * time.Millisecond):
		}
		ctx.end()
		if !errors.Is(ctx.Err(), context.Canceled) || errors.Is(context.Cause(ctx), errRequestTimeout) {
			t.Fatalf("armFirst %v: after end: err %v, cause %v", armFirst, ctx.Err(), context.Cause(ctx))
		}
	}
}

// A context first observed after the call ended is cancelled, and one whose parent is cancelled
// is done.
func TestRequestTimeoutEndAndParent(t *testing.T) {
	ctx := withRequestTimeout(context.Background(), time.Hour)
	ctx.end()
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("after end: %v", ctx.Err())
	}
	parent, cancel := context.WithCancel(context.Background())
	ctx = withRequestTimeout(parent, time.Hour)
	defer ctx.end()
	cancel()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("not done after its parent")
	}
}

// A child context registers with the armed cancel context, as with any cancel context, instead of
// starting a goroutine to watch a custom one; and the timeout reaches it.
func TestRequestTimeoutChildren(t *testing.T) {
	ctx := withRequestTimeout(context.Background(), 50*time.Millisecond)
	defer ctx.end()
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
