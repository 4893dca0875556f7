package neural

import (
	"context"
	"errors"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/meter"
)

// backend answers with fixed usage, or fails.
type backend struct {
	completion int
	err        error
}

func (b backend) Chat(_ context.Context, req *cascade.Request, _ cascade.Sink) (*cascade.Answer, error) {
	if b.err != nil {
		return nil, b.err
	}
	ans := cascade.TextAnswer(req, "ok", b.completion, 0)
	ans.Usage.PromptTokens = 10
	return ans, nil
}

// observed records what the stage reported.
type observed struct {
	models []string
	figs   []energy.Figure
	tokens []int
}

func (o *observed) Observe(model string, fig energy.Figure, tokens int) {
	o.models, o.figs, o.tokens = append(o.models, model), append(o.figs, fig), append(o.tokens, tokens)
}

func stage(t testing.TB, b cascade.Backend, obs Observer) *Stage {
	t.Helper()
	router, err := routing.New([]routing.Route{{Name: "up", Type: "openai", Patterns: []string{"*"}, Backend: b}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := meter.New(meter.Options{RAPL: "off", NVML: "off",
		TokenModels: []meter.TokenModel{{Patterns: []string{"*"}, JPerPrompt: 1, JPerCompletion: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return New(router, m, WithObserver(obs))
}

func TestObserver(t *testing.T) {
	obs := &observed{}
	req := &cascade.Request{Chat: cascade.ChatRequest{Model: "llama3"}}
	ans, err := stage(t, backend{completion: 5}, obs).Serve(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(obs.figs) != 1 || obs.models[0] != "llama3" || obs.tokens[0] != 5 || obs.figs[0] != ans.Energy {
		t.Fatalf("observed %+v, answer's figure %+v", obs, ans.Energy)
	}
	if obs.figs[0].Joules != 10+2*5 {
		t.Errorf("observed %v J, want the token model's 20", obs.figs[0].Joules)
	}

	// A failed call is not a cost of answering.
	failed := &observed{}
	if _, err := stage(t, backend{err: errors.New("down")}, failed).Serve(context.Background(), req, nil); err == nil {
		t.Fatal("no error")
	}
	if len(failed.figs) != 0 {
		t.Errorf("a failed call was observed: %+v", failed)
	}
}

// scripted fails with err, after writing chunks to the sink when it streams, or answers.
type scripted struct {
	name   string
	err    error
	chunks int
	calls  *[]string
}

func (b scripted) Chat(_ context.Context, req *cascade.Request, sink cascade.Sink) (*cascade.Answer, error) {
	*b.calls = append(*b.calls, b.name)
	for range b.chunks {
		if sink != nil {
			if err := sink(&cascade.Chunk{ID: "c"}); err != nil {
				return nil, err
			}
		}
	}
	if b.err != nil {
		return nil, b.err
	}
	ans := cascade.TextAnswer(req, "from "+b.name, 5, 0)
	ans.Usage.PromptTokens = 10
	return ans, nil
}

func groupStage(t *testing.T, bs ...scripted) *Stage {
	t.Helper()
	routes := make([]routing.Route, len(bs))
	for i, b := range bs {
		routes[i] = routing.Route{Name: b.name, Type: "openai", Patterns: []string{"*"}, Backend: b}
	}
	router, err := routing.New(routes, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := meter.New(meter.Options{RAPL: "off", NVML: "off",
		TokenModels: []meter.TokenModel{{Patterns: []string{"*"}, JPerPrompt: 1, JPerCompletion: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return New(router, m)
}

func TestRetriesBeforeTheFirstChunk(t *testing.T) {
	refused := &cascade.BackendError{Backend: "a", Err: syscall.ECONNREFUSED}
	tests := []struct {
		name     string
		firstErr error
		chunks   int  // the first backend writes these before failing
		stream   bool // with a sink
		retried  bool
		outcome  string
	}{
		{"refused", refused, 0, false, true, "unreachable"},
		{"503", &cascade.UpstreamError{Backend: "a", Status: 503, Message: "busy"}, 0, true, true, "status"},
		{"429", &cascade.UpstreamError{Backend: "a", Status: 429, Message: "slow down"}, 0, false, true, "status"},
		{"timeout", &cascade.BackendError{Backend: "a", Err: context.DeadlineExceeded}, 0, true, true, "timeout"},
		{"400 is the client's", &cascade.UpstreamError{Backend: "a", Status: 400, Message: "bad"}, 0, false, false, "status"},
		{"404 is the client's", &cascade.UpstreamError{Backend: "a", Status: 404, Message: "no model"}, 0, true, false, "status"},
		{"cut after the first chunk", &cascade.BackendError{Backend: "a", Err: io.ErrUnexpectedEOF}, 1, true, false, "error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var calls []string
			st := groupStage(t, scripted{name: "a", err: tc.firstErr, chunks: tc.chunks, calls: &calls}, scripted{name: "b", calls: &calls})
			var sink cascade.Sink
			if tc.stream {
				sink = func(*cascade.Chunk) error { return nil }
			}
			req := &cascade.Request{Chat: cascade.ChatRequest{Model: "m"}}
			ans, err := st.Serve(context.Background(), req, sink)
			if ans == nil || len(ans.Attempts) == 0 || ans.Attempts[0].Outcome != tc.outcome {
				t.Fatalf("answer %+v", ans)
			}
			if !tc.retried {
				if !errors.Is(err, tc.firstErr) || len(calls) != 1 || len(ans.Attempts) != 1 || ans.Backend != "a" {
					t.Fatalf("err %v, calls %v, attempts %+v: want a's error and no retry", err, calls, ans.Attempts)
				}
				return
			}
			if err != nil || len(calls) != 2 || ans.Backend != "b" || len(ans.Attempts) != 2 || ans.Attempts[1].Outcome != "ok" {
				t.Fatalf("err %v, calls %v, answer from %q, attempts %+v", err, calls, ans.Backend, ans.Attempts)
			}
			// Both attempts are billed: the failed one cost nothing by tokens here, the answer
			// 10 prompt + 5 completion tokens at 1 and 2 J.
			sum := ans.Attempts[0].Energy.Plus(ans.Attempts[1].Energy)
			if ans.Energy.Joules != sum.Joules || ans.Energy.Joules != 20 {
				t.Fatalf("figure %v J, attempts sum %v J", ans.Energy.Joules, sum.Joules)
			}
		})
	}
}

func TestClientGoneIsNotRetried(t *testing.T) {
	var calls []string
	st := groupStage(t, scripted{name: "a", err: &cascade.BackendError{Backend: "a", Err: context.Canceled}, calls: &calls}, scripted{name: "b", calls: &calls})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := st.Serve(ctx, &cascade.Request{Chat: cascade.ChatRequest{Model: "m"}}, nil)
	if err == nil || len(calls) != 1 {
		t.Fatalf("err %v, calls %v", err, calls)
	}
}

// TestShortRetryAfterOnTheLastBackend: a 429 from the last backend with a Retry-After of at
// most MaxRetryAfter is waited out and that backend called once more; a long one is returned.
func TestShortRetryAfterOnTheLastBackend(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration
		calls int
	}{
		{"short", 10 * time.Millisecond, 2},
		{"long", time.Minute, 1},
		{"none", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls []string
			st := groupStage(t, scripted{name: "a", err: &cascade.UpstreamError{Backend: "a", Status: 429, Message: "slow down", RetryAfter: tc.after}, calls: &calls})
			_, err := st.Serve(context.Background(), &cascade.Request{Chat: cascade.ChatRequest{Model: "m"}}, nil)
			var up *cascade.UpstreamError
			if !errors.As(err, &up) || up.Status != 429 || len(calls) != tc.calls {
				t.Fatalf("err %v, calls %v; want a 429 after %d calls", err, calls, tc.calls)
			}
		})
	}
}
