package proxy

import (
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// The page's joules per completion token is the eoc chunk's: the figure's completion part over
// its completion tokens (Figure.PerToken), not the whole figure, prompt included.
func TestUIPerTokenIsTheChunks(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	u := newUIStats(now)
	measured := energy.Figure{Joules: 10, Grade: energy.Measured, PromptJoules: 6, CompletionJoules: 4, PromptTokens: 30, CompletionTokens: 2}
	estimated := energy.Figure{Joules: 9, Grade: energy.Estimated, PromptJoules: 3, CompletionJoules: 6, PromptTokens: 5, CompletionTokens: 3}
	for _, fig := range []energy.Figure{measured, estimated} {
		c := &Call{Model: "m", Backend: "b", answered: true, tokens: fig.CompletionTokens, Stage: "neural", Status: 200}
		u.observe(c, "m", fig, "", now)
	}
	d := u.snapshot(now)
	if len(d.Backends) != 1 {
		t.Fatalf("backends: %+v", d.Backends)
	}
	p := d.Backends[0]
	_, wantMeasured := measured.PerToken()
	_, wantEstimated := estimated.PerToken()
	if p.JoulesPerToken == nil || *p.JoulesPerToken != wantMeasured {
		t.Errorf("measured J per completion token %v, want the chunk's %v", deref(p.JoulesPerToken), wantMeasured)
	}
	if p.EstimatedPerToken == nil || *p.EstimatedPerToken != wantEstimated {
		t.Errorf("estimated J per completion token %v, want the chunk's %v", deref(p.EstimatedPerToken), wantEstimated)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
