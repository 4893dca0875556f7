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
	router, err := patternRouter("*")
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

// kvLike spends a provisional embedding (5 J, 4..7, settling at 6 J) before it misses, or, with
// hit set, answers with it as Spent; each carries the embedding's settle function.
type kvLike struct{ hit bool }

func (kvLike) Name() string { return "kv" }

func (k kvLike) Serve(_ context.Context, req *Request, _ Sink) (*Answer, error) {
	emb := energy.Figure{Joules: 5, Low: 4, High: 7, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: "nvml", Provisional: true}
	settle := func(context.Context) (energy.Figure, error) {
		return energy.Figure{Joules: 6, Low: 6, High: 6, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: "nvml"}, nil
	}
	if !k.hit {
		return nil, SpentSettle(ErrMiss, emb, settle)
	}
	ans := TextAnswer(req, "hi", 1, 0)
	ans.Energy = energy.Figure{Joules: 0.5, Low: 0.5, High: 0.5, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "stage-model"}
	ans.Spent, ans.SpentSettle = emb, settle
	return ans, nil
}

// TestWalkSettlesSpent: an embedding an in-process stage paid for settles with the answer: on a
// kv hit (Answer.SpentSettle) and when kv missed before the neural stage answered
// (SpentError.Settle).
func TestWalkSettlesSpent(t *testing.T) {
	router, err := patternRouter("*")
	if err != nil {
		t.Fatal(err)
	}
	req := func() *Request {
		return &Request{Chat: ChatRequest{Model: "m", Messages: []Message{{Role: "user", Content: []byte(`"q"`)}}}}
	}
	hit := New(router, []Stage{kvLike{hit: true}}, Options{StageWatts: 10, Logger: zerolog.Nop()})
	var res Result
	if err := hit.Walk(context.Background(), req(), &res, nil); err != nil {
		t.Fatal(err)
	}
	if !res.Answer.Energy.Provisional || res.Settle == nil {
		t.Fatalf("kv hit: %+v, settle set %v", res.Answer.Energy, res.Settle != nil)
	}
	if fig, err := res.Settle(context.Background()); err != nil || fig.Provisional || fig.Joules != 6.5 {
		t.Fatalf("kv hit settled %+v, %v: want the 6 J embedding plus 0.5 J, final", fig, err)
	}

	miss := New(router, []Stage{kvLike{}, settlingStage{}}, Options{StageWatts: 10, Logger: zerolog.Nop()})
	res = Result{}
	if err := miss.Walk(context.Background(), req(), &res, nil); err != nil {
		t.Fatal(err)
	}
	if res.Answer.Energy.Joules != 15 || res.Settle == nil {
		t.Fatalf("after a kv miss: %+v", res.Answer.Energy)
	}
	if fig, err := res.Settle(context.Background()); err != nil || fig.Provisional || fig.Joules != 18 {
		t.Fatalf("after a kv miss, settled %+v, %v: want 12 J plus the 6 J embedding, final", fig, err)
	}
}

// WalkLearnLater leaves the learning to its caller: nothing is learned until learn runs, then
// the learner takes the answer once; with no-store, or with no learner before the answering
// stage, there is nothing to learn.
func TestWalkLearnLater(t *testing.T) {
	router, err := patternRouter("*")
	if err != nil {
		t.Fatal(err)
	}
	k := &keeper{}
	c := New(router, []Stage{k, settlingStage{}}, Options{StageWatts: 10, Logger: zerolog.Nop()})
	req := &Request{Chat: ChatRequest{Model: "m", Messages: []Message{{Role: "user", Content: []byte(`"q"`)}}}}
	var res Result
	learn, err := c.WalkLearnLater(context.Background(), req, &res, nil)
	if err != nil || learn == nil || res.Answer == nil {
		t.Fatalf("err %v, learn set %v, answer %v", err, learn != nil, res.Answer)
	}
	if len(k.kept) != 0 {
		t.Fatalf("learned %d answers before learn ran", len(k.kept))
	}
	learn()
	if len(k.kept) != 1 || k.kept[0].Settle != nil {
		t.Fatalf("after learn: %d answers kept", len(k.kept))
	}
	noStore := &Request{Chat: req.Chat, NoStore: true}
	if learn, err := c.WalkLearnLater(context.Background(), noStore, &Result{}, nil); err != nil || learn != nil {
		t.Fatalf("no-store: err %v, learn set %v", err, learn != nil)
	}
	alone := New(router, []Stage{settlingStage{}}, Options{StageWatts: 10, Logger: zerolog.Nop()})
	if learn, err := alone.WalkLearnLater(context.Background(), req, &Result{}, nil); err != nil || learn != nil {
		t.Fatalf("no learner: err %v, learn set %v", err, learn != nil)
	}
}
