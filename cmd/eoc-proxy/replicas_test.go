package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/redistest"
)

// replicaCall posts one chat question to a replica as key and returns the status, headers and
// body.
func replicaCall(t *testing.T, s *stack, key, question string, header ...string) (int, http.Header, string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, fakes.DefaultModel, question)
	req, err := http.NewRequest(http.MethodPost, s.URL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil, ""
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// twoReplicas starts two proxies on one real redis-server, in front of one fake upstream
// (each token priced at 0.0001 J, so a default call of 12 prompt and 4 completion tokens costs
// 0.0016 J). Their redis.op_timeout is long: these tests are about sharing, and on a loaded
// machine one slow operation under the default deadline makes a replica count alone.
func twoReplicas(t *testing.T, extra string) (a, b *stack, fake *fakes.Server, srv *redistest.Server, cfgC, ledgerDir string) {
	t.Helper()
	srv = redistest.Start(t)
	fake = fakes.NewOpenAI(t, fakes.Config{Reply: "shared answer", Chunks: 4, Delay: 2 * time.Millisecond})
	ledgerDir = t.TempDir()
	cfg := func(id string) string {
		return fmt.Sprintf(`
log_level: error
cascade: {stages: [cache, kv, neural], kv: {threshold: 0.9}}
backends: [{name: up, type: openai, url: %q, models: ["fake-*"], timeout: 60s}]
redis: {url: %q, op_timeout: 30s}
replica_id: %s
ledger: {path: %q}
meter: {rapl: {enabled: "off"}, nvml: {enabled: "off"}, token_models: [{models: ["fake-*"], joules_per_prompt_token: 0.0001, joules_per_completion_token: 0.0001}]}
%s`, fake.BaseURL(), srv.URL, id, filepath.Join(ledgerDir, "receipts.jsonl"), extra)
	}
	return startStack(t, cfg("a")), startStack(t, cfg("b")), fake, srv, cfg("c"), ledgerDir
}

const replicaKeys = `
auth:
  keys:
    - {id: team-a, key: key-a}
    - {id: team-b, key: key-b}
    - {id: thrifty, key: key-t, budget: {joules: 0.05, per: day}}
    - {id: limited, key: key-l, limits: {rpm: 10}}
`

func TestTwoReplicasShareOneRedis(t *testing.T) {
	a, b, fake, srv, cfgC, ledgerDir := twoReplicas(t, replicaKeys)

	// A question answered on A is a cache hit on B: the upstream is called once.
	if st, h, _ := replicaCall(t, a, "key-a", "what is shared?"); st != 200 || h.Get("X-EOC-Stage") != "neural" {
		t.Fatalf("A: %d %s", st, h.Get("X-EOC-Stage"))
	}
	a.settled(t) // A's cache learns the answer after its response
	st, h, body := replicaCall(t, b, "key-a", "what is shared?")
	if st != 200 || h.Get("X-EOC-Stage") != "cache" || !strings.Contains(body, "shared answer") || fake.Requests() != 1 {
		t.Fatalf("B: %d stage %q, upstream called %d times", st, h.Get("X-EOC-Stage"), fake.Requests())
	}
	// Another tenant never gets it.
	if _, h, _ := replicaCall(t, b, "key-b", "what is shared?"); h.Get("X-EOC-Stage") != "neural" || fake.Requests() != 2 {
		t.Fatalf("team-b got stage %q", h.Get("X-EOC-Stage"))
	}

	t.Run("kv learned on A answers on B", func(t *testing.T) {
		if st, h, _ := replicaCall(t, a, "key-a", "How do I reset my password?"); st != 200 || h.Get("X-EOC-Stage") != "neural" {
			t.Fatalf("A: %d %s", st, h.Get("X-EOC-Stage"))
		}
		// A learns it in the background: wait until A answers the variant from kv.
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, h, _ := replicaCall(t, a, "key-a", "How do I reset my password", "Cache-Control", "no-store"); h.Get("X-EOC-Stage") == "kv" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("A never learned the answer")
			}
			time.Sleep(20 * time.Millisecond)
		}
		learned := time.Now()
		// The variant is not stored on B (no-store), so only A's entry can answer it there. The
		// deadline only bounds a hang; how long B took is logged, not asserted.
		deadline = learned.Add(10 * time.Second)
		for {
			st, h, body := replicaCall(t, b, "key-a", "how do i reset my password", "Cache-Control", "no-store")
			if st == 200 && h.Get("X-EOC-Stage") == "kv" && strings.Contains(body, "shared answer") {
				t.Logf("on B %v after A learned it", time.Since(learned).Round(time.Millisecond))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("B never answered from kv (stage %q)", h.Get("X-EOC-Stage"))
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Another tenant does not get it.
		if _, h, _ := replicaCall(t, b, "key-b", "how do i reset my password", "Cache-Control", "no-store"); h.Get("X-EOC-Stage") != "neural" {
			t.Fatalf("team-b got stage %q", h.Get("X-EOC-Stage"))
		}
		// A replica started now replays what was learned: it starts warm.
		c := startStack(t, cfgC)
		deadline = time.Now().Add(10 * time.Second)
		for {
			_, h, _ := replicaCall(t, c, "key-a", "How do I reset my password!", "Cache-Control", "no-store")
			if h.Get("X-EOC-Stage") == "kv" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a new replica did not replay the stream: stage %q", h.Get("X-EOC-Stage"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("budget", func(t *testing.T) {
		// 200 concurrent calls, half to each replica, on a 0.05 J/day key: at most the budget
		// plus one call.
		var mu sync.Mutex
		spent, dearest, ok := 0.0, 0.0, 0
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := a
				if i%2 == 1 {
					s = b
				}
				st, h, _ := replicaCall(t, s, "key-t", fmt.Sprint("budgeted ", i))
				j, _ := strconv.ParseFloat(h.Get("X-EOC-Joules"), 64)
				mu.Lock()
				defer mu.Unlock()
				spent += j
				dearest = max(dearest, j)
				if st == 200 {
					ok++
				} else if st != 429 {
					t.Errorf("status %d", st)
				}
			}()
		}
		wg.Wait()
		t.Logf("%d calls passed, %.4f J spent of 0.05 J, dearest %.4f J", ok, spent, dearest)
		if spent > 0.05+dearest+1e-9 || ok == 0 {
			t.Fatalf("spent %.4f J of a 0.05 J budget (dearest call %.4f J), %d calls passed", spent, dearest, ok)
		}
	})

	t.Run("rpm across replicas", func(t *testing.T) {
		// An RPM limit of 10 across two replicas admits 10 in the minute: 30 calls, alternating.
		passed, refused := 0, 0
		for i := range 30 {
			s := a
			if i%2 == 1 {
				s = b
			}
			st, h, body := replicaCall(t, s, "key-l", fmt.Sprint("limited ", i))
			switch st {
			case 200:
				passed++
			case 429:
				refused++
				ra, _ := strconv.Atoi(h.Get("Retry-After"))
				if ra < 1 || ra > 60 || !strings.Contains(body, `"code":"rate_limit_exceeded"`) || !strings.Contains(body, `"type":"requests"`) {
					t.Fatalf("429: Retry-After %q, body %s", h.Get("Retry-After"), body)
				}
			default:
				t.Fatalf("status %d: %s", st, body)
			}
		}
		if passed != 10 || refused != 20 {
			t.Fatalf("%d passed, %d refused: want 10 and 20", passed, refused)
		}
	})

	t.Run("redis killed", func(t *testing.T) {
		srv.Kill()
		for _, s := range []*stack{a, b} {
			for _, q := range []string{"after the outage", "after the outage", "what is shared?"} {
				if st, _, body := replicaCall(t, s, "key-a", q); st != 200 {
					t.Fatalf("with redis gone: %d %s", st, body)
				}
			}
			if st, _, body := replicaCall(t, s, "key-t", "budget without redis"); st != 200 && st != 429 {
				t.Fatalf("budgeted key with redis gone: %d %s", st, body)
			}
		}
		if m := metrics(t, a); !strings.Contains(m, "\neoc_redis_up 0") {
			t.Fatal("eoc_redis_up is not 0 with redis gone")
		}
		// Sharing resumes when Redis is back (empty: a fresh server).
		srv.Restart()
		waitMetric(t, a, "\neoc_redis_up 1", 10*time.Second)
		waitMetric(t, b, "\neoc_redis_up 1", 10*time.Second)
		replicaCall(t, a, "key-a", "after the return")
		a.settled(t)
		if _, h, _ := replicaCall(t, b, "key-a", "after the return"); h.Get("X-EOC-Stage") != "cache" {
			t.Fatalf("after the return, B: stage %q", h.Get("X-EOC-Stage"))
		}
	})

	t.Run("ledgers", func(t *testing.T) {
		// Each replica keeps its own ledger, named by its replica id; receipts verify and sum
		// take the files of all of them.
		files, _ := filepath.Glob(filepath.Join(ledgerDir, "receipts-*.jsonl"))
		if len(files) < 2 || !strings.HasSuffix(files[0], "receipts-a.jsonl") || !strings.HasSuffix(files[1], "receipts-b.jsonl") {
			t.Fatalf("ledger files %v", files)
		}
		first, err := os.ReadFile(files[1])
		if err != nil || !strings.Contains(string(first), `"replica":"b"`) {
			t.Fatalf("no replica in b's records: %v", err)
		}
		var out strings.Builder
		if err := runReceipts(append([]string{"verify"}, files...), &out); err != nil || strings.Count(out.String(), "ok: ") != len(files) {
			t.Fatalf("verify: %v\n%s", err, out.String())
		}
		out.Reset()
		if err := runReceipts(append([]string{"sum", "-by", "key"}, files...), &out); err != nil || !strings.Contains(out.String(), "team-a") || !strings.Contains(out.String(), "team-b") {
			t.Fatalf("sum: %v\n%s", err, out.String())
		}
	})
}

func metrics(t *testing.T, s *stack) string {
	t.Helper()
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	m, _ := io.ReadAll(resp.Body)
	return string(m)
}

// waitMetric waits until the replica's /metrics holds want.
func waitMetric(t *testing.T, s *stack, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(metrics(t, s), want) {
		if time.Now().After(deadline) {
			t.Fatalf("/metrics never held %q", want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
