package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/redistest"
)

// Issue 32 row 5, end to end: Redis hangs (SIGSTOP) for 10 s under light load on two replicas
// with a budgeted key. No call is held longer than redis.op_timeout (asserted with two seconds'
// slack for a loaded machine), both replicas read eoc_redis_up 0 once a call met the hang, every
// call is answered, and after the hang no reservation is left in Redis.
func TestRedisHangHoldsNoCallPastTheDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("hangs Redis for 10 s")
	}
	const (
		opTimeout = 300 * time.Millisecond
		hang      = 10 * time.Second
		slack     = 2 * time.Second
	)
	srv := redistest.Start(t)
	fake := fakes.NewOpenAI(t, fakes.Config{Reply: "an answer", Chunks: 2})
	dir := t.TempDir()
	cfg := func(id string) string {
		return fmt.Sprintf(`
log_level: error
cascade: {stages: [cache, kv, neural]}
backends: [{name: up, type: openai, url: %q, models: ["fake-*"], timeout: 60s}]
redis: {url: %q, op_timeout: %s}
replica_id: %s
ledger: {path: %q}
meter: {rapl: {enabled: "off"}, nvml: {enabled: "off"}, token_models: [{models: ["fake-*"], joules_per_prompt_token: 0.0001, joules_per_completion_token: 0.0001}]}
auth: {keys: [{id: budgeted, key: key-b, budget: {joules: 1000, per: day}}]}
`, fake.BaseURL(), srv.URL, opTimeout, id, filepath.Join(dir, "receipts.jsonl"))
	}
	replicas := []*stack{startStack(t, cfg("a")), startStack(t, cfg("b"))}
	for i, s := range replicas { // priced: the key's calls run together
		if code, _, body := replicaCall(t, s, "key-b", fmt.Sprint("before the hang ", i)); code != http.StatusOK {
			t.Fatalf("before the hang: %d %s", code, body)
		}
	}

	srv.Hang()
	end := time.Now().Add(hang)
	var (
		mu    sync.Mutex
		worst time.Duration
		calls int
		wg    sync.WaitGroup
	)
	for n := 0; time.Now().Before(end); n++ {
		for i, s := range replicas {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				code, _, body := replicaCall(t, s, "key-b", fmt.Sprintf("during the hang %d on %d", n, i))
				took := time.Since(start)
				if code != http.StatusOK {
					t.Errorf("during the hang: %d %s", code, body)
				}
				mu.Lock()
				worst, calls = max(worst, took), calls+1
				mu.Unlock()
			}()
		}
		wg.Wait()
		if n == 0 {
			for _, s := range replicas {
				if m := metrics(t, s); !strings.Contains(m, "eoc_redis_up 0") {
					t.Errorf("a replica reads Redis up after a call met the hang")
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	srv.Resume()
	t.Logf("%d calls on two replicas during a %v hang; the longest took %v (op_timeout %v)", calls, hang, worst, opTimeout)
	if worst > opTimeout+slack {
		t.Errorf("a call was held %v by a hung Redis; redis.op_timeout is %v", worst, opTimeout)
	}

	for _, s := range replicas {
		waitMetric(t, s, "eoc_redis_up 1", 30*time.Second)
	}
	ctl := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = ctl.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // bounds a hang only
	defer cancel()
	left := int64(-1)
	for left != 0 {
		if ctx.Err() != nil {
			t.Fatalf("%d reservations left in Redis after the hang", left)
		}
		if n, err := ctl.ZCard(ctx, "eoc:budget:{budgeted}:inflight").Result(); err == nil {
			left = n
		}
		time.Sleep(50 * time.Millisecond)
	}
}
