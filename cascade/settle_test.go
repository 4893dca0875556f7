package cascade

import (
	"context"
	"testing"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// settlingStage answers with a provisional figure of 10 J and a Settle that gives 12 J, plus
// what it spent outside the process (Spent).
type settlingStage struct{ spent energy.Figure }

func (settlingStage) Name() string { return "neural" }

func (s settlingStage) Serve(_ context.Context, req *Request, _ Sink) (*Answer, error) {
	ans := TextAnswer(req, "hi", 1, 0)
	ans.Energy = energy.Figure{Joules: 10, Low: 8, High: 14, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: "nvml", Provisional: true}
	ans.Spent = s.spent
	ans.Settle = func(context.Context) (energy.Figure, error) {
		return energy.Figure{Joules: 12, Low: 12, High: 12, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: "nvml"}, nil
	}
	return ans, nil
}

// keeper is a learner that keeps what it is given, as the cache does.
type keeper struct{ kept []Answer }

func (*keeper) Name() string { return "cache" }
func (*keeper) Serve(context.Context, *Request, Sink) (*Answer, error) {
	return nil, ErrMiss
}
func (k *keeper) Learn(_ *Request, ans *Answer) { k.kept = append(k.kept, *ans) }

// TestWalkMovesSettle: the walk hands the answering stage's Settle to the result, with what it
// added to the figure, and the answer a learner keeps has none.
func TestWalkMovesSettle(t *testing.T) {
	router, err := NewRouter([]Route{{Name: "b", Patterns: []string{"*"}, Backend: stubBackend{}}})
	if err != nil {
		t.Fatal(err)
	}
	spent := energy.Figure{Joules: 1, Low: 1, High: 1, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "token-model"}
	k := &keeper{}
	c := New(router, []Stage{k, settlingStage{spent: spent}}, Options{StageWatts: 10, Logger: zerolog.Nop()})
	req := &Request{Chat: ChatRequest{Model: "m", Messages: []Message{{Role: "user", Content: []byte(`"q"`)}}}}
	var res Result
	if err := c.Walk(context.Background(), req, &res, nil); err != nil {
		t.Fatal(err)
	}
	if res.Settle == nil || res.Answer.Settle != nil {
		t.Fatalf("result's settle set %v, answer's %v: want it moved to the result", res.Settle != nil, res.Answer.Settle != nil)
	}
	if len(k.kept) != 1 || k.kept[0].Settle != nil {
		t.Fatalf("the learner kept %d answers, the first with a settle: %v", len(k.kept), len(k.kept) == 1 && k.kept[0].Settle != nil)
	}
	if !res.Answer.Energy.Provisional || res.Answer.Energy.Joules != 11 {
		t.Fatalf("answer's figure %+v: want a provisional 11 J", res.Answer.Energy)
	}
	fig, err := res.Settle(context.Background())
	if err != nil || fig.Joules != 13 || fig.Provisional || fig.Grade != energy.Estimated || fig.Method != "nvml+token-model" {
		t.Fatalf("settled %+v, %v: want the stage's 12 J plus the 1 J spent, final", fig, err)
	}
}
