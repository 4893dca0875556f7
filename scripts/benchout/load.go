//go:build linux

package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/eoc-proxy/eoc-proxy/internal/procs"
)

const stageHeader = "X-Eoc-Stage"

func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
}

// do posts body to url, reads the whole answer and returns its status and stage header.
func do(c *http.Client, url string, body []byte) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, resp.Header.Get(stageHeader), err
}

// prompts makes user messages unlike each other and unlike eoc.yaml's seeds and facts, so that
// none is answered by the cache, kv or graph: made-up words, a dozen to a message.
type prompts struct{ r *rand.Rand }

func newPrompts(seed uint64) *prompts {
	return &prompts{r: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))}
}

var (
	consonants = []string{"b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "tr", "st", "gl"}
	vowels     = []string{"a", "e", "i", "o", "u", "ai", "ou"}
)

func (p *prompts) word() string {
	var b strings.Builder
	for range 2 + p.r.IntN(2) {
		b.WriteString(consonants[p.r.IntN(len(consonants))])
		b.WriteString(vowels[p.r.IntN(len(vowels))])
	}
	return b.String()
}

func (p *prompts) next() string {
	w := make([]string, 12)
	for i := range w {
		w[i] = p.word()
	}
	return "Please explain in two sentences how " + strings.Join(w[:6], " ") + " relates to " + strings.Join(w[6:], " ") + "."
}

// chatBody is an OpenAI chat request with the given user message (made of ASCII letters, spaces
// and punctuation, so it needs no escaping).
func chatBody(user string, stream bool) []byte {
	return []byte(`{"model":"` + upModel + `","messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"` + user + `"}],"max_tokens":64` + streamField(stream) + `}`)
}

const system = "You are a helpful assistant. Be brief."

func streamField(stream bool) string {
	if stream {
		return `,"stream":true`
	}
	return ""
}

// responsesBody is the same call in the Responses API; store false keeps nothing.
func responsesBody(user string, stream, store bool) []byte {
	st := ""
	if !store {
		st = `,"store":false`
	}
	return []byte(`{"model":"` + upModel + `","instructions":"` + system + `","input":"` + user + `","max_output_tokens":64` + st + streamField(stream) + `}`)
}

// messagesBody is the same call in Anthropic's Messages API.
func messagesBody(user string, stream bool) []byte {
	return []byte(`{"model":"` + upModel + `","system":"` + system + `","messages":[{"role":"user","content":"` + user + `"}],"max_tokens":64` + streamField(stream) + `}`)
}

// completionsBody is the user message as a legacy completions prompt (which has no system).
func completionsBody(user string, stream bool) []byte {
	return []byte(`{"model":"` + upModel + `","prompt":"` + user + `","max_tokens":64` + streamField(stream) + `}`)
}

// target is one way to the upstream.
type target struct {
	name, url string
	stage     string                   // the X-EOC-Stage every answer must carry ("" for none)
	body      func(user string) []byte // the call (nil: a whole chat call)
	fresh     bool                     // a prompt of its own each round, not the round's shared one
	stream    bool                     // a streamed call: time to first token measured too
}

func (t *target) bodyFor(user string) []byte {
	if t.body == nil {
		return chatBody(user, false)
	}
	return t.body(user)
}

// timing is what one sequential measure found for its targets, warm-up excluded: each call's
// time to its whole answer and, for streams, to its first token.
type timing struct {
	total, first [][]time.Duration
}

// order is how sequential orders each round's calls.
type order int

const (
	// rotate starts each round one target further on: the order stays cyclic, so each target
	// follows the same one (the neural phase's order, kept as its figures have always been taken).
	rotate order = iota
	// shuffle orders each round at random. Where several targets are the same process (eoc-proxy's
	// routes), a call right after another to that process finds it busier or warmer than one after
	// a call elsewhere; shuffled, no route always follows the same one.
	shuffle
)

// sequential measures one call at a time over the targets, each round in the given order, with a
// fresh prompt each round, shared by the targets that are not fresh.
func sequential(c *http.Client, ts []target, warmup, rounds int, p *prompts, o order) timing {
	tm := timing{total: make([][]time.Duration, len(ts)), first: make([][]time.Duration, len(ts))}
	for i := range ts {
		tm.total[i] = make([]time.Duration, 0, rounds)
		if ts[i].stream {
			tm.first[i] = make([]time.Duration, 0, rounds)
		}
	}
	perm := make([]int, len(ts))
	for r := range warmup + rounds {
		shared := p.next()
		for k := range perm {
			perm[k] = (r + k) % len(ts)
		}
		if o == shuffle {
			p.r.Shuffle(len(perm), func(a, b int) { perm[a], perm[b] = perm[b], perm[a] })
		}
		for _, i := range perm {
			t := &ts[i]
			user := shared
			if t.fresh {
				user = p.next()
			}
			body := t.bodyFor(user)
			var status int
			var stage string
			var first, total time.Duration
			var err error
			if t.stream {
				status, stage, first, total, err = doStream(c, t.url, body)
			} else {
				start := time.Now()
				status, stage, err = do(c, t.url, body)
				total = time.Since(start)
			}
			if err != nil {
				procs.Fatalf("sequential %s round %d: %v", t.name, r, err)
			}
			if status != http.StatusOK || stage != t.stage {
				procs.Fatalf("sequential %s round %d: status %d, stage %q (want 200, stage %q)", t.name, r, status, stage, t.stage)
			}
			if r >= warmup {
				tm.total[i] = append(tm.total[i], total)
				if t.stream {
					tm.first[i] = append(tm.first[i], first)
				}
			}
		}
	}
	return tm
}

// doStream posts a streamed call and reads it to its end: the times from the send to the first
// line that carries streamToken and to the end of the body. Fewer lines with the token than
// the upstream sent chunks (a stream that was not passed on chunk by chunk) is an error.
func doStream(c *http.Client, url string, body []byte) (status int, stage string, first, total time.Duration, err error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", 0, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	status, stage = resp.StatusCode, resp.Header.Get(stageHeader)
	if status != http.StatusOK {
		_, err = io.Copy(io.Discard, resp.Body)
		return status, stage, 0, time.Since(start), err
	}
	br := bufio.NewReader(resp.Body)
	tokens := 0
	token := []byte(streamToken)
	for {
		line, rerr := br.ReadSlice('\n')
		if bytes.HasPrefix(line, []byte("data:")) && bytes.Contains(line, token) {
			if tokens == 0 {
				first = time.Since(start)
			}
			tokens++
		}
		if errors.Is(rerr, bufio.ErrBufferFull) {
			// A long line (a whole answer in a closing event) is read on; its start was looked at.
			for errors.Is(rerr, bufio.ErrBufferFull) {
				_, rerr = br.ReadSlice('\n')
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return status, stage, 0, 0, rerr
		}
	}
	total = time.Since(start)
	if tokens < streamChunks {
		return status, stage, 0, 0, fmt.Errorf("%d events with a token, want at least %d (one per upstream chunk)", tokens, streamChunks)
	}
	return status, stage, first, total, nil
}

// slice is what one throughput slice did: requests, wall time, and the server's CPU time.
type slice struct {
	n    int64
	wall time.Duration
	cpu  time.Duration
}

// throughput runs workers clients back to back against t (served by process pid) for d.
func throughput(c *http.Client, t target, pid int, body []byte, workers int, d time.Duration) slice {
	var n atomic.Int64
	var wg sync.WaitGroup
	cpu0 := procCPU(pid)
	start := time.Now()
	deadline := start.Add(d)
	for range workers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				status, stage, err := do(c, t.url, body)
				if err != nil {
					procs.Fatalf("throughput %s: %v", t.name, err)
				}
				if status != http.StatusOK || stage != t.stage {
					procs.Fatalf("throughput %s: status %d, stage %q (want 200, stage %q)", t.name, status, stage, t.stage)
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return slice{n: n.Load(), wall: time.Since(start), cpu: procCPU(pid) - cpu0}
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every Linux port Go runs on.
const clockTicks = 100

// procCPU is the user plus system CPU time process pid has used (10 ms resolution).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		procs.Fatalf("cpu time of %d: %v", pid, err)
	}
	// The command name, field 2, is in parentheses and may hold spaces: count from after it.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		procs.Fatalf("cpu time of %d: unexpected /proc/%d/stat", pid, pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		procs.Fatalf("cpu time of %d: unexpected /proc/%d/stat", pid, pid)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// soak sends n requests from workers clients: prompts from a pool of 2000 (neural the first time,
// cache hits after), one in four streamed, one in ten a malformed body. A request whose
// connection closed under it (EOF or a reset: a POST is never retried by the transport) is sent
// once more on a fresh connection and counted; the count is in the table, so it is seen, not
// hidden. It returns that count.
func soak(c *http.Client, url string, workers, from, to int, pool [][]byte) int64 {
	var retried atomic.Int64
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= to {
					return
				}
				body, want := pool[i%len(pool)], http.StatusOK
				if i%10 == 9 {
					body, want = []byte(`{"model":`), http.StatusBadRequest
				}
				status, _, err := do(c, url, body)
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
					retried.Add(1)
					c.CloseIdleConnections()
					status, _, err = do(c, url, body)
				}
				if err != nil {
					procs.Fatalf("soak request %d: %v", i, err)
				}
				if status != want {
					procs.Fatalf("soak request %d: status %d, want %d", i, status, want)
				}
			}
		})
	}
	wg.Wait()
	return retried.Load()
}

// usage is what the eoc-proxy process holds at one point.
type usage struct {
	rssKiB     int64
	heapKiB    int64 // go_memstats_next_gc_bytes: the heap goal, the live heap at the last GC plus its headroom (GOGC)
	goroutines int64
	mallocs    float64 // go_memstats_mallocs_total: heap objects allocated so far
	allocBytes float64 // go_memstats_alloc_bytes_total: heap bytes allocated so far
}

func sample(c *http.Client, pid int, base string) usage {
	var u usage
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				u.rssKiB, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			}
		}
	}
	// A connection of its own, closed after, so that samples do not count each other's.
	req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	if err != nil {
		procs.Fatalf("metrics: %v", err)
	}
	req.Close = true
	resp, err := c.Do(req)
	if err != nil {
		procs.Fatalf("metrics: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_goroutines":
			u.goroutines = int64(f)
		case "go_memstats_next_gc_bytes":
			u.heapKiB = int64(f) / 1024
		case "go_memstats_mallocs_total":
			u.mallocs = f
		case "go_memstats_alloc_bytes_total":
			u.allocBytes = f
		}
	}
	return u
}

// quantile is the q-quantile of sorted durations (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func sortedCopy(d []time.Duration) []time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}
