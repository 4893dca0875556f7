//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eoc-proxy/eoc-proxy/internal/procs"
)

// The store phase: issue 32's rows on what the proxy keeps (2: huge answers are served, not
// stored; 6: a malformed whole answer gets the streamed one's verdict; 5: a hung Redis holds no
// call past its deadline and leaves no reservation). Each row runs on proxies of its own,
// started here, so the batch proxy's figures are not mixed in.

// hugeAnswerBytes is the size of each huge streamed answer.
const hugeAnswerBytes = 200 << 20

// storeFault answers the upstream faults of this phase; it reports false for the others.
//
//   - "huge": an OpenAI stream of hugeAnswerBytes of text in 64 KiB chunks, made as it goes;
//   - "badindex": an answer whose choice index is -1, whole or streamed.
func (u *upstream) storeFault(w http.ResponseWriter, r *http.Request, d dialect, fault string, stream bool) bool {
	switch fault {
	case "huge":
		w.Header().Set("Content-Type", d.ctype(true))
		piece := d.chunk(strings.Repeat("a", 64<<10), false)
		for sent := 0; sent < hugeAnswerBytes; sent += 64 << 10 {
			if _, err := io.WriteString(w, piece); err != nil {
				u.cancels.Add(1)
				return true
			}
		}
		_, _ = io.WriteString(w, d.chunk("", true))
	case "badindex":
		if stream {
			w.Header().Set("Content-Type", d.ctype(true))
			_, _ = io.WriteString(w, strings.Replace(d.chunk("x", false), `"index":0`, `"index":-1`, 1)+d.chunk("", true))
		} else {
			writeJSON(w, strings.Replace(d.whole("x"), `"index":0`, `"index":-1`, 1))
		}
	default:
		return false
	}
	return true
}

// storeProxy is one eoc-proxy started for this phase.
type storeProxy struct {
	p     *procs.Proc
	url   string
	pprof string // its debug.pprof listener, when cfg asked for one ("http://" + pprofAddr)
}

// startStoreProxy starts eoc-proxy with cfg (its listen line added) in a directory of its own,
// with env added to the suite's environment.
func (r *run) startStoreProxy(name, cfg string, env ...string) storeProxy {
	listen, err := procs.FreePort()
	if err != nil {
		procs.Fatalf("%v", err)
	}
	dir := filepath.Join(r.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		procs.Fatalf("%v", err)
	}
	cfgPath := filepath.Join(dir, "eoc.yaml")
	if err := os.WriteFile(cfgPath, []byte("listen: "+listen+"\n"+cfg), 0o644); err != nil {
		procs.Fatalf("%v", err)
	}
	logPath := filepath.Join(dir, "eoc-proxy.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		procs.Fatalf("%v", err)
	}
	defer func() { _ = logf.Close() }()
	cmd := exec.Command(r.o.eocBin, "serve", "-config", cfgPath)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	p, err := procs.Start("eoc-proxy "+name, cmd)
	if err != nil {
		procs.Fatalf("%v", err)
	}
	p.Log = logPath
	s := storeProxy{p: p, url: "http://" + listen}
	if err := procs.WaitReady(p, s.url+"/healthz"); err != nil {
		procs.Fatalf("%v", err)
	}
	return s
}

// rssMB is a process's resident set.
func rssMB(p *procs.Proc) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Cmd.Process.Pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			kb, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
			return kb / 1024
		}
	}
	return -1
}

// metric is the value of a metric without labels on s's /metrics, or -1.
func (s storeProxy) metric(name string) float64 {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(s.url + "/metrics")
	if err != nil {
		return -1
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return -1
	}
	f, _ := strconv.ParseFloat(string(m[1]), 64)
	return f
}

// call posts one chat call to s as key ("" for none), reads the answer to the end without
// keeping it, and returns the status, the stage and the bytes read.
func (s storeProxy) call(ctx context.Context, key, model, prompt string, stream bool) (status int, stage string, n int64, err error) {
	body := fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":%q}]}`, model, stream, prompt)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return 0, "", 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	n, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("X-EOC-Stage"), n, err
}

// storeRows runs the phase's three rows.
func (r *run) storeRows() {
	var mu sync.Mutex
	r.line("")
	r.line("| issue 32 | what | measured |")
	r.line("|---|---|---|")
	cfg := fmt.Sprintf(`log_level: error
cascade: {stages: [cache, kv, neural]}
backends: [{name: oa, type: openai, url: %s/v1, models: ["oa-*"], timeout: 10s}]
`, r.up)
	withPprof := func(name string, env ...string) storeProxy {
		addr, err := procs.FreePort()
		if err != nil {
			procs.Fatalf("%v", err)
		}
		s := r.startStoreProxy(name, cfg+fmt.Sprintf("debug: {pprof: %s}\n", addr), env...)
		s.pprof = "http://" + addr
		return s
	}
	s := withPprof("store")
	r.hugeAnswers(&mu, s, false)
	r.malformed(&mu, s)
	s.p.Stop()
	// The same row with GOGC=100 set explicitly, the runtime's default: serve's GC tuner steps
	// aside, and the row shows the memory its headroom costs.
	s = withPprof("store-gogc100", "GOGC=100")
	r.hugeAnswers(&mu, s, true)
	s.p.Stop()
	r.redisHang(&mu)
	r.line("")
}

// hugeAnswers is row 2: three streamed answers of 200 MB, then the proxy's RSS, its cache's
// bytes and what it counted as too large to store; a repeat must go upstream again. RSS is
// shown against both baselines: the idle process, and the process after a first answer of the
// same size (streaming leaves the Go heap at its working size: the collector's headroom and
// freed pages kept for reuse, not what the answers left behind). It is sampled 2 s after the
// third answer, again 10 s later (the runtime's background scavenger returns freed pages
// slowly), and once more 5 s after a GC forced through pprof (the heap goal then follows the
// live heap, and the scavenger returns what lies above it). Each sample has the runtime's
// figures beside it, read from /metrics after RSS.
//
// With gogc100 the proxy runs with GOGC=100 in its environment (the tuner off), and the row
// must end within 50 MB of the idle process; with the tuner, within 50 MB of the process after
// its first answer (the tuner lets the heap grow 32 MiB past its live part before a GC, and
// the runtime keeps what it freed up to about the heap goal).
func (r *run) hugeAnswers(mu *sync.Mutex, s storeProxy, gogc100 bool) {
	ctx := context.Background()
	idle := s.memSample()
	r.upDo(http.MethodPost, "/control/fault?f=huge&p="+urlQuery("a first huge answer"))
	if st, _, _, err := s.call(ctx, "", "oa-m", "a first huge answer", true); st != http.StatusOK {
		r.unexpectedf(mu, "huge answers: the first call got %d (%v)", st, err)
	}
	time.Sleep(2 * time.Second)
	warm := s.memSample()
	peak := warm.rssMB
	for i := range 3 {
		prompt := fmt.Sprintf("huge answer %d", i)
		r.upDo(http.MethodPost, "/control/fault?f=huge&p="+urlQuery(prompt))
		st, _, n, err := s.call(ctx, "", "oa-m", prompt, true)
		if st != http.StatusOK || n < hugeAnswerBytes || err != nil {
			r.unexpectedf(mu, "huge answer %d: status %d, %d bytes, %v", i, st, n, err)
		}
		peak = max(peak, rssMB(s.p))
	}
	time.Sleep(2 * time.Second)
	after := s.memSample()
	time.Sleep(10 * time.Second)
	later := s.memSample()
	gcd := later
	if s.pprof != "" {
		c := &http.Client{Timeout: 30 * time.Second}
		if resp, err := c.Get(s.pprof + "/debug/pprof/heap?gc=1"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		time.Sleep(5 * time.Second)
		gcd = s.memSample()
	}
	prompt := "huge answer 0"
	calls := r.upCount(prompt)
	st, stage, _, _ := s.call(ctx, "", "oa-m", prompt, true)
	repeatUp := r.upCount(prompt) == calls+1
	tooLarge, cacheBytes, kvTooLarge := s.metric("eoc_cache_too_large_total"), s.metric("eoc_cache_bytes"), s.metric("eoc_kv_too_large_total")
	row, base, baseName := "2", warm.rssMB, "the first answer"
	if gogc100 {
		row, base, baseName = "2, GOGC=100 (tuner off)", idle.rssMB, "idle"
	}
	r.line("| %s | three streamed answers of %d MB | RSS %.0f MB idle, %.0f MB after a first such answer, %.0f MB 2 s after three more (%+.0f MB over idle, %+.0f MB over the first answer), %.0f MB 10 s later, %.0f MB 5 s after a forced GC (%+.0f MB over idle); highest seen between answers %.0f MB; eoc_cache_bytes %.0f, eoc_cache_too_large_total %.0f, eoc_kv_too_large_total %.0f; a repeat went upstream: %v (status %d, stage %s) |",
		row, hugeAnswerBytes>>20, idle.rssMB, warm.rssMB, after.rssMB, after.rssMB-idle.rssMB, after.rssMB-warm.rssMB, later.rssMB, gcd.rssMB, gcd.rssMB-idle.rssMB,
		peak, cacheBytes, tooLarge, kvTooLarge, repeatUp, st, stage)
	r.line("row %s, the Go runtime at each sample (MB; heap alloc is live plus garbage not yet collected; idle is freed spans the runtime keeps, released the part of it returned to the OS): idle %s; after a first answer %s; 2 s after three more %s; 10 s later %s; 5 s after a forced GC %s",
		row, idle, warm, after, later, gcd)
	if after.rssMB-base > 50 || tooLarge < 4 || !repeatUp {
		r.unexpectedf(mu, "huge answers (row %s): RSS %+.0f MB over %s, %.0f counted too large, repeat upstream %v", row, after.rssMB-base, baseName, tooLarge, repeatUp)
	}
}

// storeMem is one sample of a store proxy's RSS and its Go runtime's heap figures.
type storeMem struct {
	rssMB                                                float64
	heapAlloc, heapInuse, heapIdle, heapReleased, gcGoal float64 // bytes
}

func (m storeMem) String() string {
	mb := func(b float64) float64 { return b / (1 << 20) }
	return fmt.Sprintf("RSS %.0f, heap alloc %.1f, in use %.1f, idle %.1f, released %.1f, GC goal %.1f",
		m.rssMB, mb(m.heapAlloc), mb(m.heapInuse), mb(m.heapIdle), mb(m.heapReleased), mb(m.gcGoal))
}

// memSample reads RSS first, then the runtime's figures from /metrics.
func (s storeProxy) memSample() storeMem {
	m := storeMem{rssMB: rssMB(s.p)}
	m.heapAlloc, m.heapInuse = s.metric("go_memstats_heap_alloc_bytes"), s.metric("go_memstats_heap_inuse_bytes")
	m.heapIdle, m.heapReleased = s.metric("go_memstats_heap_idle_bytes"), s.metric("go_memstats_heap_released_bytes")
	m.gcGoal = s.metric("go_memstats_next_gc_bytes")
	return m
}

// malformed is row 6: an answer with choices[0].index -1, whole and streamed, gets a 502 both
// ways, and once the fault is gone the same request goes upstream (nothing was cached).
func (r *run) malformed(mu *sync.Mutex, s storeProxy) {
	ctx := context.Background()
	var got []string
	for _, stream := range []bool{false, true} {
		prompt := fmt.Sprintf("index minus one, stream %v", stream)
		r.upDo(http.MethodPost, "/control/fault?f=badindex&p="+urlQuery(prompt))
		st, _, _, _ := s.call(ctx, "", "oa-m", prompt, stream)
		r.upDo(http.MethodDelete, "/control/fault?p="+urlQuery(prompt))
		before := r.upCount(prompt)
		again, stage, _, _ := s.call(ctx, "", "oa-m", prompt, stream)
		up := r.upCount(prompt) == before+1
		kind := "whole"
		if stream {
			kind = "streamed"
		}
		got = append(got, fmt.Sprintf("%s %d, repeated: %d from %s (upstream called: %v)", kind, st, again, stage, up))
		if st != http.StatusBadGateway || again != http.StatusOK || !up {
			r.unexpectedf(mu, "malformed answer (%s): %d, then %d from %s, upstream called %v", kind, st, again, stage, up)
		}
	}
	r.line("| 6 | an answer with choices[0].index -1 | %s |", strings.Join(got, "; "))
}

// redisOpTimeout is the deadline the hang row configures (redis.op_timeout; the default).
const redisOpTimeout = 500 * time.Millisecond

// redisHang is row 5: two replicas on one redis-server, a budgeted key; Redis is stopped
// (SIGSTOP) for 10 s while each replica takes a call every 100 ms. No call may take longer
// than the op deadline (plus 2 s for a loaded machine), every call is answered, both replicas
// read eoc_redis_up 0 once a call met the hang, and no reservation is left after it.
func (r *run) redisHang(mu *sync.Mutex) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		r.line("| 5 | Redis stopped 10 s under two replicas | skipped: no redis-server (apt-get install redis-server) |")
		return
	}
	addr, err := procs.FreePort()
	if err != nil {
		procs.Fatalf("%v", err)
	}
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	rdir := filepath.Join(r.dir, "redis")
	_ = os.MkdirAll(rdir, 0o755)
	rp, err := procs.Start("redis-server", exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no", "--dir", rdir))
	if err != nil {
		procs.Fatalf("%v", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = rdb.Close() }()
	for i := 0; rdb.Ping(context.Background()).Err() != nil; i++ {
		if i > 200 {
			procs.Fatalf("redis-server did not answer on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cfg := func(id string) string {
		return fmt.Sprintf(`log_level: error
cascade: {stages: [cache, kv, neural]}
backends: [{name: oa, type: openai, url: %s/v1, models: ["oa-*"], timeout: 10s}]
redis: {url: "redis://%s/0", op_timeout: %s}
replica_id: %s
ledger: {path: %s}
meter: {token_models: [{models: ["oa-*"], joules_per_prompt_token: 0.0001, joules_per_completion_token: 0.0001}]}
auth: {keys: [{id: budgeted, key: key-b, budget: {joules: 1000, per: day}}]}
`, r.up, addr, redisOpTimeout, id, filepath.Join(r.dir, "hang-"+id+".jsonl"))
	}
	replicas := []storeProxy{r.startStoreProxy("replica-a", cfg("a")), r.startStoreProxy("replica-b", cfg("b"))}
	defer func() {
		for _, s := range replicas {
			s.p.Stop()
		}
		rp.Stop()
	}()
	ctx := context.Background()
	for i, s := range replicas { // priced: the key's calls run together
		if st, _, _, err := s.call(ctx, "key-b", "oa-m", fmt.Sprint("before the hang ", i), false); st != http.StatusOK {
			r.unexpectedf(mu, "redis hang: a call before the hang got %d (%v)", st, err)
		}
	}
	const hang = 10 * time.Second
	_ = rp.Cmd.Process.Signal(syscall.SIGSTOP)
	end := time.Now().Add(hang)
	var (
		worst        time.Duration
		calls, fails int
		downSeen     = true
		wg           sync.WaitGroup
		cmu          sync.Mutex
	)
	for n := 0; time.Now().Before(end); n++ {
		for i, s := range replicas {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				st, _, _, _ := s.call(ctx, "key-b", "oa-m", fmt.Sprintf("during the hang %d on %d", n, i), false)
				took := time.Since(start)
				cmu.Lock()
				worst, calls = max(worst, took), calls+1
				if st != http.StatusOK {
					fails++
				}
				cmu.Unlock()
			}()
		}
		wg.Wait()
		if n == 0 {
			for _, s := range replicas {
				downSeen = downSeen && s.metric("eoc_redis_up") == 0
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = rp.Cmd.Process.Signal(syscall.SIGCONT)
	resumed := time.Now()
	left := int64(-1)
	for time.Since(resumed) < 30*time.Second {
		if n, err := rdb.ZCard(ctx, "eoc:budget:{budgeted}:inflight").Result(); err == nil {
			left = n
		}
		if left == 0 && replicas[0].metric("eoc_redis_up") == 1 && replicas[1].metric("eoc_redis_up") == 1 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.line("| 5 | Redis stopped %v under two replicas, a budgeted key | %d calls, %d not 200; the longest took %d ms (redis.op_timeout %d ms); eoc_redis_up 0 on both after the first call: %v; reservations left after: %d (%.1f s after SIGCONT) |",
		hang, calls, fails, worst.Milliseconds(), redisOpTimeout.Milliseconds(), downSeen, left, time.Since(resumed).Seconds())
	if worst > redisOpTimeout+2*time.Second || fails > 0 || !downSeen || left != 0 {
		r.unexpectedf(mu, "redis hang: longest call %v, %d failed, down seen %v, %d reservations left", worst, fails, downSeen, left)
	}
}
