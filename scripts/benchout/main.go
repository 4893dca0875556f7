//go:build linux

// Command benchout measures eoc-proxy from outside, the way users run it (issues 12 and 29).
//
// It builds eoc-proxy and starts, each as its own process on loopback: a fake upstream speaking
// Ollama's API and the OpenAI-compatible one with fixed bytes (whole, or 32 chunks flushed one by
// one, a pause of 1 ms after the first), eoc-proxy with the shipped eoc.yaml (only the listen address and the backend URL
// changed), a bare httputil.ReverseProxy in front of the upstream (yardstick 1: one hop) and a
// bare handler replaying eoc-proxy's cache-hit bytes and headers (yardstick 2), the least a
// proxy that translates to Ollama's API and writes eoc-proxy's headers does (floorHandler, the
// translator floor), and the least an exact-match cache does for a hit (hitFloorHandler, the hit
// floors: one keying the decoded request, one the body's bytes). The client is this process. Per
// run it measures
//
//   - neural: sequential latency with a fresh prompt per round (so every eoc-proxy answer is
//     neural), round-robin over direct, reverse proxy, translator floor and eoc-proxy: the median
//     and p99 of the time each adds over direct (quantile of the path minus the same quantile of
//     direct), and the server CPU per call;
//   - dialects: the same with a fresh prompt per call and each round's order shuffled, over
//     direct, the hop, eoc-proxy's chat and its Responses (store false, and kept), Messages and
//     legacy completions routes, each of which reaches the upstream as the same Ollama call;
//   - stream: the same, streamed, over direct, the hop, the floor and eoc-proxy (chat and the
//     dialects): the time to the first token and to the end of the stream;
//   - cache: cache-hit throughput with concurrent keep-alive clients, eoc-proxy against the bare
//     handler and the two hit floors, in turn in slices;
//   - soak: eoc-proxy's RSS, heap goal and goroutines after a warm-up, halfway and at the end.
//
// and prints one table of the medians over the runs with issue 29's targets, and a PASS or FAIL
// line per target. Every eoc-proxy answer is checked for the stage it should come from; any other
// fails the run. A dialect route the build answers with 404 is left out.
//
// Usage: go run ./scripts/benchout [flags]   (from the module root; see scripts/bench.sh)
//
// The same binary is also the servers: benchout upstream | rproxy URL | floor URL | bare FILE |
// hitfloor FILE | hitfloor-bytes FILE.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/eoc-proxy/eoc-proxy/internal/procs"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "upstream":
			os.Exit(procs.ServeChild(upstreamHandler()))
		case "rproxy", "floor", "bare", "hitfloor", "hitfloor-bytes":
			if len(os.Args) != 3 {
				fmt.Fprintln(os.Stderr, "usage: benchout rproxy URL | floor URL | bare FILE | hitfloor FILE | hitfloor-bytes FILE")
				os.Exit(2)
			}
			build := map[string]func(string) (http.Handler, error){
				"rproxy": reverseProxyHandler, "floor": floorHandler, "bare": bareHandler,
				"hitfloor":       func(p string) (http.Handler, error) { return hitFloorHandler(p, true) },
				"hitfloor-bytes": func(p string) (http.Handler, error) { return hitFloorHandler(p, false) },
			}[os.Args[1]]
			h, err := build(os.Args[2])
			if err != nil {
				fmt.Fprintln(os.Stderr, "benchout:", err)
				os.Exit(1)
			}
			os.Exit(procs.ServeChild(h))
		}
	}
	os.Exit(run(os.Args[1:], os.Stdout))
}

type options struct {
	root, config, eocBin string
	runs                 int
	warmup, rounds       int
	streamRounds         int
	cpus                 int // the host's, for the targets (0: runtime.NumCPU)
	clients              int
	slice                time.Duration
	slices               int
	soakN                int
	phases               map[string]bool
	keep                 bool
	pprof                string
}

func run(args []string, stdout io.Writer) int {
	fs := flag.NewFlagSet("benchout", flag.ContinueOnError)
	var o options
	fs.StringVar(&o.root, "root", ".", "the eoc-proxy module root, where ./cmd/eoc-proxy is built")
	fs.StringVar(&o.config, "config", "eoc.yaml", "the config to run eoc-proxy with (only listen and the backend URL are changed)")
	fs.StringVar(&o.eocBin, "eoc-bin", "", "a prebuilt eoc-proxy binary to measure instead of building one")
	fs.IntVar(&o.runs, "runs", 3, "independent runs (fresh processes each); the table shows their medians")
	fs.IntVar(&o.warmup, "warmup", 200, "sequential rounds not counted, per run")
	fs.IntVar(&o.rounds, "rounds", 2000, "sequential rounds counted (one call per path each), per run")
	fs.IntVar(&o.streamRounds, "stream-rounds", 2000, "sequential rounds counted in the stream phase, per run")
	fs.IntVar(&o.clients, "clients", 16, "concurrent clients for the cache-hit throughput and the soak")
	fs.DurationVar(&o.slice, "slice", 2*time.Second, "length of one throughput slice (bare and eoc-proxy alternate)")
	fs.IntVar(&o.slices, "slices", 3, "throughput slices per path, per run")
	fs.IntVar(&o.soakN, "soak", 100000, "requests in the soak, per run")
	phases := fs.String("phases", "neural,dialects,stream,cache,soak", "which measurements to run")
	fs.StringVar(&o.pprof, "pprof", "", "host:port: run eoc-proxy with debug.pprof there, to profile it under this load (go tool pprof http://ADDR/debug/pprof/profile)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (configs, eoc-proxy's log)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	o.phases = map[string]bool{}
	for p := range strings.SplitSeq(*phases, ",") {
		switch p {
		case "neural", "dialects", "stream", "cache", "soak":
			o.phases[p] = true
		default:
			fmt.Fprintf(os.Stderr, "benchout: unknown phase %q\n", p)
			return 2
		}
	}
	procs.Init("benchout")

	cfgPath := o.config
	if !filepath.IsAbs(cfgPath) {
		cfgPath = filepath.Join(o.root, cfgPath)
	}
	src, err := os.ReadFile(cfgPath)
	if err != nil {
		procs.Fatalf("%v", err)
	}
	tmp, err := os.MkdirTemp("", "eoc-benchout-")
	if err != nil {
		procs.Fatalf("%v", err)
	}
	if !o.keep {
		procs.RemoveOnExit(tmp)
		defer func() { _ = os.RemoveAll(tmp) }()
	} else {
		fmt.Fprintln(os.Stderr, "benchout: keeping", tmp)
	}
	if o.eocBin == "" {
		fmt.Fprintln(os.Stderr, "benchout: building eoc-proxy")
		if o.eocBin, err = procs.BuildEOC(context.Background(), o.root, tmp); err != nil {
			procs.Fatalf("%v", err)
		}
	}

	var results []result
	var stages []string
	start := time.Now()
	for i := range o.runs {
		dir := filepath.Join(tmp, fmt.Sprint("run", i+1))
		if err := os.Mkdir(dir, 0o755); err != nil {
			procs.Fatalf("%v", err)
		}
		r, st := oneRun(&o, src, dir, uint64(time.Now().UnixNano()))
		procs.StopAll(false)
		stages = st
		fmt.Fprintf(os.Stderr, "benchout: run %d/%d: %s\n", i+1, o.runs, r.line())
		results = append(results, r)
	}
	if err := printTable(stdout, &o, stages, results, time.Since(start)); err != nil {
		fmt.Fprintln(os.Stderr, "benchout:", err)
		return 1
	}
	return 0
}

// result is one run's figures.
type result struct {
	direct, rp, eoc  [2]time.Duration // p50, p99
	floor            [2]time.Duration // the translator floor's p50, p99
	rpCPU, eocCPU    time.Duration    // server CPU per neural call: reverse proxy, eoc-proxy
	bareRPS, eocRPS  float64
	bareCPU, hitCPU  time.Duration // server CPU per cache hit: bare handler, eoc-proxy
	floorRPS         float64       // the hit floor's cache hits per second (decoding)
	floorHitCPU      time.Duration // the hit floor's server CPU per hit (decoding)
	bytesRPS         float64       // the bytes hit floor's cache hits per second
	bytesHitCPU      time.Duration // the bytes hit floor's server CPU per hit
	soak             [3]usage      // after warm-up, halfway, end
	soakRetried      int64         // soak requests sent again after their connection closed under them
	neural, hit, sok bool          // which phases ran

	// eoc-proxy's heap allocations per neural call and per cache hit: objects and bytes.
	neuralAllocs, neuralBytes, hitAllocs, hitBytes float64

	// The dialects phase: p50 and p99 of each target's time to the whole answer, by name
	// (direct, hop, chat and dialectPaths' names; a dialect the build does not serve is absent).
	dial map[string][2]time.Duration
	// The stream phase: p50 and p99 of each target's time to the first token and to the end of
	// the stream, by name (direct, hop, floor, chat and dialectPaths' streamed names).
	first, last map[string][2]time.Duration
}

func (r result) line() string {
	var parts []string
	if r.neural {
		parts = append(parts, fmt.Sprintf("direct p50 %s p99 %s; hop adds %s/%s; floor adds %s/%s; eoc-proxy adds %s/%s; CPU per call hop %s, eoc-proxy %s; allocations per neural call %.0f, %.0f B",
			us(r.direct[0]), us(r.direct[1]), us(r.rp[0]-r.direct[0]), us(r.rp[1]-r.direct[1]),
			us(r.floor[0]-r.direct[0]), us(r.floor[1]-r.direct[1]),
			us(r.eoc[0]-r.direct[0]), us(r.eoc[1]-r.direct[1]), us(r.rpCPU), us(r.eocCPU), r.neuralAllocs, r.neuralBytes))
	}
	if r.dial != nil {
		d := r.dial["direct"][0]
		var ps []string
		for _, n := range append([]string{"hop", "chat"}, dialectNames(false)...) {
			if v, ok := r.dial[n]; ok {
				ps = append(ps, fmt.Sprintf("%s %s", n, us(v[0]-d)))
			}
		}
		parts = append(parts, "dialects add "+strings.Join(ps, ", "))
	}
	if r.first != nil {
		d1, d2 := r.first["direct"][0], r.last["direct"][0]
		var ps []string
		for _, n := range append([]string{"hop", "floor", "chat"}, dialectNames(true)...) {
			if v, ok := r.first[n]; ok {
				ps = append(ps, fmt.Sprintf("%s %s/%s", n, us(v[0]-d1), us(r.last[n][0]-d2)))
			}
		}
		parts = append(parts, fmt.Sprintf("stream (direct first token %s, last chunk %s) adds first/last: %s", us(d1), us(d2), strings.Join(ps, ", ")))
	}
	if r.hit {
		parts = append(parts, fmt.Sprintf("cache hits %.0f req/s vs bare %.0f req/s; CPU per call bare %s, eoc-proxy %s; allocations per hit %.0f, %.0f B; decoding hit floor %.0f req/s, CPU per call %s; bytes hit floor %.0f req/s, CPU per call %s",
			r.eocRPS, r.bareRPS, us(r.bareCPU), us(r.hitCPU), r.hitAllocs, r.hitBytes, r.floorRPS, us(r.floorHitCPU), r.bytesRPS, us(r.bytesHitCPU)))
	}
	if r.sok {
		parts = append(parts, fmt.Sprintf("soak goroutines %d/%d/%d, RSS %d/%d/%d KiB, %d requests sent again after their connection closed",
			r.soak[0].goroutines, r.soak[1].goroutines, r.soak[2].goroutines, r.soak[0].rssKiB, r.soak[1].rssKiB, r.soak[2].rssKiB, r.soakRetried))
	}
	return strings.Join(parts, "; ")
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }

// oneRun starts the servers, measures, and leaves the servers for stopAll.
func oneRun(o *options, src []byte, dir string, seed uint64) (result, []string) {
	var res result
	_, upURL, err := procs.StartSelf("upstream")
	if err != nil {
		procs.Fatalf("%v", err)
	}
	rp, rpURL, err := procs.StartSelf("rproxy", upURL)
	if err != nil {
		procs.Fatalf("%v", err)
	}
	listen, err := procs.FreePort()
	if err != nil {
		procs.Fatalf("%v", err)
	}
	cfg, stages, err := shippedConfig(src, listen, upURL)
	if err != nil {
		procs.Fatalf("%s: %v", o.config, err)
	}
	if o.pprof != "" { // the shipped config has no debug section to collide with
		cfg = fmt.Appendf(cfg, "debug: {pprof: %q}\n", o.pprof)
	}
	cfgPath := filepath.Join(dir, "eoc.yaml")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		procs.Fatalf("%v", err)
	}
	logPath := filepath.Join(dir, "eoc-proxy.log")
	logf, err := os.Create(logPath)
	if err != nil {
		procs.Fatalf("%v", err)
	}
	defer func() { _ = logf.Close() }() // the child holds its own descriptor
	cmd := exec.Command(o.eocBin, "serve", "-config", cfgPath)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	eoc, err := procs.Start("eoc-proxy", cmd)
	if err != nil {
		procs.Fatalf("%v", err)
	}
	eoc.Log = logPath
	eocURL := "http://" + listen
	if err := procs.WaitReady(eoc, eocURL+"/readyz"); err != nil {
		procs.Fatalf("%v", err)
	}
	fmt.Fprintf(os.Stderr, "benchout: eoc-proxy pid %d at %s, stages %s\n", cmd.Process.Pid, eocURL, stagesString(stages))

	c := newClient()
	defer c.CloseIdleConnections()
	p := newPrompts(seed)
	path := "/v1/chat/completions"

	if o.phases["neural"] {
		_, floorURL, err := procs.StartSelf("floor", upURL)
		if err != nil {
			procs.Fatalf("%v", err)
		}
		ts := []target{
			{name: "direct", url: upURL + path},
			{name: "reverse proxy", url: rpURL + path},
			{name: "translator floor", url: floorURL + path, stage: "neural"},
			{name: "eoc-proxy", url: eocURL + path, stage: "neural"},
		}
		rp0, eoc0 := procCPU(rp.Cmd.Process.Pid), procCPU(cmd.Process.Pid)
		m0 := sample(c, cmd.Process.Pid, eocURL)
		lat := sequential(c, ts, o.warmup, o.rounds, p, rotate).total
		time.Sleep(200 * time.Millisecond) // kv's learn queue catches up
		calls := time.Duration(o.warmup + o.rounds)
		res.rpCPU = (procCPU(rp.Cmd.Process.Pid) - rp0) / calls
		res.eocCPU = (procCPU(cmd.Process.Pid) - eoc0) / calls
		m1 := sample(c, cmd.Process.Pid, eocURL)
		res.neuralAllocs, res.neuralBytes = (m1.mallocs-m0.mallocs)/float64(calls), (m1.allocBytes-m0.allocBytes)/float64(calls)
		for i, dst := range []*[2]time.Duration{&res.direct, &res.rp, &res.floor, &res.eoc} {
			s := sortedCopy(lat[i])
			*dst = [2]time.Duration{quantile(s, 0.5), quantile(s, 0.99)}
		}
		res.neural = true
	}

	if o.phases["dialects"] {
		ts := []target{
			{name: "direct", url: upURL + path, fresh: true},
			{name: "hop", url: rpURL + path, fresh: true},
			{name: "chat", url: eocURL + path, stage: "neural", fresh: true},
		}
		ts = append(ts, dialectTargets(c, eocURL, p, false)...)
		res.dial = quantiles(ts, sequential(c, ts, o.warmup, o.rounds, p, shuffle).total)
	}

	if o.phases["stream"] {
		_, floorURL, err := procs.StartSelf("floor", upURL)
		if err != nil {
			procs.Fatalf("%v", err)
		}
		chat := func(u string) []byte { return chatBody(u, true) }
		ts := []target{
			{name: "direct", url: upURL + path, body: chat, fresh: true, stream: true},
			{name: "hop", url: rpURL + path, body: chat, fresh: true, stream: true},
			{name: "floor", url: floorURL + path, body: chat, stage: "neural", fresh: true, stream: true},
			{name: "chat", url: eocURL + path, body: chat, stage: "neural", fresh: true, stream: true},
		}
		ts = append(ts, dialectTargets(c, eocURL, p, true)...)
		tm := sequential(c, ts, o.warmup, o.streamRounds, p, shuffle)
		res.first, res.last = quantiles(ts, tm.first), quantiles(ts, tm.total)
	}

	if o.phases["cache"] {
		m0 := sample(c, cmd.Process.Pid, eocURL)
		body := chatBody(p.next(), false)
		if status, stage, err := do(c, eocURL+path, body); err != nil || status != 200 || stage != "neural" {
			procs.Fatalf("priming the cache: status %d, stage %q, err %v (want 200 from neural)", status, stage, err)
		}
		hit := captureHit(eocURL+path, body)
		hitFile := filepath.Join(dir, "hit.json")
		if err := os.WriteFile(hitFile, hit, 0o644); err != nil {
			procs.Fatalf("%v", err)
		}
		bp, bareURL, err := procs.StartSelf("bare", hitFile)
		if err != nil {
			procs.Fatalf("%v", err)
		}
		fp, floorURL, err := procs.StartSelf("hitfloor", hitFile)
		if err != nil {
			procs.Fatalf("%v", err)
		}
		bfp, bytesURL, err := procs.StartSelf("hitfloor-bytes", hitFile)
		if err != nil {
			procs.Fatalf("%v", err)
		}
		// Each slice measures the four in turn, the order rotated from one slice to the next.
		ts := []struct {
			t   target
			pid int
			sum slice
		}{
			{target{name: "bare handler", url: bareURL + path, stage: "cache"}, bp.Cmd.Process.Pid, slice{}},
			{target{name: "decoding hit floor", url: floorURL + path, stage: "cache"}, fp.Cmd.Process.Pid, slice{}},
			{target{name: "eoc-proxy", url: eocURL + path, stage: "cache"}, cmd.Process.Pid, slice{}},
			{target{name: "bytes hit floor", url: bytesURL + path, stage: "cache"}, bfp.Cmd.Process.Pid, slice{}},
		}
		for i := range o.slices {
			for j := range ts {
				x := &ts[(i+j)%len(ts)]
				s := throughput(c, x.t, x.pid, body, o.clients, o.slice)
				x.sum.n, x.sum.wall, x.sum.cpu = x.sum.n+s.n, x.sum.wall+s.wall, x.sum.cpu+s.cpu
			}
		}
		rate := func(s slice) (float64, time.Duration) {
			return float64(s.n) / s.wall.Seconds(), s.cpu / time.Duration(s.n)
		}
		res.bareRPS, res.bareCPU = rate(ts[0].sum)
		res.floorRPS, res.floorHitCPU = rate(ts[1].sum)
		res.eocRPS, res.hitCPU = rate(ts[2].sum)
		res.bytesRPS, res.bytesHitCPU = rate(ts[3].sum)
		es := ts[2].sum
		// The priming call and captureHit's are in the count too: a neural call among thousands of hits.
		m1 := sample(c, cmd.Process.Pid, eocURL)
		n := float64(es.n + 2)
		res.hitAllocs, res.hitBytes = (m1.mallocs-m0.mallocs)/n, (m1.allocBytes-m0.allocBytes)/n
		res.hit = true
	}

	if o.phases["soak"] {
		pool := make([][]byte, 2000)
		for i := range pool {
			pool[i] = chatBody(p.next(), i%4 == 3)
		}
		warm := o.soakN / 20
		mid := warm + (o.soakN-warm)/2
		pid := cmd.Process.Pid
		res.soakRetried += soak(c, eocURL+path, o.clients, 0, warm, pool)
		res.soak[0] = settleSample(pid, eocURL)
		res.soakRetried += soak(c, eocURL+path, o.clients, warm, mid, pool)
		res.soak[1] = settleSample(pid, eocURL)
		res.soakRetried += soak(c, eocURL+path, o.clients, mid, o.soakN, pool)
		res.soak[2] = settleSample(pid, eocURL)
		res.sok = true
	}
	if eoc.Exited() {
		procs.Fatalf("eoc-proxy exited during the run%s", eoc.LogTail())
	}
	return res, stages
}

// settleSample waits a moment for in-flight work (the kv learn queue, closed streams) to finish,
// then samples the process.
func settleSample(pid int, base string) usage {
	time.Sleep(500 * time.Millisecond)
	return sample(http.DefaultClient, pid, base)
}

// captureHit asks again for body, which must now be a cache hit, and returns its headers and
// bytes for the bare handler.
func captureHit(url string, body []byte) []byte {
	hc := newClient()
	defer hc.CloseIdleConnections()
	resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		procs.Fatalf("cache hit: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		procs.Fatalf("cache hit: %v", err)
	}
	if resp.StatusCode != 200 || resp.Header.Get(stageHeader) != "cache" {
		procs.Fatalf("second call of the same prompt: status %d, stage %q (want 200 from cache)", resp.StatusCode, resp.Header.Get(stageHeader))
	}
	out, err := json.Marshal(cachedResponse{Header: resp.Header, Body: b})
	if err != nil {
		procs.Fatalf("%v", err)
	}
	return out
}

// medianOf is the median of f over the results.
func medianOf(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// ratioCell is the median ratio of f over the results and, with more than one run, the range
// of the runs' ratios, so a median at a target can be told from one clear of it.
func ratioCell(rs []result, f func(result) float64) (string, float64) {
	m := medianOf(rs, f)
	if len(rs) < 2 {
		return fmt.Sprintf("%.2f×", m), m
	}
	lo, hi := f(rs[0]), f(rs[0])
	for _, r := range rs[1:] {
		lo, hi = min(lo, f(r)), max(hi, f(r))
	}
	return fmt.Sprintf("%.2f× (runs %.2f–%.2f)", m, lo, hi), m
}

func mark(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// goals are issue 29's targets, which depend on the host: the 2-core machine's, or a 16-core
// host's.
type goals struct {
	beyondFloor time.Duration // eoc-proxy's neural time added (and a stream's first token) beyond the floor's
	cacheRatio  float64       // cache-hit throughput vs the bare handler
}

func goalsFor(cpus int) goals {
	if cpus >= 16 {
		return goals{beyondFloor: 60 * time.Microsecond, cacheRatio: 0.95}
	}
	return goals{beyondFloor: 100 * time.Microsecond, cacheRatio: 0.8}
}

// diffCell is the median of f (µs) over the results and, with more than one run, the runs' range.
func diffCell(rs []result, f func(result) float64) (string, float64) {
	m := medianOf(rs, f)
	if len(rs) < 2 {
		return fmt.Sprintf("%+.0f µs", m), m
	}
	lo, hi := f(rs[0]), f(rs[0])
	for _, r := range rs[1:] {
		lo, hi = min(lo, f(r)), max(hi, f(r))
	}
	return fmt.Sprintf("%+.0f µs (runs %+.0f–%+.0f)", m, lo, hi), m
}

// everyRun says whether every run measured name in the map m picks.
func everyRun(rs []result, m func(result) map[string][2]time.Duration, name string) bool {
	for _, r := range rs {
		if _, ok := m(r)[name]; !ok {
			return false
		}
	}
	return true
}

func printTable(w io.Writer, o *options, stages []string, rs []result, took time.Duration) error {
	var b strings.Builder
	line := func(format string, a ...any) { _, _ = fmt.Fprintf(&b, format, a...) }
	µs := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	cpus := o.cpus
	if cpus == 0 {
		cpus = runtime.NumCPU()
	}
	g := goalsFor(cpus)
	limit := µs(g.beyondFloor)
	// verdicts are the PASS and FAIL lines under the table, one per target.
	var verdicts []string
	met := func(what, value, target string, ok bool) string {
		v := "PASS"
		if !ok {
			v = "FAIL"
		}
		verdicts = append(verdicts, fmt.Sprintf("%s %s: %s (target %s)\n", v, what, value, target))
		return mark(ok)
	}
	line("\neoc-proxy measured from outside: eoc.yaml stages %s, every server its own process on loopback; medians of %d runs (%s, %d CPUs, %s)\n\n",
		stagesString(stages), len(rs), time.Now().UTC().Format("2006-01-02"), cpus, took.Round(time.Second))
	line("| measure | yardstick | eoc-proxy | ratio | target | met |\n")
	line("|---|---|---|---|---|---|\n")
	if rs[0].neural {
		d50 := medianOf(rs, func(r result) float64 { return µs(r.direct[0]) })
		d99 := medianOf(rs, func(r result) float64 { return µs(r.direct[1]) })
		h50 := medianOf(rs, func(r result) float64 { return µs(r.rp[0] - r.direct[0]) })
		h99 := medianOf(rs, func(r result) float64 { return µs(r.rp[1] - r.direct[1]) })
		e50 := medianOf(rs, func(r result) float64 { return µs(r.eoc[0] - r.direct[0]) })
		e99 := medianOf(rs, func(r result) float64 { return µs(r.eoc[1] - r.direct[1]) })
		f50 := medianOf(rs, func(r result) float64 { return µs(r.floor[0] - r.direct[0]) })
		c50, _ := ratioCell(rs, func(r result) float64 { return float64(r.eoc[0]-r.direct[0]) / float64(r.rp[0]-r.direct[0]) })
		c99, r99 := ratioCell(rs, func(r result) float64 { return float64(r.eoc[1]-r.direct[1]) / float64(r.rp[1]-r.direct[1]) })
		line("| neural call, time added, median (direct: %.0f µs) | %.0f µs (one ReverseProxy hop) | %.0f µs | %s | (for reading) | |\n", d50, h50, e50, c50)
		cb, beyond := diffCell(rs, func(r result) float64 { return µs(r.eoc[0] - r.floor[0]) })
		line("| neural call, time added beyond the translator floor's, median | %.0f µs (the floor adds) | %.0f µs | %s | ≤ floor + %.0f µs | %s |\n",
			f50, e50, cb, limit, met("neural time added beyond the floor", cb, fmt.Sprintf("≤ +%.0f µs", limit), beyond <= limit))
		line("| neural call, time added, p99 (direct: %.0f µs) | %.0f µs | %.0f µs | %s | ≤ 2× | %s |\n", d99, h99, e99, c99, met("neural p99 vs the hop", c99, "≤ 2×", r99 <= 2))
		hc := medianOf(rs, func(r result) float64 { return µs(r.rpCPU) })
		ec := medianOf(rs, func(r result) float64 { return µs(r.eocCPU) })
		cc, rc := ratioCell(rs, func(r result) float64 { return float64(r.eocCPU) / float64(r.rpCPU) })
		line("| neural call, server CPU per call | %.0f µs | %.0f µs | %s | ≤ 2× | %s |\n", hc, ec, cc, met("neural CPU per call vs the hop", cc, "≤ 2×", rc <= 2))
		na := medianOf(rs, func(r result) float64 { return r.neuralAllocs })
		nb := medianOf(rs, func(r result) float64 { return r.neuralBytes })
		line("| neural call, eoc-proxy's heap allocations per call | | %.0f objects, %.1f KiB | | (for reading) | |\n", na, nb/1024)
		cf, _ := ratioCell(rs, func(r result) float64 { return float64(r.floor[0]-r.direct[0]) / float64(r.rp[0]-r.direct[0]) })
		line("| translator floor (OpenAI in, Ollama's API out and back, eoc-proxy's headers; nothing else), time added, median | %.0f µs | %.0f µs | %s | (for reading) | |\n", h50, f50, cf)
	}
	if rs[0].dial != nil {
		dial := func(r result) map[string][2]time.Duration { return r.dial }
		added := func(r result, n string) float64 { return µs(r.dial[n][0] - r.dial["direct"][0]) }
		h := medianOf(rs, func(r result) float64 { return added(r, "hop") })
		c := medianOf(rs, func(r result) float64 { return added(r, "chat") })
		cc, _ := ratioCell(rs, func(r result) float64 { return added(r, "chat") / added(r, "hop") })
		line("| dialects, fresh prompts, shuffled rounds: chat, time added, median | %.0f µs (hop) | %.0f µs | %s | (for reading) | |\n", h, c, cc)
		for _, d := range dialectPaths {
			if !d.whole || !everyRun(rs, dial, d.name) {
				continue
			}
			e := medianOf(rs, func(r result) float64 { return added(r, d.name) })
			e99 := medianOf(rs, func(r result) float64 { return µs(r.dial[d.name][1] - r.dial["direct"][1]) })
			cell, ratio := ratioCell(rs, func(r result) float64 { return added(r, d.name) / added(r, "chat") })
			verdict := "(for reading) | "
			if d.name == "responses" {
				verdict = "≤ 1.10× chat | " + met("Responses time added vs chat's", cell, "≤ 1.10×", ratio <= 1.10) + " "
			}
			line("| %s (%s), time added, median (p99 %.0f µs) | %.0f µs (chat, same rounds) | %.0f µs | %s | %s|\n", d.label, d.path, e99, c, e, cell, verdict)
		}
	}
	if rs[0].first != nil {
		first := func(r result) map[string][2]time.Duration { return r.first }
		fa := func(r result, n string) float64 { return µs(r.first[n][0] - r.first["direct"][0]) }
		la := func(r result, n string) float64 { return µs(r.last[n][0] - r.last["direct"][0]) }
		f99 := func(r result, n string) float64 { return µs(r.first[n][1] - r.first["direct"][1]) }
		d1 := medianOf(rs, func(r result) float64 { return µs(r.first["direct"][0]) })
		d2 := medianOf(rs, func(r result) float64 { return µs(r.last["direct"][0]) })
		med := func(f func(result, string) float64, n string) float64 {
			return medianOf(rs, func(r result) float64 { return f(r, n) })
		}
		title := fmt.Sprintf("stream of %d chunks", streamChunks)
		c1, _ := ratioCell(rs, func(r result) float64 { return fa(r, "chat") / fa(r, "hop") })
		line("| %s, first token, time added, median (direct: %.0f µs) | %.0f µs (hop) | %.0f µs | %s | (for reading) | |\n", title, d1, med(fa, "hop"), med(fa, "chat"), c1)
		cb, beyond := diffCell(rs, func(r result) float64 { return fa(r, "chat") - fa(r, "floor") })
		line("| %s, first token, time added beyond the translator floor's, median | %.0f µs (the floor adds) | %.0f µs | %s | ≤ floor + %.0f µs | %s |\n",
			title, med(fa, "floor"), med(fa, "chat"), cb, limit, met("stream first token beyond the floor", cb, fmt.Sprintf("≤ +%.0f µs", limit), beyond <= limit))
		c99, _ := ratioCell(rs, func(r result) float64 { return f99(r, "chat") / f99(r, "hop") })
		line("| %s, first token, time added, p99 | %.0f µs (hop) | %.0f µs | %s | (for reading) | |\n", title, med(f99, "hop"), med(f99, "chat"), c99)
		c2, _ := ratioCell(rs, func(r result) float64 { return la(r, "chat") / la(r, "hop") })
		line("| %s, last chunk, time added, median (direct: %.0f µs) | %.0f µs (hop) | %.0f µs | %s | (for reading) | |\n", title, d2, med(la, "hop"), med(la, "chat"), c2)
		lb, _ := diffCell(rs, func(r result) float64 { return la(r, "chat") - la(r, "floor") })
		line("| %s, last chunk, time added beyond the translator floor's, median | %.0f µs (the floor adds) | %.0f µs | %s | (for reading) | |\n", title, med(la, "floor"), med(la, "chat"), lb)
		for _, d := range dialectPaths {
			if !d.stream || !everyRun(rs, first, d.name) {
				continue
			}
			cf, _ := ratioCell(rs, func(r result) float64 { return fa(r, d.name) / fa(r, "chat") })
			cl, _ := ratioCell(rs, func(r result) float64 { return la(r, d.name) / la(r, "chat") })
			line("| %s, %s (%s), first token / last chunk, time added, median | %.0f / %.0f µs (chat stream) | %.0f / %.0f µs | %s / %s | (for reading) | |\n",
				title, d.label, d.path, med(fa, "chat"), med(la, "chat"), med(fa, d.name), med(la, d.name), cf, cl)
		}
	}
	if rs[0].hit {
		b := medianOf(rs, func(r result) float64 { return r.bareRPS })
		e := medianOf(rs, func(r result) float64 { return r.eocRPS })
		cell, ratio := ratioCell(rs, func(r result) float64 { return r.eocRPS / r.bareRPS })
		line("| cache hits, %d keep-alive clients | %.0f req/s (bare handler, same bytes) | %.0f req/s | %s | ≥ %.2g× | %s |\n", o.clients, b, e, cell, g.cacheRatio,
			met("cache-hit throughput vs the bare handler", cell, fmt.Sprintf("≥ %.2g×", g.cacheRatio), ratio >= g.cacheRatio))
		bc := medianOf(rs, func(r result) float64 { return µs(r.bareCPU) })
		hc := medianOf(rs, func(r result) float64 { return µs(r.hitCPU) })
		rc := medianOf(rs, func(r result) float64 { return float64(r.hitCPU) / float64(r.bareCPU) })
		line("| cache hit, server CPU per call | %.1f µs | %.1f µs | %.2f× | (for reading) | |\n", bc, hc, rc)
		if !slices.ContainsFunc(rs, func(r result) bool { return r.floorRPS <= 0 || r.bytesRPS <= 0 }) {
			f := medianOf(rs, func(r result) float64 { return r.floorRPS })
			fb := medianOf(rs, func(r result) float64 { return r.bytesRPS })
			bcell, _ := ratioCell(rs, func(r result) float64 { return r.bytesRPS / r.bareRPS })
			line("| hit floor, bytes (key the body's bytes, look up, encode, eoc-proxy's headers; nothing else): cache hits, %d keep-alive clients | %.0f req/s (bare handler) | %.0f req/s (the floor) | %s | (for reading) | |\n", o.clients, b, fb, bcell)
			fcell, _ := ratioCell(rs, func(r result) float64 { return r.floorRPS / r.bareRPS })
			line("| hit floor, decoding (decode with encoding/json, key, look up, encode, eoc-proxy's headers; nothing else): cache hits | %.0f req/s (bare handler) | %.0f req/s (the floor) | %s | (for reading) | |\n", b, f, fcell)
			ecell, _ := ratioCell(rs, func(r result) float64 { return r.eocRPS / r.bytesRPS })
			dcell, _ := ratioCell(rs, func(r result) float64 { return r.eocRPS / r.floorRPS })
			line("| cache hits against the hit floors (bytes / decoding) | %.0f / %.0f req/s | %.0f req/s | %s / %s | (for reading) | |\n", fb, f, e, ecell, dcell)
			cb := medianOf(rs, func(r result) float64 { return µs(r.bytesHitCPU) })
			cf := medianOf(rs, func(r result) float64 { return µs(r.floorHitCPU) })
			rb := medianOf(rs, func(r result) float64 { return float64(r.hitCPU) / float64(r.bytesHitCPU) })
			rf := medianOf(rs, func(r result) float64 { return float64(r.hitCPU) / float64(r.floorHitCPU) })
			line("| cache hit, server CPU per call against the hit floors' (bytes / decoding) | %.1f / %.1f µs | %.1f µs | %.2f× / %.2f× | (for reading) | |\n", cb, cf, hc, rb, rf)
		}
		ha := medianOf(rs, func(r result) float64 { return r.hitAllocs })
		hb := medianOf(rs, func(r result) float64 { return r.hitBytes })
		line("| cache hit, eoc-proxy's heap allocations per call | | %.0f objects, %.1f KiB | | (for reading) | |\n", ha, hb/1024)
	}
	if rs[0].sok {
		g := func(i int) float64 {
			return medianOf(rs, func(r result) float64 { return float64(r.soak[i].goroutines) })
		}
		m := func(i int, f func(usage) int64) float64 {
			return medianOf(rs, func(r result) float64 { return float64(f(r.soak[i])) / 1024 })
		}
		rss := func(u usage) int64 { return u.rssKiB }
		heap := func(u usage) int64 { return u.heapKiB }
		gGrow := medianOf(rs, func(r result) float64 { return float64(r.soak[2].goroutines - r.soak[1].goroutines) })
		hGrow := medianOf(rs, func(r result) float64 {
			return float64(r.soak[2].heapKiB-r.soak[1].heapKiB) / float64(r.soak[1].heapKiB)
		})
		rGrow := medianOf(rs, func(r result) float64 { return float64(r.soak[2].rssKiB-r.soak[1].rssKiB) / float64(r.soak[1].rssKiB) })
		n := o.soakN
		line("| soak of %d requests: goroutines at %d / %d / %d | | %.0f / %.0f / %.0f | %+.0f (2nd half) | ~0 (≤ 2) | %s |\n", n, n/20, n/20+(n-n/20)/2, n, g(0), g(1), g(2), gGrow,
			met("soak goroutine growth", fmt.Sprintf("%+.0f", gGrow), "≤ 2", gGrow <= 2))
		line("| soak: heap goal (live heap at the last GC + GOGC headroom), MiB | | %.1f / %.1f / %.1f | %+.1f%% (2nd half) | ~0 (≤ 5%%) | %s |\n", m(0, heap), m(1, heap), m(2, heap), 100*hGrow,
			met("soak heap growth", fmt.Sprintf("%+.1f%%", 100*hGrow), "≤ 5%", hGrow <= 0.05))
		line("| soak: RSS, MiB | | %.1f / %.1f / %.1f | %+.1f%% (2nd half) | ~0 (≤ 5%%) | %s |\n", m(0, rss), m(1, rss), m(2, rss), 100*rGrow,
			met("soak RSS growth", fmt.Sprintf("%+.1f%%", 100*rGrow), "≤ 5%", rGrow <= 0.05))
		var retried int64
		for _, r := range rs {
			retried += r.soakRetried
		}
		line("| soak: requests whose connection closed under them (sent again), all runs | | %d | | 0 | %s |\n", retried,
			met("soak connections closed under a request", fmt.Sprint(retried), "0", retried == 0))
	}
	line("\n")
	for _, v := range verdicts {
		line("%s", v)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
