//go:build linux

// Command reliability runs issue 11's reliability suite against the real eoc-proxy binary.
//
// It builds eoc-proxy and starts it, and a misbehaving fake upstream (this binary's "upstream"
// role, speaking Ollama's API and the OpenAI-compatible one), each its own process on loopback.
// The client is this process. Phases, each bounded in count and time:
//
//   - bodies: a 10.2 MB body of 3.4 million empty messages, then 64 of 0.6 MB at once, against
//     the idle proxy: each a 400 naming messages, and the peak RSS (VmHWM, reset by clear_refs)
//     over what the proxy held before;
//   - fields: content [1, 2] to the OpenAI backend and think "maybe" to the Ollama one, each a
//     400 naming the field; the max_duration `eoc-proxy config check` gives a backend without one;
//   - load: -n requests (default 100,000) over -c connections (default 256) mixing cache hits,
//     seeded kv answers, neural calls, streams, upstream 500s, refused connections and clients
//     that leave mid-stream; RSS (/proc) and goroutines (/metrics go_goroutines) sampled at the
//     start, middle and end; with -load-rounds N, N rounds back to back (prompts new to each),
//     and after each RSS, goroutines, the live heap after a GC forced through the proxy's
//     debug.pprof listener, and the cache's and kv's entry and byte gauges;
//   - invented: n/5 requests, each naming a new model (the backend routes "[^od]*"); RSS,
//     goroutines, /metrics size and its model label values after, and /ui/data's size after
//     the first n/50 names and after all;
//   - slow bodies: 1,000 clients that send a request body one byte every 2 s; goroutines while
//     they trickle and after the proxy's 30 s body timeout, and how many connections the proxy
//     closed within 1 s of its 408;
//   - faults: each fault on both dialects, whole and streamed, with the status the client got;
//     then the fault is removed, the same request sent again, and it must be a neural answer
//     with one more upstream call (nothing failed was cached);
//   - store (store.go): issue 32's rows on what the proxy keeps: three streamed answers of
//     200 MB (RSS idle, after a first such answer, after three more, 10 s later and after a
//     forced GC; again with GOGC=100 set explicitly; nothing cached), an answer with choice index -1 whole and
//     streamed (502 both ways, nothing cached), and Redis stopped 10 s under two replicas with
//     a budgeted key (the longest call against redis.op_timeout, reservations left after);
//   - kill: -kills rounds of load with the ledger at fsync: every, a kill -9 mid-load, then
//     `eoc-proxy receipts verify` on the ledger and a check that every receipt a client received
//     (X-EOC-Receipt) is in it.
//
// Every answer is checked against what its kind should get; anything else counts as an error
// beyond the injected faults (the goal is 0) and fails the run.
//
// Usage: scripts/reliability.sh [flags]   (go run ./scripts/reliability -h for the flags)
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/eoc-proxy/eoc-proxy/internal/procs"
)

type options struct {
	root    string
	eocBin  string
	n, c    int
	rounds  int
	kills   int
	heapDir string
	slow    int
	skip    string
	timeout time.Duration
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "upstream" {
		os.Exit(procs.ServeChild(newUpstream().handler()))
	}
	var o options
	fs := flag.NewFlagSet("reliability", flag.ExitOnError)
	fs.StringVar(&o.root, "root", ".", "the module root (where cmd/eoc-proxy and data/ are)")
	fs.StringVar(&o.eocBin, "eoc", "", "an eoc-proxy binary to use instead of building one")
	fs.IntVar(&o.n, "n", 100000, "requests in the load phase (the invented-names phase sends n/5)")
	fs.IntVar(&o.c, "c", 256, "concurrent connections")
	fs.IntVar(&o.rounds, "load-rounds", 1, "rounds of the load phase back to back, each of -n requests with prompts new to that round; RSS, goroutines, the live heap and the cache and kv gauges are printed after each")
	fs.IntVar(&o.kills, "kills", 3, "kill -9 rounds")
	fs.StringVar(&o.heapDir, "heap-dir", "", "a directory to keep the proxy's heap profile after each load round in (go tool pprof -sample_index=inuse_space)")
	fs.IntVar(&o.slow, "slow", 1000, "slow-body clients")
	fs.StringVar(&o.skip, "skip", "", "phases to skip, comma-separated: bodies, fields, load, invented, slow, faults, store, kill")
	fs.DurationVar(&o.timeout, "timeout", 9*time.Minute, "the whole run's bound")
	_ = fs.Parse(os.Args[1:])
	procs.Init("reliability")
	time.AfterFunc(o.timeout, func() { procs.Fatalf("the run took longer than -timeout %s", o.timeout) })

	dir, err := os.MkdirTemp("", "eoc-reliability-")
	if err != nil {
		procs.Fatalf("%v", err)
	}
	procs.RemoveOnExit(dir)
	root, err := filepath.Abs(o.root)
	if err != nil {
		procs.Fatalf("%v", err)
	}
	if o.eocBin == "" {
		if o.eocBin, err = procs.BuildEOC(context.Background(), root, dir); err != nil {
			procs.Fatalf("%v", err)
		}
	}
	_, upURL, err := procs.StartSelf("upstream")
	if err != nil {
		procs.Fatalf("%v", err)
	}
	r := &run{o: o, dir: dir, root: root, up: upURL}
	start := time.Now()
	skip := func(p string) bool { return strings.Contains(","+o.skip+",", ","+p+",") }

	r.startEOC("batch")
	if !skip("bodies") { // first: its peaks are over an idle proxy
		r.bodies()
	}
	if !skip("fields") {
		r.fields()
	}
	if !skip("load") {
		r.load()
	}
	if !skip("invented") {
		r.invented()
	}
	if !skip("slow") {
		r.slowBodies()
	}
	if !skip("faults") {
		r.faults()
	}
	r.eoc.Stop()
	if !skip("store") {
		r.storeRows()
	}
	if !skip("kill") {
		r.kills()
	}
	procs.StopAll(true)
	r.report(time.Since(start))
	_ = os.RemoveAll(dir)
	if r.unexpected > 0 || r.failed {
		fmt.Fprintf(os.Stderr, "reliability: FAIL: %d unexpected outcomes\n", r.unexpected)
		os.Exit(1)
	}
}

// run is one suite run's state and results.
type run struct {
	o             options
	dir, root, up string
	eoc           *procs.Proc
	eocURL        string
	pprofURL      string // eoc-proxy's debug.pprof listener
	client        *http.Client
	unexpected    int
	failed        bool
	lines         []string // the report, in order
	notes         []string // the unexpected outcomes, a few of each kind
}

func (r *run) line(format string, a ...any) {
	s := fmt.Sprintf(format, a...)
	r.lines = append(r.lines, s)
	fmt.Fprintln(os.Stderr, "reliability:", s)
}

// startEOC starts eoc-proxy with the suite's config and the ledger at fsync (every or batch).
func (r *run) startEOC(fsync string) {
	listen, err := procs.FreePort()
	if err != nil {
		procs.Fatalf("%v", err)
	}
	dead, err := procs.FreePort() // nothing listens there: connections are refused
	if err != nil {
		procs.Fatalf("%v", err)
	}
	pprofAddr, err := procs.FreePort() // the load phase forces a GC through it to read the live heap
	if err != nil {
		procs.Fatalf("%v", err)
	}
	cfg := fmt.Sprintf(`listen: %s
log_level: error
limits: {max_body_bytes: 10485760, request_timeout: 60s}
cascade:
  stages: [cache, kv, graph, neural]
  cache: {max_entries: 10000, ttl: 1h}
  kv:
    embedder: {type: builtin}
    seed_files: [%s]
    max_entries: 100000
  graph: {files: [%s]}
backends:
  - {name: local, type: ollama, url: %s, models: ["[^od]*"], timeout: 2s, max_duration: 5s}
  - {name: oa, type: openai, url: %s/v1, models: ["oa-*"], timeout: 2s, max_duration: 5s}
  - {name: dead, type: ollama, url: http://%s, models: ["dead-*"], timeout: 2s}
routing: {eject_after: 1000000000, cooldown: 1s}
ledger: {path: %s, fsync: %s}
debug: {pprof: %s}
`, listen, filepath.Join(r.root, "data/faq.jsonl"), filepath.Join(r.root, "data/facts.tsv"), r.up, r.up, dead,
		filepath.Join(r.dir, "ledger.jsonl"), fsync, pprofAddr)
	cfgPath := filepath.Join(r.dir, "eoc.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		procs.Fatalf("%v", err)
	}
	logPath := filepath.Join(r.dir, "eoc-proxy.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		procs.Fatalf("%v", err)
	}
	defer func() { _ = logf.Close() }()
	cmd := exec.Command(r.o.eocBin, "serve", "-config", cfgPath)
	cmd.Dir = r.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	p, err := procs.Start("eoc-proxy", cmd)
	if err != nil {
		procs.Fatalf("%v", err)
	}
	p.Log = logPath
	r.eoc, r.eocURL, r.pprofURL = p, "http://"+listen, "http://"+pprofAddr
	if err := procs.WaitReady(p, r.eocURL+"/healthz"); err != nil {
		procs.Fatalf("%v", err)
	}
	if r.client != nil {
		r.client.CloseIdleConnections()
	}
	r.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: r.o.c, MaxConnsPerHost: r.o.c, DisableCompression: true}}
}

func (r *run) report(took time.Duration) {
	fmt.Printf("\neoc-proxy reliability suite: %d requests at %d connections (%s, %d CPUs), %s\n\n",
		r.o.n, r.o.c, runtime.GOARCH, runtime.NumCPU(), took.Round(time.Second))
	for _, l := range r.lines {
		fmt.Println(l)
	}
	for _, n := range r.notes {
		fmt.Println("unexpected:", n)
	}
	fmt.Printf("\nerrors beyond the injected faults: %d\n", r.unexpected)
}
