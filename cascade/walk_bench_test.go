package cascade

import (
	"context"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// hitStage answers every request with a copy of one stored answer, as the cache does on a hit,
// and learns nothing.
type hitStage struct{ stored *Answer }

func (hitStage) Name() string { return "cache" }
func (h hitStage) Serve(context.Context, *Request, Sink) (*Answer, error) {
	ans := *h.stored
	ans.Energy = energy.Figure{Saved: 1}
	return &ans, nil
}
func (hitStage) Learn(*Request, *Answer) {}

// learnMiss misses and learns nothing, as the cache does on a miss.
type learnMiss struct{ name string }

func (l learnMiss) Name() string                                         { return l.name }
func (learnMiss) Serve(context.Context, *Request, Sink) (*Answer, error) { return nil, ErrMiss }
func (learnMiss) Learn(*Request, *Answer)                                {}

// backendStage answers with a measured figure, as the neural stage does.
type backendStage struct{ stored *Answer }

func (backendStage) Name() string { return "neural" }
func (b backendStage) Serve(context.Context, *Request, Sink) (*Answer, error) {
	ans := *b.stored
	ans.Energy = energy.Figure{Joules: 1, Low: 1, High: 1, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: "nvml"}
	return &ans, nil
}

// BenchmarkWalk is what the walk itself costs per call (stages that do nothing): a hit of the
// first stage, as a cache hit, and a miss of three stages answered by the fourth, as a neural
// call, with its learning.
func BenchmarkWalk(b *testing.B) {
	router, err := patternRouter("*")
	if err != nil {
		b.Fatal(err)
	}
	stored := TextAnswer(&Request{Chat: ChatRequest{Model: "m"}}, "hello", 1, 0)
	raw := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	for _, bc := range []struct {
		name   string
		stages []Stage
		tracer Tracer
		sink   StageSink
	}{
		{"hit", []Stage{hitStage{stored}, learnMiss{"kv"}, learnMiss{"graph"}, backendStage{stored}}, nil, nil},
		{"hit/streamed", []Stage{hitStage{stored}, learnMiss{"kv"}, learnMiss{"graph"}, backendStage{stored}}, nil, nopSink{}},
		{"miss3", []Stage{learnMiss{"cache"}, learnMiss{"kv"}, learnMiss{"graph"}, backendStage{stored}}, nil, nil},
		{"miss3/traced", []Stage{learnMiss{"cache"}, learnMiss{"kv"}, learnMiss{"graph"}, backendStage{stored}}, nopTracer{}, nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := New(router, bc.stages, Options{StageWatts: 10})
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				req := &Request{Chat: ChatRequest{Model: "m"}, Raw: raw, key: "k", Tracer: bc.tracer}
				var res Result
				learn, err := c.WalkLearnLater(ctx, req, &res, bc.sink)
				if err != nil || res.Answer == nil {
					b.Fatal(err)
				}
				if learn != nil {
					learn()
				}
			}
		})
	}
}

// nopTracer opens spans that record nothing, to show what tracing costs the walk itself.
type nopTracer struct{}

func (nopTracer) StartSpan(ctx context.Context, _ SpanKind, _ string) (context.Context, Span) {
	return ctx, nopSpan{}
}

type nopSpan struct{}

func (nopSpan) End(SpanResult) {}

// nopSink takes a stream and keeps nothing, to show what streaming costs the walk itself.
type nopSink struct{}

func (nopSink) Stage(string)       {}
func (nopSink) Chunk(*Chunk) error { return nil }
