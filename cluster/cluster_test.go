package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/internal/testenv/redistest"
)

func open(t *testing.T, url, replica string) *Client {
	t.Helper()
	c, err := Open(Options{URL: url, ReplicaID: replica, Logger: zerolog.Nop(), Probe: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestCacheSharedAndScoped(t *testing.T) {
	srv := redistest.Start(t)
	a, b := open(t, srv.URL, "a"), open(t, srv.URL, "b")
	ctx := context.Background()
	a.Cache().Set(ctx, "t1", "k", []byte("v"), time.Minute)
	if got, ok := b.Cache().Get(ctx, "t1", "k"); !ok || string(got) != "v" {
		t.Fatalf("replica b: %q %v", got, ok)
	}
	if _, ok := b.Cache().Get(ctx, "t2", "k"); ok {
		t.Fatal("another tenant read the entry")
	}
}

func TestBudgetsAtomicAcrossClients(t *testing.T) {
	srv := redistest.Start(t)
	books := []*Budgets{open(t, srv.URL, "a").Budgets(), open(t, srv.URL, "b").Budgets()}
	ctx := context.Background()
	// Price the key with one call.
	id, v, _, _, err := books[0].Admit(ctx, "k", "p", 1, 2, time.Minute)
	if err != nil || v != 0 {
		t.Fatalf("%v %v", v, err)
	}
	if _, v, _, _, _ := books[1].Admit(ctx, "k", "p", 1, 2, time.Minute); v != 1 {
		t.Fatalf("a second call before the first was priced: verdict %d", v)
	}
	if spent, _, _, err := books[0].Settle(ctx, "k", "p", id, 0.01, false, 2); err != nil || spent != 0.01 {
		t.Fatalf("settle: %v %v", spent, err)
	}
	var mu sync.Mutex
	spent := 0.01
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := books[i%2]
			for {
				id, v, _, _, err := b.Admit(ctx, "k", "p", 1, 2, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				switch v {
				case 1:
					time.Sleep(time.Millisecond)
					continue
				case 2:
					return
				}
				mu.Lock()
				spent += 0.015 // dearer than the first call, as calls that share a machine are
				mu.Unlock()
				_, _, _, _ = b.Settle(ctx, "k", "p", id, 0.015, false, 2)
				return
			}
		}()
	}
	wg.Wait()
	if spent > 1+0.015 || spent < 1 {
		t.Fatalf("spent %v of 1 J", spent)
	}
	if s, r, p, err := books[1].Usage(ctx, "k", "p", 2); err != nil || r != 0 || s < 1 || p != 0 {
		t.Fatalf("usage %v %v %v %v", s, r, p, err)
	}
	if s, _, _, _ := books[1].Usage(ctx, "k", "q", 2); s != 0 {
		t.Fatalf("a new period starts at %v", s)
	}
}

func TestDownAndBack(t *testing.T) {
	srv := redistest.Start(t)
	c := open(t, srv.URL, "a")
	back := make(chan struct{}, 1)
	c.OnBack(func() { back <- struct{}{} })
	if !c.Up() {
		t.Fatal("not up")
	}
	srv.Kill()
	ctx := context.Background()
	if _, _, _, _, err := c.Budgets().Admit(ctx, "k", "p", 1, 2, time.Minute); !errors.Is(err, ErrDown) {
		t.Fatalf("admit with redis gone: %v", err)
	}
	if c.Up() {
		t.Fatal("still up")
	}
	start := time.Now()
	if _, ok := c.Cache().Get(ctx, "t", "k"); ok {
		t.Fatal("a down cache answered")
	}
	t.Logf("a down cache missed in %v", time.Since(start)) // measured, not asserted
	srv.Restart()
	select {
	case <-back:
	case <-time.After(10 * time.Second): // bounds a hang only
		t.Fatal("never came back")
	}
	if !c.Up() {
		t.Fatal("not up after restart")
	}
}

func TestUnreachableAtStart(t *testing.T) {
	c := open(t, "redis://127.0.0.1:1/0", "a")
	if c.Up() {
		t.Fatal("up without a server")
	}
	if _, err := Open(Options{URL: "http://x"}); err == nil {
		t.Fatal("a non-redis URL parsed")
	}
}

func TestLimitsAcrossClients(t *testing.T) {
	srv := redistest.Start(t)
	a, b := open(t, srv.URL, "a").Limits(), open(t, srv.URL, "b").Limits()
	ctx := context.Background()
	passed := 0
	for i := range 9 {
		l := a
		if i%2 == 1 {
			l = b
		}
		ok, retry, err := l.Take(ctx, "k", 5, 0)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			passed++
		} else if retry <= 0 || retry > time.Minute {
			t.Fatalf("retry %v", retry)
		}
	}
	if passed != 5 {
		t.Fatalf("%d passed, want 5", passed)
	}
	// Tokens: 100 per minute, spent on another replica.
	if ok, _, _ := a.Take(ctx, "t", 0, 100); !ok {
		t.Fatal("refused before any token")
	}
	if err := b.AddTokens(ctx, "t", 100); err != nil {
		t.Fatal(err)
	}
	if ok, retry, _ := a.Take(ctx, "t", 0, 100); ok || retry <= 0 || retry > time.Minute {
		t.Fatalf("tokens spent: %v %v", ok, retry)
	}
}

func TestSettleOnce(t *testing.T) {
	srv := redistest.Start(t)
	b := open(t, srv.URL, "a").Budgets()
	ctx := context.Background()
	id, _, _, _, err := b.Admit(ctx, "k", "p", 1, 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // a retry after a lost reply
		if spent, _, partial, err := b.Settle(ctx, "k", "p", id, 0.25, true, 2); err != nil || spent != 0.25 || partial != 0.25 {
			t.Fatalf("spent %v (%v partial), %v", spent, partial, err)
		}
	}
	for range 2 { // a call admitted on a replica's own figures has an id of its own, in flight nowhere
		if spent, _, _, err := b.Settle(ctx, "k", "p", "local-1", 0.5, false, 2); err != nil || spent != 0.75 {
			t.Fatalf("local settle: spent %v, %v", spent, err)
		}
	}
}

// The joules of partial figures are kept per period beside the spend, so every replica can say
// that part of a key's spend is unknown (issue 10); a new period starts whole.
func TestBudgetsPartialAcrossClients(t *testing.T) {
	srv := redistest.Start(t)
	a, b := open(t, srv.URL, "a").Budgets(), open(t, srv.URL, "b").Budgets()
	ctx := context.Background()
	settle := func(bk *Budgets, period string, cost float64, partial bool) (spent, partialSpent float64) {
		t.Helper()
		id, v, _, _, err := bk.Admit(ctx, "k", period, 10, 2, time.Minute)
		if err != nil || v != 0 {
			t.Fatalf("admit: %v %v", v, err)
		}
		spent, _, partialSpent, err = bk.Settle(ctx, "k", period, id, cost, partial, 2)
		if err != nil {
			t.Fatal(err)
		}
		return spent, partialSpent
	}
	if spent, p := settle(a, "d1", 1, false); spent != 1 || p != 0 {
		t.Fatalf("whole settle: spent %v, partial %v", spent, p)
	}
	if s, _, p, err := b.Usage(ctx, "k", "d1", 2); err != nil || s != 1 || p != 0 {
		t.Fatalf("replica b, whole spend: spent %v, partial %v, %v", s, p, err)
	}
	// A partial figure is charged its joules like a whole one, and counted apart.
	if spent, p := settle(a, "d1", 0.5, true); spent != 1.5 || p != 0.5 {
		t.Fatalf("partial settle: spent %v, partial %v", spent, p)
	}
	if s, _, p, err := b.Usage(ctx, "k", "d1", 2); err != nil || s != 1.5 || p != 0.5 {
		t.Fatalf("replica b after a partial settle on a: spent %v, partial %v, %v", s, p, err)
	}
	if spent, p := settle(b, "d1", 2, false); spent != 3.5 || p != 0.5 {
		t.Fatalf("a whole settle on b after a's partial one: spent %v, partial %v", spent, p)
	}
	// The next period starts whole, on either replica.
	if s, _, p, _ := a.Usage(ctx, "k", "d2", 2); s != 0 || p != 0 {
		t.Fatalf("next period, before any call: spent %v, partial %v", s, p)
	}
	if spent, p := settle(b, "d2", 1, false); spent != 1 || p != 0 {
		t.Fatalf("next period: spent %v, partial %v", spent, p)
	}
	if s, _, p, err := a.Usage(ctx, "k", "d2", 2); err != nil || s != 1 || p != 0 {
		t.Fatalf("replica a, next period: spent %v, partial %v, %v", s, p, err)
	}
}

// A replica whose clock is a little slow settles under yesterday's period: its cost adds to
// today's spend instead of wiping it, and only a later period starts a new spend.
func TestBudgetsRollForwardOnly(t *testing.T) {
	srv := redistest.Start(t)
	a, b := open(t, srv.URL, "a").Budgets(), open(t, srv.URL, "b").Budgets()
	ctx := context.Background()
	id, v, _, _, err := a.Admit(ctx, "k", "2026-12-04", 100, 2, time.Minute)
	if err != nil || v != 0 {
		t.Fatalf("admit: %v %v", v, err)
	}
	if _, _, _, err := a.Settle(ctx, "k", "2026-12-04", id, 8, false, 2); err != nil {
		t.Fatal(err)
	}
	if spent, _, _, err := b.Settle(ctx, "k", "2026-12-03", "", 0.1, false, 2); err != nil || spent != 8.1 {
		t.Fatalf("settle under the previous period: spent %v, %v", spent, err)
	}
	if _, _, spent, _, err := a.Admit(ctx, "k", "2026-12-04", 100, 2, time.Minute); err != nil || spent != 8.1 {
		t.Fatalf("admit after a late settle: spent %v, %v", spent, err)
	}
	if _, _, spent, _, err := b.Admit(ctx, "k", "2026-12-03", 100, 2, time.Minute); err != nil || spent != 8.1 {
		t.Fatalf("admit under the previous period: spent %v, %v", spent, err)
	}
	if s, _, _, err := b.Usage(ctx, "k", "2026-12-03", 2); err != nil || s != 8.1 {
		t.Fatalf("usage under the previous period: %v %v", s, err)
	}
	if _, _, spent, _, err := a.Admit(ctx, "k", "2026-12-05", 100, 2, time.Minute); err != nil || spent != 0 {
		t.Fatalf("the next period starts at %v, %v", spent, err)
	}
}

// Budget and limit state carries no TTL, so a Redis run with volatile-lru never evicts it; the
// cache's entries always expire, so they are what such a Redis evicts.
func TestOnlyCacheKeysExpire(t *testing.T) {
	srv := redistest.Start(t)
	c := open(t, srv.URL, "a")
	ctx := context.Background()
	b := c.Budgets()
	id, v, _, _, err := b.Admit(ctx, "k", "p", 10, 2, time.Minute)
	if err != nil || v != 0 {
		t.Fatalf("admit: %v %v", v, err)
	}
	if _, _, _, err := b.Settle(ctx, "k", "p", id, 0.5, false, 2); err != nil {
		t.Fatal(err)
	}
	if _, v, _, _, err := b.Admit(ctx, "k", "p", 10, 2, time.Minute); err != nil || v != 0 { // stays in flight
		t.Fatalf("admit: %v %v", v, err)
	}
	if _, _, _, err := b.Usage(ctx, "k", "p", 2); err != nil {
		t.Fatal(err)
	}
	l := c.Limits()
	if ok, _, err := l.Take(ctx, "k", 5, 100); err != nil || !ok {
		t.Fatalf("take: %v %v", ok, err)
	}
	if err := l.AddTokens(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	c.Cache().Set(ctx, "t", "ttl", []byte("v"), time.Minute)
	c.Cache().Set(ctx, "t", "none", []byte("v"), 0)
	rdb := c.rdb.Load()
	for _, k := range append(budgetKeys("k"), limitKeys("k")...) {
		if n, err := rdb.Exists(ctx, k).Result(); err != nil || n != 1 {
			t.Fatalf("%s: exists %d, %v", k, n, err)
		}
		if ttl, err := rdb.TTL(ctx, k).Result(); err != nil || ttl != -1 {
			t.Errorf("%s: TTL %v, %v; want none", k, ttl, err)
		}
	}
	for _, k := range []string{cacheKey("t", "ttl"), cacheKey("t", "none")} {
		if ttl, err := rdb.TTL(ctx, k).Result(); err != nil || ttl <= 0 || ttl > DefaultCacheTTL {
			t.Errorf("%s: TTL %v, %v; want one", k, ttl, err)
		}
	}
	if keys, err := rdb.Keys(ctx, "eoc:budget:*:settled:*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("settled markers as expiring keys: %v %v", keys, err)
	}
}

// A reservation past its hold (its replica died mid-call) no longer counts in the reserved
// joules that usage and settle report, not only in admission.
func TestExpiredReservationsNotReserved(t *testing.T) {
	srv := redistest.Start(t)
	c := open(t, srv.URL, "a")
	b := c.Budgets()
	ctx := context.Background()
	id, _, _, _, err := b.Admit(ctx, "k", "p", 100, 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := b.Settle(ctx, "k", "p", id, 1, false, 2); err != nil { // prices the key: 1 J
		t.Fatal(err)
	}
	dead, v, _, _, err := b.Admit(ctx, "k", "p", 100, 2, time.Millisecond) // never settled
	if err != nil || v != 0 {
		t.Fatalf("admit: %v %v", v, err)
	}
	rdb := c.rdb.Load()
	held, err := rdb.ZScore(ctx, budgetKeys("k")[1], dead).Result()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second) // bounds a hang only
	for {
		now, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if float64(now.UnixMilli()) > held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("redis's clock never passed the hold")
		}
		time.Sleep(time.Millisecond)
	}
	if _, r, _, err := b.Usage(ctx, "k", "p", 2); err != nil || r != 0 {
		t.Fatalf("usage: reserved %v after the hold, %v", r, err)
	}
	// The same expired reservation again, for settle to drop.
	if err := rdb.ZAdd(ctx, budgetKeys("k")[1], redis.Z{Score: held, Member: dead}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, r, _, err := b.Settle(ctx, "k", "p", "other", 1, false, 2); err != nil || r != 0 {
		t.Fatalf("settle: reserved %v after the hold, %v", r, err)
	}
}

// A follower whose XREAD times out (a slow Redis, here one paused) goes on following: a slow
// Redis is not down.
func TestFollowSurvivesSlowRedis(t *testing.T) {
	srv := redistest.Start(t)
	slowOpen := func() *Client { // no ping within the test: only the follower can mark Redis down
		c, err := Open(Options{URL: srv.URL, Logger: zerolog.Nop(), OpTimeout: 200 * time.Millisecond, Probe: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	c, pub := slowOpen(), slowOpen()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.KVStream(100).Follow(ctx, func(e []byte) { got <- string(e) })
	}()
	t.Cleanup(func() { cancel(); <-done })
	ctl := pub.rdb.Load()
	// Paused longer than an XREAD's read deadline (go-redis: its block, 1 s, plus 10 s), so the
	// follower's XREAD times out. The test takes as long as the pause.
	if err := ctl.Do(ctx, "CLIENT", "PAUSE", 12000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second) // bounds a hang only
	defer pcancel()
	for ctl.Ping(pctx).Err() != nil { // answers once the pause is over
		if pctx.Err() != nil {
			t.Fatal("redis never came out of its pause")
		}
	}
	if !c.Up() {
		t.Fatal("a follower's timeout marked Redis down")
	}
	if err := pub.KVStream(100).Publish(ctx, []byte("after the pause")); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-got:
		if e != "after the pause" {
			t.Fatalf("followed %q", e)
		}
	case <-time.After(10 * time.Second): // bounds a hang only
		t.Fatal("the follower stopped following after a timeout")
	}
}

// An operation ends at its caller's deadline, not at the client's socket timeouts: the cache's
// lookup gives up after its 500 ms, not after OpTimeout. go-redis ignores context deadlines
// unless ContextTimeoutEnabled is set. Redis is paused past both the caller's deadline and the
// end of the test, so a client that waits for Redis finds the entry and a client that keeps the
// deadline misses it; the outcome, not a duration, is checked.
func TestCallerDeadlineBoundsAnOperation(t *testing.T) {
	srv := redistest.Start(t)
	c, err := Open(Options{URL: srv.URL, Logger: zerolog.Nop(), OpTimeout: 30 * time.Second, Probe: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	c.Cache().Set(ctx, "t", "k", []byte("v"), time.Minute)
	if _, ok := c.Cache().Get(ctx, "t", "k"); !ok {
		t.Fatal("the entry was not stored")
	}
	ctl := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = ctl.Close() })
	if err := ctl.Do(ctx, "CLIENT", "PAUSE", 30000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if v, ok := c.Cache().Get(dctx, "t", "k"); ok {
		t.Fatalf("got %q from a paused Redis: the lookup outlived its caller's deadline", v)
	}
	if !c.Up() {
		t.Fatal("a caller's deadline marked Redis down")
	}
}
