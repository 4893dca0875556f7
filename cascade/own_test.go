package cascade

import (
	"context"
	"testing"
	"unsafe"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// ownStage answers with an answer from Request.NewAnswer and no figure, as the cache does on a
// hit, or misses after filling one (miss); zero records whether the answer it got was zero.
type ownStage struct {
	name string
	miss bool
	zero *bool
}

func (s ownStage) Name() string { return s.name }
func (s ownStage) Serve(_ context.Context, req *Request, _ Sink) (*Answer, error) {
	ans := req.NewAnswer()
	if s.zero != nil {
		*s.zero = ans.ID == "" && ans.Energy.IsZero() && !ans.Complete
	}
	ans.ID, ans.Model, ans.Complete = "chatcmpl-own", req.Chat.Model, true
	ans.Energy = energy.Figure{Saved: 2}
	if s.miss {
		return nil, ErrMiss
	}
	return ans, nil
}

// ownLearner is an ownStage that learns, as the cache is.
type ownLearner struct{ ownStage }

func (ownLearner) Learn(*Request, *Answer) {}

// A hit of the first stage and its estimate's inputs take one allocation, the walk's; its figure
// is StageModel's.
func TestHitAnswerIsOneAllocation(t *testing.T) {
	router, err := patternRouter("*")
	if err != nil {
		t.Fatal(err)
	}
	c := New(router, []Stage{ownLearner{ownStage{name: "cache"}}, &keeper{}, settlingStage{}}, Options{StageWatts: 10})
	req := &Request{Chat: ChatRequest{Model: "m"}, key: "k"}
	var res Result
	walk := func() {
		res = Result{}
		if err := c.Walk(context.Background(), req, &res, nil); err != nil || res.Stage != "cache" {
			t.Fatalf("stage %q, err %v", res.Stage, err)
		}
	}
	walk()
	f := res.Answer.Energy
	if req.own == nil || res.Answer != &req.own.ans || f.Inputs.Len() != 1 || !inBox(&f.Inputs.All()[0], &req.own.inputs) {
		t.Fatalf("the hit's answer and inputs are not one allocation")
	}
	want := energy.StageModel(res.Attempts[0].Duration, 10, "in-process-stage")
	want.Saved = 2
	if f.Joules != want.Joules || f.Low != want.Low || f.High != want.High || f.Method != want.Method || f.Grade != want.Grade ||
		f.Saved != 2 || f.Inputs.All()[0] != want.Inputs.All()[0] {
		t.Errorf("figure %+v, want %+v", f, want)
	}
	if raceEnabled {
		return
	}
	if n := testing.AllocsPerRun(100, walk); n != 1 {
		t.Errorf("a hit's walk allocates %v objects, want 1", n)
	}
}

// A stage after a learner gets an answer of its own (a learner may keep a copy of it and of its
// figure), and so does a stage after one that took the result's and missed: a zero one.
func TestNewAnswerOnlyWhereNoLearnerTakesIt(t *testing.T) {
	router, err := patternRouter("*")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		stages func(zero *bool) []Stage
	}{
		{"after a learner", func(zero *bool) []Stage {
			return []Stage{&keeper{}, ownStage{name: "graph", zero: zero}}
		}},
		{"after a miss that took it", func(zero *bool) []Stage {
			return []Stage{ownStage{name: "dirty", miss: true}, ownStage{name: "graph", zero: zero}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var zero bool
			stages := tc.stages(&zero)
			c := New(router, stages, Options{StageWatts: 10})
			var res Result
			req := &Request{Chat: ChatRequest{Model: "m"}, key: "k"}
			if err := c.Walk(context.Background(), req, &res, nil); err != nil || res.Stage != "graph" {
				t.Fatalf("stage %q, err %v", res.Stage, err)
			}
			own := req.own != nil && res.Answer == &req.own.ans
			if own || !zero {
				t.Errorf("answer is the walk's own: %v; was zero: %v", own, zero)
			}
			if k, ok := stages[0].(*keeper); ok && (len(k.kept) != 1 || k.kept[0].Energy.Inputs.Len() != 1 ||
				req.own != nil && inBox(&k.kept[0].Energy.Inputs.All()[0], &req.own.inputs)) {
				t.Errorf("the learner kept %+v", k.kept)
			}
		})
	}
}

// inBox reports whether in lies in box.
func inBox(in *energy.Inputs, box *energy.InputBox) bool {
	p, b := uintptr(unsafe.Pointer(in)), uintptr(unsafe.Pointer(box))
	return b <= p && p < b+unsafe.Sizeof(*box)
}
