package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// hugeUpstream streams, in the OpenAI dialect, an answer of size bytes of text in 64 KiB
// chunks, made as it goes: the test process holds one chunk, never the answer. A question that
// says "small" gets one chunk.
func hugeUpstream(t *testing.T, size int) (url string, calls *atomic.Int64) {
	calls = new(atomic.Int64)
	const piece = 64 << 10
	head := `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"fake-m","choices":[{"index":0,"delta":{"content":"`
	chunk := []byte(head + strings.Repeat("a", piece) + `"},"finish_reason":null}]}` + "\n\n")
	end := []byte(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"fake-m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":5,"completion_tokens":` + fmt.Sprint(size/4) + `,"total_tokens":` + fmt.Sprint(size/4+5) + "}}\n\ndata: [DONE]\n\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"fake-m","object":"model"}]}`)
			return
		}
		calls.Add(1)
		q, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		w.Header().Set("Content-Type", "text/event-stream")
		n := size
		if strings.Contains(string(q), "small") {
			n = 1
		}
		for sent := 0; sent < n; sent += piece {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		_, _ = w.Write(end)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1", calls
}

// heapAfterGC is the live heap once garbage is collected.
func heapAfterGC() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Three streamed answers of 200 MB each are served whole and stored nowhere: not in the exact
// cache, not in kv, and the stream's recording stops at the learners' entry bound. The live
// heap after them is within 50 MB of where it was (before the byte bounds: three answers cached
// whole, about 1.2 GB more), eoc_cache_too_large_total counts them, and a repeat goes upstream
// again.
func TestHugeStreamedAnswersAreNotStored(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 600 MB through the proxy")
	}
	const size = 200 << 20
	up, calls := hugeUpstream(t, size)
	s := startStack(t, oneBackend("openai", up, "cascade: {stages: [cache, kv, neural]}"))
	ask := func(q string) int64 {
		t.Helper()
		body := `{"model":"fake-m","stream":true,"messages":[{"role":"user","content":` + fmt.Sprintf("%q", q) + `}]}`
		resp, err := http.Post(s.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d, %d bytes, %v", q, resp.StatusCode, n, err)
		}
		return n
	}
	ask("warm up: a first small answer")
	waitMetric(t, s, "eoc_kv_entries 1", time.Minute) // learned in the background: done before measuring
	before := heapAfterGC()
	for i := range 3 {
		if n := ask(fmt.Sprintf("huge answer %d", i)); n < size {
			t.Fatalf("answer %d: the client got %d bytes, want more than %d", i, n, size)
		}
	}
	after := heapAfterGC()
	grew := int64(after) - int64(before)
	t.Logf("live heap %.1f MB before three %d MB answers, %.1f MB after (%+.1f MB)",
		float64(before)/1e6, size>>20, float64(after)/1e6, float64(grew)/1e6)
	if grew > 50<<20 {
		t.Errorf("the live heap grew %.1f MB after three streamed answers, over 50 MB: they were kept", float64(grew)/1e6)
	}
	m := metrics(t, s)
	if !strings.Contains(m, "eoc_cache_too_large_total 3") {
		t.Errorf("eoc_cache_too_large_total is not 3:\n%s", grepLines(m, "too_large"))
	}
	n := calls.Load()
	ask("huge answer 0")
	if calls.Load() != n+1 {
		t.Error("a repeat of a huge answer was served without the upstream: it was cached")
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
