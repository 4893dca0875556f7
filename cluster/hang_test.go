package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/internal/testenv/redistest"
)

// A Redis that hangs (SIGSTOP) holds no call longer than one operation's deadline: every
// operation a call makes on its path (a rate-limit take, a budget admission and settle, a
// cache lookup) is tried once, the first that gets no answer marks Redis down, and the rest
// return ErrDown at once. After the hang no reservation is left: an admission that got no
// answer, which Redis runs when it resumes, is released. The bound asserted is the configured
// deadline with a second's slack for a loaded machine; the test takes as long as the hang.
func TestHungRedisHoldsNoCallPastTheDeadline(t *testing.T) {
	const (
		opTimeout = 300 * time.Millisecond
		hang      = 6 * time.Second
		slack     = time.Second
		hold      = 15 * time.Minute // a crashed replica's reservation: the one the hang must not leave
	)
	srv := redistest.Start(t)
	c, err := Open(Options{URL: srv.URL, Logger: zerolog.Nop(), OpTimeout: opTimeout, Probe: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	b, lim, cache := c.Budgets(), c.Limits(), c.Cache()
	ctx := context.Background()
	if _, _, _, err := b.Settle(ctx, "k", "p", "", 1, false, 2); err != nil { // a priced key: calls run together
		t.Fatal(err)
	}
	// call is what the edge asks Redis for one budgeted, rate-limited call (the admission first
	// here, so that it is what meets the hang).
	call := func() time.Duration {
		start := time.Now()
		id, verdict, _, _, err := b.Admit(ctx, "k", "p", 1e9, 2, hold)
		_, _, _ = lim.Take(ctx, "k", 1000000, 0)
		_, _ = cache.Get(ctx, "t", "key")
		if err == nil && verdict == 0 {
			_, _, _, _ = b.Settle(ctx, "k", "p", id, 0.5, false, 2)
		}
		return time.Since(start)
	}
	call()
	srv.Hang()
	hangEnd := time.Now().Add(hang)
	var worst time.Duration
	calls := 0
	done := make(chan time.Duration)
	for time.Now().Before(hangEnd) {
		for range 2 { // two calls at a time
			go func() { done <- call() }()
		}
		for range 2 {
			worst = max(worst, <-done)
			calls++
		}
		if c.Up() {
			t.Fatalf("Redis still reads up after a call met the hang (call %d)", calls)
		}
		time.Sleep(50 * time.Millisecond)
	}
	srv.Resume()
	t.Logf("%d calls during a %v hang; the longest took %v (deadline %v)", calls, hang, worst, opTimeout)
	if worst > opTimeout+slack {
		t.Errorf("a call was held %v by a hung Redis; the deadline is %v", worst, opTimeout)
	}
	ctl := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = ctl.Close() })
	wait, cancel := context.WithTimeout(ctx, 20*time.Second) // bounds a hang only
	defer cancel()
	var n int64
	for {
		if n, err = ctl.ZCard(wait, "eoc:budget:{k}:inflight").Result(); err == nil && n == 0 && c.Up() {
			break
		}
		select {
		case <-wait.Done():
			t.Fatalf("%d reservations left in Redis after the hang (err %v, up %v)", n, err, c.Up())
		case <-time.After(50 * time.Millisecond):
		}
	}
	// And sharing resumed: an admission reserves in Redis again.
	id, verdict, _, _, err := b.Admit(ctx, "k", "p", 1e9, 2, hold)
	if err != nil || verdict != 0 || id == "" {
		t.Fatalf("after the hang: admit %q %d %v", id, verdict, err)
	}
	if n, _ := ctl.ZCard(ctx, "eoc:budget:{k}:inflight").Result(); n != 1 {
		t.Fatalf("%d reservations after one admission, want 1", n)
	}
}
