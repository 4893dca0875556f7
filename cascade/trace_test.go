package cascade

import (
	"context"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// recTracer records the spans a walk opens and how they end.
type recTracer struct {
	mu    sync.Mutex
	spans []*recSpan
}

type recSpan struct {
	kind SpanKind
	name string
	res  *SpanResult
}

func (r *recTracer) StartSpan(ctx context.Context, kind SpanKind, name string) (context.Context, Span) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &recSpan{kind: kind, name: name}
	r.spans = append(r.spans, s)
	return ctx, s
}

func (s *recSpan) End(r SpanResult) {
	if s.res != nil {
		panic("span ended twice")
	}
	s.res = &r
}

type fixedStage struct {
	name string
	miss bool
}

func (f fixedStage) Name() string { return f.name }
func (f fixedStage) Serve(_ context.Context, req *Request, _ Sink) (*Answer, error) {
	if f.miss {
		return nil, ErrMiss
	}
	t := "hi"
	return &Answer{Model: req.Chat.Model, Choices: []Choice{{Message: AnswerMessage{Role: "assistant", Content: &t}, FinishReason: "stop"}},
		Usage: &Usage{CompletionTokens: 1}, Complete: true}, nil
}

// A walk opens one span per stage it tries and ends each once: a miss as "miss" with no error,
// the answer as "hit" with the stage's figure.
func TestWalkOpensAStageSpanPerStage(t *testing.T) {
	router, err := patternRouter("*")
	if err != nil {
		t.Fatal(err)
	}
	c := New(router, []Stage{fixedStage{name: "cache", miss: true}, fixedStage{name: "graph"}}, Options{StageWatts: 10, Logger: zerolog.Nop()})
	tr := &recTracer{}
	req := &Request{Chat: ChatRequest{Model: "m", Messages: []Message{{Role: "user", Content: []byte(`"q"`)}}}, Tracer: tr}
	var res Result
	if err := c.Walk(context.Background(), req, &res, nil); err != nil {
		t.Fatal(err)
	}
	if len(tr.spans) != 2 {
		t.Fatalf("%d spans for 2 stages", len(tr.spans))
	}
	miss, hit := tr.spans[0], tr.spans[1]
	if miss.kind != SpanStage || miss.name != "cache" || miss.res == nil || miss.res.Outcome != "miss" || miss.res.Err != nil {
		t.Errorf("miss span: %+v %+v", miss, miss.res)
	}
	if hit.name != "graph" || hit.res == nil || hit.res.Outcome != "hit" || hit.res.Model != "m" || hit.res.Energy.Joules <= 0 ||
		hit.res.Energy.Method != "stage-model" || hit.res.Usage == nil || hit.res.Usage.CompletionTokens != 1 {
		t.Errorf("hit span: %+v", hit.res)
	}
}

// Without a tracer, opening and ending a span allocates nothing.
func TestUntracedSpanIsFree(t *testing.T) {
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		_, s := StartSpan(ctx, nil, SpanStage, "cache")
		s.End(SpanResult{Outcome: "miss"})
	}); n != 0 {
		t.Errorf("%v allocations per untraced span", n)
	}
}

// A traced stage's miss or answer costs its span result no allocation.
func TestStageResultAllocs(t *testing.T) {
	ans := &Answer{Backend: "b"}
	if n := testing.AllocsPerRun(100, func() {
		_ = stageResult("m", nil, ErrMiss)
		_ = stageResult("m", ans, nil)
	}); n != 0 {
		t.Errorf("%v allocations per stage result", n)
	}
}
