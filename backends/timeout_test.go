package backends

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

// TestStreamFlowsPastTimeout: the timeout bounds each silence, not a stream that keeps
// sending: chunks every 200 ms run well past a 1.2 s timeout to the end.
func TestStreamFlowsPastTimeout(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.typ, func(t *testing.T) {
			f := d.fake(t, fakes.Config{Reply: "a b c d e f g h i j", Chunks: 10, ChunkDelay: 200 * time.Millisecond})
			b := newBackend(t, d.typ, f, func(o *Options) { o.Timeout = 1200 * time.Millisecond })
			var c collector
			start := time.Now()
			ans, err := b.Chat(context.Background(), chatRequest(t, helloBody), c.sink)
			if err != nil {
				t.Fatalf("cut after %v: %v", time.Since(start), err)
			}
			if !ans.Complete || c.text() != "a b c d e f g h i j" {
				t.Fatalf("complete %v, text %q", ans.Complete, c.text())
			}
		})
	}
}

// TestMaxDuration bounds a whole call, even one that keeps flowing.
func TestMaxDuration(t *testing.T) {
	f := fakes.NewOpenAI(t, fakes.Config{Chunks: 50, ChunkDelay: 100 * time.Millisecond})
	b := newBackend(t, "openai", f, func(o *Options) { o.Timeout, o.MaxDuration = 5*time.Second, 300*time.Millisecond })
	var c collector
	_, err := b.Chat(context.Background(), chatRequest(t, helloBody), c.sink)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Fatalf("err %v: want a deadline, not a cancellation", err)
	}
	if !f.WaitCanceled(cancelSeen) {
		t.Error("the fake never saw the call cancelled")
	}
}

// TestCallerCancelIsNotATimeout: a caller that goes away is context.Canceled, at once.
func TestCallerCancelIsNotATimeout(t *testing.T) {
	f := fakes.NewOpenAI(t, fakes.Config{Block: true})
	b := newBackend(t, "openai", f, func(o *Options) { o.Timeout = 10 * time.Second })
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for f.Requests() == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	_, err := b.Chat(ctx, chatRequest(t, helloBody), nil)
	if !errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v: want context.Canceled", err)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"2", 2 * time.Second},
		{" 1 ", time.Second},
		{"-3", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	} {
		if got := retryAfter(tc.in, now); got != tc.want {
			t.Errorf("retryAfter(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":{"message":"slow down","type":"rate_limit"}}`))
	}))
	t.Cleanup(srv.Close)
	b, err := New(Options{Name: "limited", Type: "openai", URL: srv.URL + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Chat(context.Background(), chatRequest(t, helloBody), nil)
	var up *cascade.UpstreamError
	if !errors.As(err, &up) || up.Status != 429 || up.RetryAfter != time.Second {
		t.Fatalf("err %v, want a 429 with Retry-After 1s", err)
	}
}
