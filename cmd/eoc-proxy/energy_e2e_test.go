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
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/ledger"
)

// burnerEnv makes the test binary a CPU-burning, OpenAI-compatible stand-in backend (TestMain).
const burnerEnv = "EOC_TEST_BURNER"

func TestMain(m *testing.M) {
	if os.Getenv(burnerEnv) != "" {
		os.Exit(runBurner())
	}
	os.Exit(m.Run())
}

// checkBoundsHeaders checks X-EOC-Joules-Low ≤ X-EOC-Joules ≤ X-EOC-Joules-High and the
// receipt time's form.
func checkBoundsHeaders(t *testing.T, h http.Header) {
	t.Helper()
	num := func(k string) float64 {
		v, err := strconv.ParseFloat(h.Get(k), 64)
		if err != nil {
			t.Errorf("%s %q: %v", k, h.Get(k), err)
		}
		return v
	}
	lo, j, hi := num("X-EOC-Joules-Low"), num("X-EOC-Joules"), num("X-EOC-Joules-High")
	if !(0 <= lo && lo <= j && j <= hi) {
		t.Errorf("bounds: low %v, joules %v, high %v", lo, j, hi)
	}
	if _, err := time.Parse(time.RFC3339Nano, h.Get("X-EOC-Receipt-Time")); err != nil {
		t.Errorf("X-EOC-Receipt-Time %q: %v", h.Get("X-EOC-Receipt-Time"), err)
	}
	if h.Get("X-EOC-Joules-Saved") != "" && h.Get("X-EOC-Joules-Saved-Grade") != "estimated" {
		t.Errorf("X-EOC-Joules-Saved %q with grade %q", h.Get("X-EOC-Joules-Saved"), h.Get("X-EOC-Joules-Saved-Grade"))
	}
}

// runBurner serves /v1/chat/completions on a loopback port it prints, burning CPU for each
// call: "burn-pair" calls are held until two have arrived, so they overlap whatever the load,
// then each burns; others burn alone. A stream burns again after its first chunk (decode). GET /cpu reports the process's CPU time (ns).
func runBurner() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var mu sync.Mutex
	arrived := 0
	pair := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /cpu", func(w http.ResponseWriter, _ *http.Request) {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		_, _ = fmt.Fprint(w, ru.Utime.Nano()+ru.Stime.Nano())
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"burn-solo","object":"model"},{"id":"burn-pair","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if req.Model == "burn-pair" {
			mu.Lock()
			arrived++
			if arrived == 2 {
				close(pair)
			}
			mu.Unlock()
			select {
			case <-pair:
			case <-time.After(30 * time.Second): // the test fails on the overlap then
			}
		}
		burn(150 * time.Millisecond) // prefill
		const usage = `"usage":{"prompt_tokens":20,"completion_tokens":5,"total_tokens":25}`
		head := fmt.Sprintf(`"id":"burn","created":1,"model":%q`, req.Model)
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{%s,"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"burnt"},"finish_reason":"stop"}],%s}`, head, usage)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i, c := range []string{
			`"choices":[{"index":0,"delta":{"role":"assistant","content":"burnt"},"finish_reason":null}]`,
			`"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]`,
			`"choices":[],` + usage,
		} {
			_, _ = fmt.Fprintf(w, "data: {%s,\"object\":\"chat.completion.chunk\",%s}\n\n", head, c)
			if i == 0 {
				http.NewResponseController(w).Flush() //nolint:errcheck // a failed flush fails the test's stream
				burn(100 * time.Millisecond)          // decode, after the first chunk
			}
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	_ = srv.Serve(ln)
	return 0
}

// burn keeps a core busy for d of wall time.
func burn(d time.Duration) {
	x := 1.0
	for t0 := time.Now(); time.Since(t0) < d; {
		for range 10000 {
			x = x*1.0000001 + 1e-9
		}
	}
	if x == 0 {
		fmt.Println(x)
	}
}

// startBurner starts the stand-in backend in its own process and returns its base URL.
func startBurner(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), burnerEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("burner: %v", err)
	}
	return "http://127.0.0.1:" + strings.TrimSpace(line)
}

func burnerCPU(t *testing.T, base string) time.Duration {
	t.Helper()
	resp, err := http.Get(base + "/cpu")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	ns, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		t.Fatalf("/cpu %q: %v", b, err)
	}
	return time.Duration(ns)
}

// TestEnergyThroughProxy is issue 10's done-when, through the real proxy against a stand-in
// backend that burns CPU in its own process, on the estimates path (RAPL and NVML off): two
// overlapping calls say span-overlap and add up to no more than the backend's CPU time over
// both × the per-core watts; every call has Low ≤ Joules ≤ High; receipts recompute passes on
// the real ledger and fails on one whose figure was edited; eoc_joules_total has a coverage label.
func TestEnergyThroughProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a backend process")
	}
	base := startBurner(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "receipts.jsonl")
	const watts = 10.0
	s := startStack(t, fmt.Sprintf(`
log_level: error
cascade: {stages: [cache, neural]}
backends: [{name: burner, type: openai, url: %q, models: ["burn-*"], timeout: 60s}]
meter: {rapl: {enabled: "off"}, nvml: {enabled: "off"}, cpu_watts_per_core: %v}
ledger: {path: %q, fsync: every}
`, base+"/v1", watts, path))

	// Two calls held by the backend until both arrived: they overlap whatever the load.
	before := burnerCPU(t, base)
	var wg sync.WaitGroup
	hdrs := make([]http.Header, 2)
	for i := range 2 {
		wg.Go(func() {
			hdrs[i] = postChatHeader(s.URL, fmt.Sprintf(`{"model":"burn-pair","messages":[{"role":"user","content":"pair %d"}]}`, i))
		})
	}
	wg.Wait()
	after := burnerCPU(t, base)
	var sum float64
	for i, h := range hdrs {
		if h == nil {
			t.Fatalf("pair call %d failed", i)
		}
		checkBoundsHeaders(t, h)
		if r := h.Get("X-EOC-Energy-Reason"); !strings.Contains(r, "span-overlap") || !strings.Contains(h.Get("X-EOC-Energy-Method"), "cpu-time-share") {
			t.Errorf("pair call %d: reason %q, method %q; want span-overlap, cpu-time-share", i, r, h.Get("X-EOC-Energy-Method"))
		}
		j, _ := strconv.ParseFloat(h.Get("X-EOC-Joules"), 64)
		sum += j
	}
	t.Logf("pair: %v J for %v of backend CPU; %v / %v; %v", sum, after-before, hdrs[0].Get("X-EOC-Joules-Low"), hdrs[0].Get("X-EOC-Joules-High"), hdrs[0].Get("X-EOC-Energy-Method"))
	// rusage counts in µs: allow two µs of truncation, at the watts.
	if limit := (after - before + 2*time.Microsecond).Seconds() * watts; sum > limit || sum <= 0 {
		t.Errorf("overlapping calls billed %v J; the backend used %v of CPU, %v J at %v W a core", sum, after-before, limit, watts)
	}

	// A solo call, its cache hit, and a stream: each bounded.
	for _, body := range []string{
		`{"model":"burn-solo","messages":[{"role":"user","content":"solo"}]}`,
		`{"model":"burn-solo","messages":[{"role":"user","content":"solo"}]}`,
	} {
		resp := postChat(t, s.URL, body, nil)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		checkBoundsHeaders(t, resp.Header)
	}
	events, resp := rawStream(t, s.URL, `{"model":"burn-solo","stream":true,"messages":[{"role":"user","content":"stream"}]}`, nil) //nolint:bodyclose // rawStream closed it
	checkBoundsHeaders(t, resp.Trailer)
	var final struct {
		EOC struct {
			Joules          float64 `json:"joules"`
			Low             float64 `json:"joules_low"`
			High            float64 `json:"joules_high"`
			ReceiptTime     string  `json:"receipt_time"`
			PerPrompt       float64 `json:"joules_per_prompt_token"`
			PerCompletion   float64 `json:"joules_per_completion_token"`
			TokenSplit      string  `json:"token_split"`
			Receipt         string  `json:"receipt"`
			Stage           string  `json:"stage"`
			Energy          string  `json:"energy"`
			BudgetRemaining any     `json:"budget_remaining"`
		} `json:"eoc"`
	}
	if n := len(events); n < 2 || json.Unmarshal([]byte(events[n-2]), &final) != nil {
		t.Fatalf("events %q", events)
	}
	e := final.EOC
	if !(e.Low <= e.Joules && e.Joules <= e.High) || e.ReceiptTime != resp.Trailer.Get("X-EOC-Receipt-Time") ||
		e.PerPrompt <= 0 || e.PerCompletion <= 0 || e.TokenSplit != "phases" {
		t.Errorf("eoc chunk %+v", e)
	}
	// The receipt is checkable from what the client got, with the request's key from the ledger.
	recs := readRecords(t, path)
	if len(recs) != 5 {
		t.Fatalf("%d records, want 5", len(recs))
	}
	last := recs[4]
	rt, _ := time.Parse(time.RFC3339Nano, e.ReceiptTime)
	if h := (energy.Receipt{Key: last.Key, Stage: e.Stage, Model: "burn-solo", Joules: e.Joules, Grade: energy.Grade(e.Energy), Time: rt}).Hash(); h != e.Receipt {
		t.Errorf("receipt %s from the client's fields, sent %s", h, e.Receipt)
	}
	for _, r := range recs {
		if !(r.Low <= r.Joules && r.Joules <= r.High) || r.Inputs.Len() == 0 {
			t.Errorf("record %d: low %v joules %v high %v, %d inputs", r.Seq, r.Low, r.Joules, r.High, r.Inputs.Len())
		}
	}
	if last.PromptTokens != 20 || last.CompletionTokens != 5 {
		t.Errorf("last record's tokens %d+%d, want 20+5", last.PromptTokens, last.CompletionTokens)
	}

	// receipts recompute passes on the real ledger...
	var out bytes.Buffer
	if err := receiptsRecompute([]string{path}, &out); err != nil || !strings.Contains(out.String(), "5 record(s) re-derived") {
		t.Fatalf("recompute on the real ledger: %v\n%s", err, out.String())
	}
	// ...and fails, naming the record, on one whose figure was edited.
	lines := strings.Split(strings.TrimSpace(string(mustReadFile(t, path))), "\n")
	var edited ledger.Record
	if err := json.Unmarshal([]byte(lines[2]), &edited); err != nil {
		t.Fatal(err)
	}
	edited.Joules += 0.5
	b, err := json.Marshal(edited)
	if err != nil {
		t.Fatal(err)
	}
	lines[2] = string(b)
	bad := filepath.Join(dir, "edited.jsonl")
	if err := os.WriteFile(bad, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	err = receiptsRecompute([]string{bad}, &out)
	if !errors.Is(err, errRecompute) || !strings.Contains(out.String(), fmt.Sprintf("seq %d ", edited.Seq)) || !strings.Contains(out.String(), "joules is") {
		t.Fatalf("recompute on an edited ledger: %v\n%s", err, out.String())
	}

	// eoc_joules_total has a coverage label.
	mresp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mresp.Body)
	_ = mresp.Body.Close()
	if !regexp.MustCompile(`eoc_joules_total\{coverage="(whole|partial)",grade="[a-z]+",model="burn-pair",stage="neural"\} `).Match(body) {
		t.Errorf("eoc_joules_total without coverage:\n%s", grep(body, "eoc_joules_total"))
	}
}

// postChatHeader posts a chat call from a goroutine other than the test's and returns the
// response's header: nil on failure.
func postChatHeader(url, body string) http.Header {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil
	}
	return resp.Header
}

func mustReadFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
