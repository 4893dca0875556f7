//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/eoc-proxy/eoc-proxy/internal/procs"
)

// result is what a client got for one chat call.
type result struct {
	status   int
	stage    string
	receipt  string
	retry    string // Retry-After
	body     []byte
	err      error
	done     bool // a stream ended with [DONE]
	errEvent bool // a stream carried an error event
}

// chat posts one chat call. leave > 0 reads that many bytes of the answer, then goes away.
func (r *run) chat(ctx context.Context, model, prompt string, stream bool, leave int) result {
	m, _ := json.Marshal(model)
	p, _ := json.Marshal(prompt)
	body := `{"model":` + string(m) + `,"messages":[{"role":"user","content":` + string(p) + `}]`
	if stream {
		body += `,"stream":true`
	}
	body += "}"
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.eocURL+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return result{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	res := result{status: resp.StatusCode, stage: resp.Header.Get("X-EOC-Stage"), receipt: resp.Header.Get("X-EOC-Receipt"),
		retry: resp.Header.Get("Retry-After")}
	if leave > 0 {
		buf := make([]byte, leave)
		_, res.err = io.ReadAtLeast(resp.Body, buf, 1)
		cancel()
		return res
	}
	res.body, res.err = io.ReadAll(resp.Body)
	if stream {
		res.done = bytes.Contains(res.body, []byte("data: [DONE]"))
		res.errEvent = bytes.Contains(res.body, []byte(`"error"`))
	}
	return res
}

// sample is the proxy's RSS and goroutines at one moment.
type sample struct {
	rssMB      float64
	goroutines int
}

func (s sample) String() string {
	return fmt.Sprintf("RSS %.0f MB, %d goroutines", s.rssMB, s.goroutines)
}

func (r *run) sample() sample {
	var s sample
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.eoc.Cmd.Process.Pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "VmRSS:") {
				kb, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
				s.rssMB = kb / 1024
			}
		}
	}
	s.goroutines = -1
	if b, err := r.metrics(); err == nil {
		if m := regexp.MustCompile(`(?m)^go_goroutines (\d+)`).FindSubmatch(b); m != nil {
			s.goroutines, _ = strconv.Atoi(string(m[1]))
		}
	}
	return s
}

func (r *run) metrics() ([]byte, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(r.eocURL + "/metrics")
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	return io.ReadAll(resp.Body)
}

// unexpectedf counts an outcome its kind should not get, keeping the first few for the report.
func (r *run) unexpectedf(mu *sync.Mutex, format string, a ...any) {
	mu.Lock()
	defer mu.Unlock()
	r.unexpected++
	if len(r.notes) < 20 {
		r.notes = append(r.notes, fmt.Sprintf(format, a...))
	}
}

// pool runs n jobs over c workers; each job gets its index.
func pool(n, c int, job func(i int)) time.Duration {
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				job(i)
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// faqQuestions are the seeded questions (data/faq.jsonl), answered by kv.
func (r *run) faqQuestions() []string {
	b, err := os.ReadFile(filepath.Join(r.root, "data/faq.jsonl"))
	if err != nil {
		procs.Fatalf("%v", err)
	}
	var qs []string
	for _, l := range strings.Split(string(b), "\n") {
		var e struct{ Question string }
		if json.Unmarshal([]byte(l), &e) == nil && e.Question != "" {
			qs = append(qs, e.Question)
		}
	}
	return qs
}

// neuralPrompt is the i-th new prompt.
func neuralPrompt(i int) string {
	return fmt.Sprintf("neural question %d, about load %d", i, i*7919%100003)
}

// load is the mixed phase: per 20 requests, 8 from a set of 200 repeated prompts (cache hits
// after the first), 1 seeded question worded anew and 1 earlier neural prompt in capitals (kv),
// 3 new prompts (neural), 3 new streamed prompts, 1
// graph question, 1 upstream 500, 1 client that leaves a slow stream after its first bytes, 1
// call to a backend that refuses connections. With -load-rounds above 1 it runs that many
// rounds back to back, each with prompts new to it (the repeated 200 aside), so that the cache
// and kv keep learning until their bounds, and prints the proxy's memory after each.
func (r *run) load() {
	faq := r.faqQuestions()
	var mu sync.Mutex
	kinds := map[string]*atomic.Int64{}
	for _, k := range []string{"cache", "kv", "neural", "stream", "graph", "upstream 500", "client gone", "refused"} {
		kinds[k] = new(atomic.Int64)
	}
	stages := sync.Map{}
	count := func(stage string) {
		v, _ := stages.LoadOrStore(stage, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	// A warm-up fills the repeated prompts, so the start sample is of a running proxy.
	pool(200, 16, func(i int) { r.chat(context.Background(), "m", fmt.Sprintf("cache question %d", i), false, 0) })
	s0 := r.sample()
	m0 := r.memStats(0)
	var mid sample
	var midOnce sync.Once
	n := r.o.n
	rounds := max(r.o.rounds, 1)
	var took time.Duration
	mems := []roundMem{m0}
	for round := range rounds {
		off := round * n // each round's new prompts are new to it
		took += pool(n, r.o.c, func(i int) {
			if round == 0 && i == n/2 {
				midOnce.Do(func() { go func() { mid = r.sample() }() })
			}
			j := i + off
			ctx := context.Background()
			ok := func(kind string, res result, stream bool) {
				kinds[kind].Add(1)
				if res.err != nil || res.status != http.StatusOK || (stream && (!res.done || res.errEvent)) {
					r.unexpectedf(&mu, "%s %d: status %d, err %v, done %v, error event %v", kind, j, res.status, res.err, res.done, res.errEvent)
					return
				}
				count(res.stage)
			}
			failed := func(kind string, res result) {
				kinds[kind].Add(1)
				if res.err != nil || (res.status != http.StatusBadGateway && res.status != http.StatusServiceUnavailable && res.status != http.StatusGatewayTimeout) {
					r.unexpectedf(&mu, "%s %d: status %d, err %v", kind, j, res.status, res.err)
				}
			}
			switch k := i % 20; {
			case k < 8:
				ok("cache", r.chat(ctx, "m", fmt.Sprintf("cache question %d", i%200), false, 0), false)
			case k == 8: // a seeded question, worded anew each time (the cache misses, kv's seeds answer)
				ok("kv", r.chat(ctx, "m", faq[j/20%len(faq)]+strings.Repeat("!", j/20/len(faq)%200)+strings.Repeat("?", round), false, 0), false)
			case k == 9: // the neural question 19 calls back, in capitals (kv's learned answers)
				ok("kv", r.chat(ctx, "m", strings.ToUpper(neuralPrompt(j-19)), false, 0), false)
			case k < 13:
				ok("neural", r.chat(ctx, "m", neuralPrompt(j), false, 0), false)
			case k < 16:
				ok("stream", r.chat(ctx, "m", fmt.Sprintf("streamed question %d, about load %d", j, j*7919%100003), true, 0), true)
			case k == 16:
				ok("graph", r.chat(ctx, "m", "What is the capital of France?", false, 0), false)
			case k == 17:
				failed("upstream 500", r.chat(ctx, "m", fmt.Sprintf("fail500 %d", j), false, 0))
			case k == 18:
				res := r.chat(ctx, "m", fmt.Sprintf("slowstream %d", j), true, 16)
				kinds["client gone"].Add(1)
				if res.err != nil || res.status != http.StatusOK {
					r.unexpectedf(&mu, "client gone %d: status %d, err %v", j, res.status, res.err)
				}
			default:
				failed("refused", r.chat(ctx, "dead-m", fmt.Sprintf("refused %d", j), false, 0))
			}
		})
		time.Sleep(2 * time.Second) // let cancelled upstream calls and learning settle
		mems = append(mems, r.memStats(round+1))
	}
	s1 := mems[len(mems)-1].sample
	r.client.CloseIdleConnections() // each keep-alive connection holds a goroutine in the proxy
	time.Sleep(time.Second)
	s2 := r.sample()
	var ks, ss []string
	for _, k := range []string{"cache", "kv", "neural", "stream", "graph", "upstream 500", "client gone", "refused"} {
		ks = append(ks, fmt.Sprintf("%s %d", k, kinds[k].Load()))
	}
	stages.Range(func(k, v any) bool {
		ss = append(ss, fmt.Sprintf("%s %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	total := n * rounds
	r.line("load: %d requests (%d round(s) of %d) in %s (%.0f req/s) at %d connections: %s", total, rounds, n, took.Round(time.Millisecond), float64(total)/took.Seconds(), r.o.c, strings.Join(ks, ", "))
	r.line("load: answered by stage: %s", strings.Join(ss, ", "))
	r.line("load: start %s; middle of round 1 %s; end %s; the clients' idle connections closed: %s", s0, mid, s1, s2)
	r.line("load: upstream calls the proxy cancelled (clients gone): %s", r.upGet("/control/cancels"))
	r.line("load: memory after each round (RSS sampled first; then a GC forced through pprof, the live heap and the Go runtime's figures read after it):")
	r.line("| after round | RSS MB | goroutines | live heap MB | heap in use / idle / released MB | GC goal MB | cache entries | cache MB | kv entries | kv MB |")
	r.line("|---|---|---|---|---|---|---|---|---|---|")
	for _, m := range mems {
		r.line("%s", m)
	}
}

// roundMem is the proxy's RSS, goroutines, Go heap and store gauges after a load round.
type roundMem struct {
	round int
	sample
	heapLive, heapInuse, heapIdle, heapReleased, gcGoal float64 // bytes
	cacheEntries, cacheBytes, kvEntries, kvBytes        float64
}

func (m roundMem) String() string {
	mb := func(b float64) string { return fmt.Sprintf("%.1f", b/(1<<20)) }
	return fmt.Sprintf("| %d | %.0f | %d | %s | %s / %s / %s | %s | %.0f | %s | %.0f | %s |", m.round, m.rssMB, m.goroutines,
		mb(m.heapLive), mb(m.heapInuse), mb(m.heapIdle), mb(m.heapReleased), mb(m.gcGoal), m.cacheEntries, mb(m.cacheBytes), m.kvEntries, mb(m.kvBytes))
}

// memStats samples RSS and goroutines, forces a GC (a heap profile with gc=1 through the pprof
// listener; kept under -heap-dir when set), then reads the runtime's and the stores' gauges.
func (r *run) memStats(round int) roundMem {
	m := roundMem{round: round, sample: r.sample()}
	c := &http.Client{Timeout: 30 * time.Second}
	if resp, err := c.Get(r.pprofURL + "/debug/pprof/heap?gc=1"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if r.o.heapDir != "" {
			_ = os.WriteFile(filepath.Join(r.o.heapDir, fmt.Sprintf("heap-round%d.pb.gz", round)), b, 0o644)
		}
	}
	b, err := r.metrics()
	if err != nil {
		procs.Fatalf("metrics: %v", err)
	}
	get := func(name string) float64 {
		mm := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(b)
		if mm == nil {
			return -1
		}
		f, _ := strconv.ParseFloat(string(mm[1]), 64)
		return f
	}
	m.heapLive, m.heapInuse, m.heapIdle = get("go_memstats_heap_alloc_bytes"), get("go_memstats_heap_inuse_bytes"), get("go_memstats_heap_idle_bytes")
	m.heapReleased, m.gcGoal = get("go_memstats_heap_released_bytes"), get("go_memstats_next_gc_bytes")
	m.cacheEntries, m.cacheBytes = get("eoc_cache_entries"), get("eoc_cache_bytes")
	m.kvEntries, m.kvBytes = get("eoc_kv_entries"), get("eoc_kv_bytes")
	return m
}

func (r *run) upGet(path string) string {
	resp, err := http.Get(r.up + path)
	if err != nil {
		return "?"
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// invented sends n/5 calls, each naming a model no one listed.
func (r *run) invented() {
	var mu sync.Mutex
	s0 := r.sample()
	n := max(r.o.n/5, 1)
	first := max(n/10, 1)
	pool(first, r.o.c, func(i int) {
		res := r.chat(context.Background(), fmt.Sprintf("inv-%d", i), fmt.Sprintf("invented model question %d", i), false, 0)
		if res.err != nil || res.status != http.StatusOK {
			r.unexpectedf(&mu, "invented %d: status %d, err %v", i, res.status, res.err)
		}
	})
	uiFirst := r.uiDataSize()
	took := pool(n-first, r.o.c, func(i int) {
		i += first
		res := r.chat(context.Background(), fmt.Sprintf("inv-%d", i), fmt.Sprintf("invented model question %d", i), false, 0)
		if res.err != nil || res.status != http.StatusOK {
			r.unexpectedf(&mu, "invented %d: status %d, err %v", i, res.status, res.err)
		}
	})
	time.Sleep(2 * time.Second)
	s1 := r.sample()
	m, err := r.metrics()
	if err != nil {
		procs.Fatalf("metrics: %v", err)
	}
	models := map[string]bool{}
	for _, l := range strings.Split(string(m), "\n") {
		if strings.HasPrefix(l, "eoc_requests_total{") {
			if mm := regexp.MustCompile(`model="([^"]*)"`).FindStringSubmatch(l); mm != nil {
				models[mm[1]] = true
			}
		}
	}
	var names []string
	for k := range models {
		names = append(names, strconv.Quote(k))
	}
	uiAll := r.uiDataSize()
	r.line("invented: %d calls with new model names (the last %d in %s): before %s; after %s; /metrics %d KB, model labels %s; /ui/data %.1f KB after %d names, %.1f KB after %d",
		n, n-first, took.Round(time.Millisecond), s0, s1, len(m)/1024, strings.Join(names, " "), float64(uiFirst)/1024, first, float64(uiAll)/1024, n)
	if len(models) > 10 {
		r.unexpectedf(&mu, "invented: %d model label values in /metrics", len(models))
	}
	if uiAll > uiFirst+uiFirst/10 {
		r.unexpectedf(&mu, "invented: /ui/data grew from %d to %d bytes", uiFirst, uiAll)
	}
}

// uiDataSize is the size of GET /ui/data's answer (the suite runs without keys: no admin key needed).
func (r *run) uiDataSize() int {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(r.eocURL + "/ui/data")
	if err != nil {
		procs.Fatalf("/ui/data: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		procs.Fatalf("/ui/data: %d %s", resp.StatusCode, b)
	}
	return len(b)
}

// slowBodies opens r.o.slow connections that send a request body one byte every 2 s.
func (r *run) slowBodies() {
	var mu sync.Mutex
	s0 := r.sample()
	addr := strings.TrimPrefix(r.eocURL, "http://")
	var wg sync.WaitGroup
	var got408, closed408, closed, other atomic.Int64
	stop := make(chan struct{})
	for range r.o.slow {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				other.Add(1)
				return
			}
			defer func() { _ = conn.Close() }()
			_, _ = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
			go func() { // trickle
				t := time.NewTicker(2 * time.Second)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
						if _, err := conn.Write([]byte(" ")); err != nil {
							return
						}
					}
				}
			}()
			_ = conn.SetReadDeadline(time.Now().Add(50 * time.Second))
			br := bufio.NewReader(conn)
			line, err := br.ReadString('\n')
			switch {
			case strings.Contains(line, " 408 "):
				got408.Add(1)
				// The rest of the answer, then the end: the proxy closes the connection with its
				// 408 (EOF, or a reset when a trickled byte arrived after it stopped reading).
				_ = conn.SetReadDeadline(time.Now().Add(time.Second))
				if _, err := io.Copy(io.Discard, br); err == nil || errors.Is(err, syscall.ECONNRESET) {
					closed408.Add(1)
				}
			case err != nil && line == "":
				closed.Add(1)
			default:
				other.Add(1)
			}
		}()
	}
	time.Sleep(10 * time.Second)
	s1 := r.sample()
	start := time.Now()
	wg.Wait()
	close(stop)
	time.Sleep(time.Second)
	s2 := r.sample()
	r.line("slow bodies: %d clients trickling a byte every 2 s: before %s; after 10 s %s; all answered %s later: %d got 408 (%d of them closed by the proxy within 1 s), %d closed, %d other; then %s",
		r.o.slow, s0, s1, time.Since(start).Round(time.Second), got408.Load(), closed408.Load(), closed.Load(), other.Load(), s2)
	if int(got408.Load()) != r.o.slow || int(closed408.Load()) != r.o.slow {
		r.unexpectedf(&mu, "slow bodies: %d of %d got 408, %d of them closed after it", got408.Load(), r.o.slow, closed408.Load())
	}
}
