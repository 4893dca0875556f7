package main

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

// twoBackends is a config with the neural stage alone in front of backends first and second,
// which both serve the fake-* models; extra is appended.
func twoBackends(first, second, timeout, extra string) string {
	return fmt.Sprintf(`
log_level: error
cascade: {stages: [neural]}
backends:
  - {name: first, type: openai, url: %q, models: ["fake-*"], timeout: %s}
  - {name: second, type: openai, url: %q, models: ["fake-*"], timeout: %s}
%s`, first, timeout, second, timeout, extra)
}

const okBody = `{"model":"fake-model","messages":[{"role":"user","content":"route me"}]}`

// TestFallbackBeforeTheFirstByte: a first backend that is dead, answers 503, or sends no byte
// within its timeout is followed by the second, which answers; the headers say so, whole and
// streamed.
func TestFallbackBeforeTheFirstByte(t *testing.T) {
	dead := fakes.NewOpenAI(t)
	deadURL := dead.BaseURL()
	dead.Close()
	tests := []struct {
		name  string
		first func(t *testing.T) string
	}{
		{"dead", func(*testing.T) string { return deadURL }},
		{"503", func(t *testing.T) string {
			return fakes.NewOpenAI(t, fakes.Config{Status: http.StatusServiceUnavailable}).BaseURL()
		}},
		{"silent past timeout", func(t *testing.T) string { return fakes.NewOpenAI(t, fakes.Config{Block: true}).BaseURL() }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			second := fakes.NewOpenAI(t, fakes.Config{Reply: "from the second"})
			s := startStack(t, twoBackends(tc.first(t), second.BaseURL(), "1s", ""))

			resp := postChat(t, s.URL, okBody, nil)
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "from the second") {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if b, n := resp.Header.Get("X-EOC-Backend"), resp.Header.Get("X-EOC-Attempts"); b != "second" || n != "2" {
				t.Errorf("X-EOC-Backend %q, X-EOC-Attempts %q; want second, 2", b, n)
			}
			checkEnergyHeaders(t, resp.Header, "neural")

			events, sresp := rawStream(t, s.URL, `{"model":"fake-model","stream":true,"messages":[{"role":"user","content":"route me"}]}`, nil) //nolint:bodyclose // rawStream closed it
			if len(events) == 0 || events[len(events)-1] != "[DONE]" {
				t.Fatalf("stream ended %v", events)
			}
			if b, n := sresp.Header.Get("X-EOC-Backend"), sresp.Header.Get("X-EOC-Attempts"); b != "second" || n != "2" {
				t.Errorf("stream: X-EOC-Backend %q, X-EOC-Attempts %q; want second, 2", b, n)
			}
		})
	}
}

// TestClientErrorIsNotRetried: an upstream 400 reaches the client, and no other backend is called.
func TestClientErrorIsNotRetried(t *testing.T) {
	bad := fakes.NewOpenAI(t, fakes.Config{Status: 400, ErrorBody: `{"error":{"message":"upstream says no","type":"invalid_request_error","param":"messages","code":"bad"}}`})
	second := fakes.NewOpenAI(t)
	s := startStack(t, twoBackends(bad.BaseURL(), second.BaseURL(), "2s", ""))
	status, msg, _ := errorOf(t, s.URL, okBody, nil)
	if status != 400 || !strings.Contains(msg, "upstream says no") {
		t.Fatalf("got %d %q", status, msg)
	}
	if bad.Requests() != 1 || second.Requests() != 0 {
		t.Fatalf("calls: first %d, second %d; want 1, 0", bad.Requests(), second.Requests())
	}
}

// TestEjectedBackendIsSkipped: after eject_after failures in a row the failing backend is no
// longer called, its eoc_backend_up is 0, and /readyz stays ready on the second backend.
func TestEjectedBackendIsSkipped(t *testing.T) {
	failing := fakes.NewOpenAI(t, fakes.Config{Status: http.StatusBadGateway})
	second := fakes.NewOpenAI(t)
	s := startStack(t, twoBackends(failing.BaseURL(), second.BaseURL(), "2s", "routing: {eject_after: 2, cooldown: 1h}\n"))
	for i := range 5 {
		resp := postChat(t, s.URL, okBody, nil)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		want := "2"
		if i >= 2 {
			want = "1"
		}
		if resp.StatusCode != 200 || resp.Header.Get("X-EOC-Backend") != "second" || resp.Header.Get("X-EOC-Attempts") != want {
			t.Fatalf("call %d: status %d, backend %q, attempts %q (want %s)", i, resp.StatusCode,
				resp.Header.Get("X-EOC-Backend"), resp.Header.Get("X-EOC-Attempts"), want)
		}
	}
	if failing.Requests() != 2 || second.Requests() != 5 {
		t.Fatalf("calls: failing %d, second %d; want 2, 5", failing.Requests(), second.Requests())
	}
	metrics := get(t, s.URL+"/metrics")
	for _, want := range []string{`eoc_backend_up{backend="first"} 0`, `eoc_backend_up{backend="second"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s:\n%s", want, grep([]byte(metrics), "eoc_backend_up"))
		}
	}
	if resp, err := http.Get(s.URL + "/readyz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("readyz with one live backend: %v %v", resp, err)
	} else {
		_ = resp.Body.Close()
	}
}

// TestOnlyBackendEjectedIsNotReady: a model whose only backend is ejected makes /readyz 503.
func TestOnlyBackendEjectedIsNotReady(t *testing.T) {
	failing := fakes.NewOpenAI(t, fakes.Config{Status: http.StatusInternalServerError})
	s := startStack(t, oneBackend("openai", failing.BaseURL(), "routing: {eject_after: 1, cooldown: 1h}\n"))
	if status, _, _ := errorOf(t, s.URL, okBody, nil); status != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", status)
	}
	resp, err := http.Get(s.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("readyz %d with the only backend ejected", resp.StatusCode)
	}
}

// TestSlowStreamOutlivesTimeout: a stream with a chunk every 0.7 s runs past a 2 s backend
// timeout and a 2 s request timeout to [DONE]: neither cuts a stream that keeps flowing.
func TestSlowStreamOutlivesTimeout(t *testing.T) {
	slow := fakes.NewOpenAI(t, fakes.Config{Chunks: 5, ChunkDelay: 700 * time.Millisecond})
	s := startStack(t, oneBackend("openai", slow.BaseURL(), "limits: {request_timeout: 2s}\n"))
	start := time.Now()
	events, _ := rawStream(t, s.URL, `{"model":"fake-model","stream":true,"messages":[{"role":"user","content":"slow"}]}`, nil) //nolint:bodyclose // rawStream closed it
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream cut after %v: %v", time.Since(start), events)
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Fatalf("the stream took %v: not past the timeout, the test proves nothing", took)
	}
}

// TestFailedAttemptIsBilled: the failed attempt's joules are in the call's figure, and the
// ledger lists both attempts. The first backend's process (its pid_file) is a busy loop, so the
// meter sees CPU spent during the attempt that ends in 503.
func TestFailedAttemptIsBilled(t *testing.T) {
	busy := exec.Command("sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Skipf("no shell for a busy process: %v", err)
	}
	t.Cleanup(func() { _ = busy.Process.Kill(); _ = busy.Wait() })
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "first.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(busy.Process.Pid)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	failing := fakes.NewOpenAI(t, fakes.Config{Status: http.StatusServiceUnavailable, Delay: 300 * time.Millisecond})
	second := fakes.NewOpenAI(t)
	path := filepath.Join(dir, "receipts.jsonl")
	s := startStack(t, fmt.Sprintf(`
log_level: error
cascade: {stages: [neural]}
ledger: {path: %q}
meter: {rapl: {enabled: "off"}, nvml: {enabled: "off"}}
backends:
  - {name: first, type: openai, url: %q, models: ["fake-*"], process: {pid_file: %q}}
  - {name: second, type: openai, url: %q, models: ["fake-*"]}
`, path, failing.BaseURL(), pidFile, second.BaseURL()))
	resp := postChat(t, s.URL, okBody, nil)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-EOC-Attempts") != "2" {
		t.Fatalf("status %d, attempts %q", resp.StatusCode, resp.Header.Get("X-EOC-Attempts"))
	}
	recs := readRecords(t, path)
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
	r := recs[0]
	if len(r.Attempts) != 2 || r.Attempts[0].Backend != "first" || r.Attempts[0].Outcome != "status" || r.Attempts[0].Status != 503 ||
		r.Attempts[1].Backend != "second" || r.Attempts[1].Outcome != "ok" || r.Backend != "second" {
		t.Fatalf("record: %+v", r)
	}
	if r.Attempts[0].Joules <= 0 {
		t.Errorf("the failed attempt cost %v J: nothing to bill", r.Attempts[0].Joules)
	}
	if sum := r.Attempts[0].Joules + r.Attempts[1].Joules; math.Abs(sum-r.Joules) > 1e-6 {
		t.Errorf("call's figure %v J, attempts sum to %v J", r.Joules, sum)
	}
	if got := resp.Header.Get("X-EOC-Joules"); got != formatJ(r.Joules) {
		t.Errorf("X-EOC-Joules %s, ledger %v", got, r.Joules)
	}
}

func formatJ(j float64) string { return strconv.FormatFloat(j, 'f', -1, 64) }

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestCacheHitNamesNoBackend: X-EOC-Backend and X-EOC-Attempts are the neural stage's; a cache
// hit of an answer that took two attempts names neither.
func TestCacheHitNamesNoBackend(t *testing.T) {
	failing := fakes.NewOpenAI(t, fakes.Config{Status: http.StatusServiceUnavailable})
	second := fakes.NewOpenAI(t)
	s := startStack(t, strings.Replace(twoBackends(failing.BaseURL(), second.BaseURL(), "2s", ""), "[neural]", "[cache, neural]", 1))
	for i, want := range []string{"2", ""} {
		resp := postChat(t, s.URL, okBody, nil)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if got := resp.Header.Get("X-EOC-Attempts"); got != want || (want == "") != (resp.Header.Get("X-EOC-Backend") == "") {
			t.Fatalf("call %d (stage %s): attempts %q, backend %q", i, resp.Header.Get("X-EOC-Stage"), got, resp.Header.Get("X-EOC-Backend"))
		}
	}
}

// TestRequestTimeoutBoundsTheWait: limits.request_timeout still ends a call that has no answer
// (504, not a client that left), and no other backend is tried once it has passed.
func TestRequestTimeoutBoundsTheWait(t *testing.T) {
	slow := fakes.NewOpenAI(t, fakes.Config{Delay: 10 * time.Second})
	second := fakes.NewOpenAI(t)
	s := startStack(t, twoBackends(slow.BaseURL(), second.BaseURL(), "30s", "limits: {request_timeout: 300ms}\n"))
	status, msg, _ := errorOf(t, s.URL, okBody, nil)
	if status != http.StatusGatewayTimeout || !strings.Contains(msg, "timed out") {
		t.Fatalf("got %d %q, want 504", status, msg)
	}
	if second.Requests() != 0 {
		t.Fatalf("the second backend was called after the request timeout")
	}
}

// TestLeastJoulesThroughTheStack: with routing strategy least-joules, each backend is tried
// once while it has no figure, then the calls go to the one whose figures are cheaper (here
// priced by joules_per_token, as the fakes run in this process). Exploration sends a few
// elsewhere, so the bound is loose.
func TestLeastJoulesThroughTheStack(t *testing.T) {
	dear, cheap := fakes.NewOpenAI(t), fakes.NewOpenAI(t)
	s := startStack(t, fmt.Sprintf(`
log_level: error
cascade: {stages: [neural]}
routing: {groups: [{models: ["fake-*"], strategy: least-joules}]}
backends:
  - {name: dear, type: openai, url: %q, models: ["fake-*"], joules_per_token: 2}
  - {name: cheap, type: openai, url: %q, models: ["fake-*"], joules_per_token: 0.2}
`, dear.BaseURL(), cheap.BaseURL()))
	var backends []string
	for range 40 {
		resp := postChat(t, s.URL, okBody, nil)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		backends = append(backends, resp.Header.Get("X-EOC-Backend"))
	}
	if dear.Requests() == 0 || cheap.Requests() < 30 {
		t.Fatalf("dear %d calls, cheap %d: want each tried, then nearly all on cheap (%v)", dear.Requests(), cheap.Requests(), backends)
	}
}

// TestEmbeddingsFallBack: an embeddings call, like a chat call, goes on to the model's next
// backend when the first is dead, and says so in the same headers.
func TestEmbeddingsFallBack(t *testing.T) {
	dead := fakes.NewOpenAI(t)
	deadURL := dead.BaseURL()
	dead.Close()
	second := fakes.NewOpenAI(t)
	s := startStack(t, twoBackends(deadURL, second.BaseURL(), "1s", ""))
	resp, err := http.Post(s.URL+"/v1/embeddings", "application/json", strings.NewReader(`{"model":"fake-model","input":"route me"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"embedding"`) {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if second.Embeds() != 1 {
		t.Errorf("the second backend saw %d embeddings calls, want 1", second.Embeds())
	}
	if b, n := resp.Header.Get("X-EOC-Backend"), resp.Header.Get("X-EOC-Attempts"); b != "second" || n != "2" {
		t.Errorf("X-EOC-Backend %q, X-EOC-Attempts %q; want second, 2", b, n)
	}
}
