package neural

import (
	"context"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

// fixed answers with a copy of one answer.
type fixed struct{ ans *cascade.Answer }

func (f fixed) Chat(context.Context, *cascade.Request, cascade.Sink) (*cascade.Answer, error) {
	ans := *f.ans
	return &ans, nil
}

// BenchmarkServe is what the stage adds to one backend call (a backend that does nothing, a
// meter span that settles), whole.
func BenchmarkServe(b *testing.B) {
	req := &cascade.Request{Chat: cascade.ChatRequest{Model: "llama3"}}
	s := stage(b, fixed{cascade.TextAnswer(req, "ok", 1, 0)}, &discard{})
	s.begin, _ = fakeBegin(false, false)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Serve(ctx, req, nil); err != nil {
			b.Fatal(err)
		}
	}
}

type discard struct{}

func (*discard) Observe(string, energy.Figure, int) {}
