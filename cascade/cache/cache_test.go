package cache

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

// countingStage answers every request; complete says whether its answers ended normally.
type countingStage struct {
	calls    int
	complete bool
}

func (s *countingStage) Name() string { return "model" }
func (s *countingStage) Serve(context.Context, *cascade.Request, cascade.Sink) (*cascade.Answer, error) {
	s.calls++
	t := "answer"
	return &cascade.Answer{ID: "orig", Choices: []cascade.Choice{{Message: cascade.AnswerMessage{Role: "assistant", Content: &t}, FinishReason: "stop"}},
		Complete: s.complete, Backend: "b", Energy: energy.Figure{Joules: 2.5, Grade: energy.Estimated, Method: "token-model"}}, nil
}

type anyBackend struct{}

func (anyBackend) Chat(context.Context, *cascade.Request, cascade.Sink) (*cascade.Answer, error) {
	return nil, errors.New("unused")
}

func walk(t *testing.T, c *cascade.Cascade, req cascade.Request) string {
	t.Helper()
	var res cascade.Result
	if err := c.Walk(context.Background(), &req, &res, nil); err != nil {
		t.Fatal(err)
	}
	return res.Stage
}

func TestCacheControls(t *testing.T) {
	router, _ := routing.New([]routing.Route{{Name: "b", Patterns: []string{"*"}, Backend: anyBackend{}}}, routing.Options{})
	raw := json.RawMessage(`{"model":"m","messages":[{"role":"user","content":"q"}]}`)
	req := func(noCache, noStore bool) cascade.Request {
		r := cascade.Request{Raw: raw, NoCache: noCache, NoStore: noStore}
		r.Chat.Model = "m"
		return r
	}
	tests := []struct {
		name     string
		complete bool
		first    cascade.Request
		second   cascade.Request
		want     string // stage of the second call
	}{
		{"repeat hits", true, req(false, false), req(false, false), "cache"},
		{"no-store does not store", true, req(false, true), req(false, false), "model"},
		{"no-cache skips the lookup", true, req(false, false), req(true, false), "model"},
		{"no-cache still stores", true, req(true, false), req(false, false), "cache"},
		{"incomplete is not stored", false, req(false, false), req(false, false), "model"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := New(100, time.Hour)
			model := &countingStage{complete: tc.complete}
			c := cascade.New(router, []cascade.Stage{st, model}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
			walk(t, c, tc.first)
			if got := walk(t, c, tc.second); got != tc.want {
				t.Fatalf("second call served by %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHitCarriesSavedAndFreshID(t *testing.T) {
	router, _ := routing.New([]routing.Route{{Name: "b", Patterns: []string{"*"}, Backend: anyBackend{}}}, routing.Options{})
	st := New(100, time.Hour)
	c := cascade.New(router, []cascade.Stage{st, &countingStage{complete: true}}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	mk := func() *cascade.Request {
		r := &cascade.Request{Raw: json.RawMessage(`{"model":"m","messages":[]}`)}
		r.Chat.Model = "m"
		return r
	}
	var first, second cascade.Result
	if err := c.Walk(context.Background(), mk(), &first, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Walk(context.Background(), mk(), &second, nil); err != nil {
		t.Fatal(err)
	}
	e := second.Answer.Energy
	if second.Stage != "cache" || e.Saved != 2.5 || e.Method != "stage-model" || e.Grade != energy.Estimated || e.Joules >= 2.5 {
		t.Fatalf("hit energy %+v", e)
	}
	if second.Answer.ID == first.Answer.ID {
		t.Fatal("a hit reused the original completion id")
	}
	if first.Answer.Backend == "" || second.Answer.Backend != "" {
		t.Errorf("backend %q then %q: a hit calls no backend and must name none", first.Answer.Backend, second.Answer.Backend)
	}
	if first.Answer.Energy.Joules != 2.5 {
		t.Fatal("a hit changed the stored answer")
	}
}

func TestExpiry(t *testing.T) {
	// A TTL of 500 ms: "right after storing" must hold on a loaded machine, where the goroutine
	// may wait tens of milliseconds for a core between two statements.
	st := New(10, 500*time.Millisecond)
	req := &cascade.Request{Raw: json.RawMessage(`{}`)}
	st.Learn(req, &cascade.Answer{Complete: true})
	if _, err := st.Serve(context.Background(), req, nil); err != nil {
		t.Fatal("no hit right after storing")
	}
	time.Sleep(600 * time.Millisecond)
	if _, err := st.Serve(context.Background(), req, nil); !errors.Is(err, cascade.ErrMiss) {
		t.Fatal("an expired entry still hits")
	}
}

// A hit serves the learned answer's text, usage and timings under an id and a time of its own,
// with what the answer cost as saved and no backend call; the entry keeps none of the rest.
func TestHitServesWhatTheEntryKeeps(t *testing.T) {
	for _, tc := range []struct {
		name string
		fig  energy.Figure
		want float64
	}{
		{"measured", energy.Figure{Joules: 2.5, Low: 2, High: 3, Grade: energy.Measured, Method: "rapl",
			Inputs: energy.ListOf(energy.Inputs{Kind: energy.KindSpan, Version: "meter-3", WallNS: 7})}, 2.5},
		{"saved before", energy.Figure{Joules: 0.1, Saved: 4, Grade: energy.Estimated, Method: "stage-model"}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(10, time.Hour)
			req := &cascade.Request{Raw: json.RawMessage(`{"model":"m"}`)}
			text := "answer"
			ans := &cascade.Answer{ID: "orig", Model: "m", Created: 1, SystemFingerprint: "fp", Backend: "b", Complete: true, Streamed: true,
				Energy: tc.fig, Usage: &cascade.Usage{PromptTokens: 3, CompletionTokens: 1, TotalTokens: 4}, Timings: &cascade.Timings{PredictedN: 1},
				Choices:  []cascade.Choice{{Message: cascade.AnswerMessage{Role: "assistant", Content: &text}, FinishReason: "stop"}},
				Attempts: []cascade.BackendAttempt{{Backend: "b", Outcome: "ok", Status: 200, Energy: tc.fig}}}
			s.Learn(req, ans)
			if ans.Energy.Inputs.Len() != tc.fig.Inputs.Len() || ans.Backend != "b" || len(ans.Attempts) != 1 || ans.ID != "orig" {
				t.Errorf("the learned answer changed: %+v", ans)
			}
			hit, err := s.Serve(context.Background(), req, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := cascade.Answer{ID: hit.ID, Model: "m", Created: hit.Created, SystemFingerprint: "fp", Choices: ans.Choices, Usage: ans.Usage,
				Timings: ans.Timings, Energy: energy.Figure{Saved: tc.want}, Complete: true}
			if hit.ID == "orig" || hit.Created == 1 || !reflect.DeepEqual(*hit, want) {
				t.Errorf("hit %+v, want %+v", *hit, want)
			}
		})
	}
}
