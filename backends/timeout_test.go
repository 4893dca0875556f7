package backends

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
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

// TestBoundsShareATimer: one timer keeps both bounds, and the error names the one that cut the
// call: the silence when it is the shorter, the call's end when that comes first, before the
// reply's headers as well as between the reads of a stream that keeps flowing.
func TestBoundsShareATimer(t *testing.T) {
	cases := []struct {
		name            string
		cfg             fakes.Config
		stream          bool
		timeout, maxDur time.Duration
		want, wantNot   string
	}{
		{name: "silence first, no headers", cfg: fakes.Config{Block: true}, timeout: 100 * time.Millisecond, maxDur: time.Minute,
			want: "the upstream sent nothing within 100ms", wantNot: "did not end"},
		{name: "end first, no headers", cfg: fakes.Config{Block: true}, timeout: time.Minute, maxDur: 100 * time.Millisecond,
			want: "the call did not end within 100ms", wantNot: "sent nothing"},
		{name: "end first, mid-stream", cfg: fakes.Config{Chunks: 50, ChunkDelay: 50 * time.Millisecond}, stream: true,
			timeout: time.Minute, maxDur: 300 * time.Millisecond, want: "the call did not end within 300ms", wantNot: "sent nothing"},
		{name: "silence mid-stream", cfg: fakes.Config{BlockAfter: 2}, stream: true, timeout: 100 * time.Millisecond, maxDur: time.Minute,
			want: "the upstream sent nothing within 100ms", wantNot: "did not end"},
		{name: "end only", cfg: fakes.Config{Block: true}, maxDur: 100 * time.Millisecond, want: "the call did not end within 100ms"},
	}
	for _, d := range dialects {
		for _, tc := range cases {
			t.Run(d.typ+"/"+tc.name, func(t *testing.T) {
				f := d.fake(t, tc.cfg)
				b := newBackend(t, d.typ, f, func(o *Options) { o.Timeout, o.MaxDuration = tc.timeout, tc.maxDur })
				var sink cascade.Sink
				if tc.stream {
					sink = (&collector{}).sink
				}
				_, err := b.Chat(context.Background(), chatRequest(t, helloBody), sink)
				var be *cascade.BackendError
				if !errors.As(err, &be) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
					t.Fatalf("err %v (%T): want a BackendError with a deadline, not a cancellation", err, err)
				}
				if msg := err.Error(); !strings.Contains(msg, tc.want) || (tc.wantNot != "" && strings.Contains(msg, tc.wantNot)) {
					t.Errorf("err %q: want %q", msg, tc.want)
				}
				if !f.WaitCanceled(cancelSeen) {
					t.Error("the fake never saw the call cancelled")
				}
			})
		}
	}
}

// TestSilenceAfterTheTimerFired: the timer that fired during a stream, while it flowed or while
// the client was busy, still cuts a later silence at its bound, not at the call's end.
func TestSilenceAfterTheTimerFired(t *testing.T) {
	cases := []struct {
		name string
		cfg  fakes.Config
		busy time.Duration // the client's handling of the first chunk
	}{
		{name: "after flowing past the timeout", cfg: fakes.Config{Chunks: 20, ChunkDelay: 30 * time.Millisecond, BlockAfter: 10}},
		{name: "after a busy client", cfg: fakes.Config{BlockAfter: 2}, busy: 300 * time.Millisecond},
	}
	for _, d := range dialects {
		for _, tc := range cases {
			t.Run(d.typ+"/"+tc.name, func(t *testing.T) {
				f := d.fake(t, tc.cfg)
				b := newBackend(t, d.typ, f, func(o *Options) { o.Timeout, o.MaxDuration = 100*time.Millisecond, time.Minute })
				n := 0
				sink := func(*cascade.Chunk) error {
					if n++; n == 1 {
						time.Sleep(tc.busy)
					}
					return nil
				}
				_, err := b.Chat(context.Background(), chatRequest(t, helloBody), sink)
				if msg := fmt.Sprint(err); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(msg, "the upstream sent nothing within 100ms") {
					t.Fatalf("err %v: want the silence's", err)
				}
			})
		}
	}
}

// TestMaxDurationWhileClientIsSlow: the call's end cuts the upstream while the caller is still
// handling a chunk, not only at its next read.
func TestMaxDurationWhileClientIsSlow(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.typ, func(t *testing.T) {
			f := d.fake(t, fakes.Config{Chunks: 50, ChunkDelay: 20 * time.Millisecond})
			b := newBackend(t, d.typ, f, func(o *Options) { o.Timeout, o.MaxDuration = time.Minute, 200*time.Millisecond })
			seen := false
			sink := func(*cascade.Chunk) error {
				if !seen {
					seen = f.WaitCanceled(cancelSeen)
					if !seen {
						return errors.New("the fake never saw the call cancelled")
					}
				}
				return nil
			}
			_, err := b.Chat(context.Background(), chatRequest(t, helloBody), sink)
			if !seen || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("cancel seen %v, err %v: want the call cut while the client was busy", seen, err)
			}
		})
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
