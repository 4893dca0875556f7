package energy

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestPlusBoundsSplitInputs: Plus adds the bounds, the prompt/completion parts and the tokens,
// joins the splits, and lists both figures' inputs in order without sharing a backing array.
func TestPlusBoundsSplitInputs(t *testing.T) {
	a := SplitTokens(StageModel(2*time.Second, 10, "in-process-stage"), 30, 10, 0.1)
	b := Figure{Joules: 4, Low: 1, High: 9, Grade: Measured, Coverage: CoverageWhole, Method: "rapl",
		PromptJoules: 1, CompletionJoules: 3, PromptTokens: 5, CompletionTokens: 6, Split: "phases",
		Inputs: ListOf(Inputs{Kind: KindSpan, Version: "meter-1", WallNS: 7})}
	if a.Low != 0 || a.High != 30 || a.Joules != 20 {
		t.Fatalf("stage model: %v J in [%v, %v], want 20 in [0, 30]", a.Joules, a.Low, a.High)
	}
	if a.PromptJoules != 20*3/13.0 || a.PromptJoules+a.CompletionJoules != 20 || a.Split != SplitTokenWeight {
		t.Fatalf("token-weight split of 30+10 tokens: %v + %v (%s)", a.PromptJoules, a.CompletionJoules, a.Split)
	}
	s := a.Plus(b)
	if s.Joules != 24 || s.Low != 1 || s.High != 39 || s.PromptTokens != 35 || s.CompletionTokens != 16 ||
		s.PromptJoules != a.PromptJoules+1 || s.CompletionJoules != a.CompletionJoules+3 || s.Split != "token-weight+phases" {
		t.Fatalf("Plus = %+v", s)
	}
	ins := s.Inputs.All()
	if len(ins) != 2 || ins[0].Kind != KindStage || ins[1].WallNS != 7 {
		t.Fatalf("inputs %+v", ins)
	}
	if s2 := s.Plus(b); s2.Inputs.Len() != 3 || s.Inputs.Len() != 2 || a.Inputs.Len() != 1 {
		t.Fatalf("inputs shared: %d, %d, %d", s2.Inputs.Len(), s.Inputs.Len(), a.Inputs.Len())
	}
	p, c := s.PerToken()
	if p != s.PromptJoules/35 || c != s.CompletionJoules/16 {
		t.Fatalf("PerToken = %v, %v", p, c)
	}
	if f := SplitTokens(Figure{Joules: 3}, 0, 0, 0.1); f.Split != "" || f.PromptJoules != 0 {
		t.Fatalf("no tokens split: %+v", f)
	}
}

// TestFigureJSON: the ledger's encoding keeps bounds, split and inputs, and leaves them out of
// a figure without them, so older lines keep their bytes.
func TestFigureJSON(t *testing.T) {
	old, err := json.Marshal(Figure{Joules: 1, Grade: Estimated, Coverage: CoverageWhole})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(old), "inputs") || strings.Contains(string(old), "joules_low") || strings.Contains(string(old), "split") {
		t.Fatalf("a figure without them writes %s", old)
	}
	f := SplitTokens(StageModel(time.Millisecond, 10, "in-process-stage"), 3, 4, 0.1)
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	var g Figure
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if g.Low != f.Low || g.High != f.High || g.PromptJoules != f.PromptJoules || g.Inputs.Len() != 1 || g.Inputs.All()[0] != f.Inputs.All()[0] {
		t.Fatalf("round trip %s gave %+v", b, g)
	}
	if b2, _ := json.Marshal(g); string(b2) != string(b) {
		t.Fatalf("not byte-stable:\n%s\n%s", b, b2)
	}
}

func TestRoundedKeepsBounds(t *testing.T) {
	f := Figure{Joules: 0.1 + 0.2, Low: 0.3 - 1e-12, High: 0.30000000049}.Rounded()
	if !(f.Low <= f.Joules && f.Joules <= f.High) {
		t.Fatalf("rounded: %v ≤ %v ≤ %v", f.Low, f.Joules, f.High)
	}
}
