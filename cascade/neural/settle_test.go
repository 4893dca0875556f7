package neural

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/meter"
)

// fakeSpan is a meter span whose End gives a provisional figure and whose Settled gives a final
// one, as the meter does for a GPU call before NVML's counter updates; with wait set, Settled
// waits for ctx instead.
type fakeSpan struct {
	provisional, settled energy.Figure
	wait                 bool
	settles              *int
	mu                   *sync.Mutex
}

func (*fakeSpan) Mark() {}

func (s *fakeSpan) End(meter.Work) energy.Figure { return s.provisional }

func (s *fakeSpan) Settled(ctx context.Context) (energy.Figure, error) {
	s.mu.Lock()
	*s.settles++
	s.mu.Unlock()
	if s.wait || !s.provisional.Provisional {
		if s.wait {
			<-ctx.Done()
			return s.provisional, ctx.Err()
		}
		return s.provisional, nil
	}
	return s.settled, nil
}

// gpuFigure is a measured figure of j joules with bounds; provisional or not.
func gpuFigure(j, low, high float64, provisional bool) energy.Figure {
	return energy.Figure{Joules: j, Low: low, High: high, Grade: energy.Measured, Coverage: energy.CoverageWhole,
		Method: "rapl+nvml", Provisional: provisional}
}

// fakeBegin hands out spans: provisional figures of 10 J (8..14) that settle at 12 J, or final
// ones of 5 J when final is set.
func fakeBegin(final, wait bool) (func(string) meterSpan, *int) {
	n := new(int)
	mu := &sync.Mutex{}
	return func(string) meterSpan {
		if final {
			return &fakeSpan{provisional: gpuFigure(5, 5, 5, false), settles: n, mu: mu}
		}
		return &fakeSpan{provisional: gpuFigure(10, 8, 14, true), settled: gpuFigure(12, 12, 12, false), wait: wait, settles: n, mu: mu}
	}, n
}

// TestSettleSumsTheAttempts: an answer made of provisional attempts carries a Settle that sums
// the attempts' settled figures (a failed attempt's too), each span asked once; a final answer
// carries none.
func TestSettleSumsTheAttempts(t *testing.T) {
	var calls []string
	st := groupStage(t, scripted{name: "a", err: &cascade.UpstreamError{Backend: "a", Status: 503, Message: "busy"}, calls: &calls},
		scripted{name: "b", calls: &calls})
	begin, settles := fakeBegin(false, false)
	st.begin = begin
	ans, err := st.Serve(context.Background(), &cascade.Request{Chat: cascade.ChatRequest{Model: "m"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !ans.Energy.Provisional || ans.Energy.Joules != 20 || ans.Settle == nil {
		t.Fatalf("answer's figure %+v, settle set %v: want a provisional 20 J with a Settle", ans.Energy, ans.Settle != nil)
	}
	fig, err := ans.Settle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if fig.Provisional || fig.Joules != 24 || fig.Low != 24 || fig.High != 24 || *settles != 2 {
		t.Fatalf("settled %+v after %d Settled calls; want a final 24 J from 2", fig, *settles)
	}
	if fig.Joules < ans.Energy.Low || fig.Joules > ans.Energy.High {
		t.Errorf("settled %v J outside the provisional bounds [%v, %v]", fig.Joules, ans.Energy.Low, ans.Energy.High)
	}

	final := groupStage(t, scripted{name: "a", calls: &calls})
	final.begin, _ = fakeBegin(true, false)
	ans, err = final.Serve(context.Background(), &cascade.Request{Chat: cascade.ChatRequest{Model: "m"}}, nil)
	if err != nil || ans.Settle != nil || ans.Energy.Provisional {
		t.Fatalf("a final figure: err %v, figure %+v, settle set %v", err, ans.Energy, ans.Settle != nil)
	}
}

// TestSettleOnAFailedCall: the answer that goes with an error settles too.
func TestSettleOnAFailedCall(t *testing.T) {
	var calls []string
	st := groupStage(t, scripted{name: "a", err: &cascade.UpstreamError{Backend: "a", Status: 400, Message: "bad"}, calls: &calls})
	st.begin, _ = fakeBegin(false, false)
	ans, err := st.Serve(context.Background(), &cascade.Request{Chat: cascade.ChatRequest{Model: "m"}}, nil)
	if err == nil || ans == nil || ans.Settle == nil {
		t.Fatalf("err %v, answer %+v", err, ans)
	}
	if fig, err := ans.Settle(context.Background()); err != nil || fig.Joules != 12 || fig.Provisional {
		t.Fatalf("settled %+v, %v", fig, err)
	}
}

// TestSettleWaitEnds: when the wait ends first, Settle returns the provisional figure, still
// marked so, with ctx's error.
func TestSettleWaitEnds(t *testing.T) {
	var calls []string
	st := groupStage(t, scripted{name: "a", calls: &calls})
	st.begin, _ = fakeBegin(false, true)
	ans, err := st.Serve(context.Background(), &cascade.Request{Chat: cascade.ChatRequest{Model: "m"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fig, err := ans.Settle(ctx)
	if !errors.Is(err, context.Canceled) || !fig.Provisional || fig.Joules != 10 {
		t.Fatalf("settled %+v, %v; want the provisional 10 J and context.Canceled", fig, err)
	}
}

// embedOnly embeds every text as a one-float vector.
type embedOnly struct{ chatOnly }

func (embedOnly) Embed(_ context.Context, req cascade.EmbedRequest) (cascade.Embeddings, error) {
	e := cascade.Embeddings{PromptTokens: len(req.Input)}
	for range req.Input {
		e.Vectors = append(e.Vectors, []float32{1})
	}
	return e, nil
}

func TestSettleEmbeddings(t *testing.T) {
	router, err := routing.New([]routing.Route{{Name: "up", Type: "custom", Patterns: []string{"*"}, Backend: embedOnly{}}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := New(router, nil)
	st.begin, _ = fakeBegin(false, false)
	e, err := st.ServeEmbed(context.Background(), &cascade.EmbedCall{Req: cascade.EmbedRequest{Model: "m", Input: []string{"a"}}})
	if err != nil || e.Settle == nil || !e.Energy.Provisional {
		t.Fatalf("err %v, figure %+v, settle set %v", err, e.Energy, e.Settle != nil)
	}
	if fig, err := e.Settle(context.Background()); err != nil || fig.Joules != 12 || fig.Provisional {
		t.Fatalf("settled %+v, %v", fig, err)
	}
}

// vecBackend embeds every text as {1, 2}.
type vecBackend struct{ chatOnly }

func (vecBackend) Embed(_ context.Context, req cascade.EmbedRequest) (cascade.Embeddings, error) {
	vs := make([][]float32, len(req.Input))
	for i := range vs {
		vs[i] = []float32{1, 2}
	}
	return cascade.Embeddings{Vectors: vs, PromptTokens: 1}, nil
}

// TestEmbedderSettles: the embedder kv uses returns its span's settle function with a
// provisional figure, so the answer the embedding helps to find can settle it; none with a final
// figure.
func TestEmbedderSettles(t *testing.T) {
	e, err := NewEmbedder("gpu", "id", "m", vecBackend{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	begin, settles := fakeBegin(false, false)
	e.begin = begin
	vs, fig, settle, err := e.EmbedSettle(context.Background(), []string{"a", "b"})
	if err != nil || len(vs) != 2 || !fig.Provisional || fig.Joules != 10 || settle == nil {
		t.Fatalf("%v %+v settle set %v: %v", vs, fig, settle != nil, err)
	}
	if got, err := settle(context.Background()); err != nil || got.Provisional || got.Joules != 12 || *settles != 1 {
		t.Fatalf("settled %+v, %v (%d settles)", got, err, *settles)
	}
	e.begin, _ = fakeBegin(true, false)
	if _, fig, settle, err := e.EmbedSettle(context.Background(), []string{"a"}); err != nil || fig.Provisional || settle != nil {
		t.Fatalf("a final figure %+v with settle set %v: %v", fig, settle != nil, err)
	}
}
