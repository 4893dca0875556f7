package neural

import (
	"context"
	"errors"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/meter"
)

// backend answers with fixed usage, or fails.
type backend struct {
	completion int
	err        error
}

func (b backend) Chat(_ context.Context, req *cascade.Request, _ cascade.Sink) (*cascade.Answer, error) {
	if b.err != nil {
		return nil, b.err
	}
	ans := cascade.TextAnswer(req, "ok", b.completion, 0)
	ans.Usage.PromptTokens = 10
	return ans, nil
}

// observed records what the stage reported.
type observed struct {
	models []string
	figs   []energy.Figure
	tokens []int
}

func (o *observed) Observe(model string, fig energy.Figure, tokens int) {
	o.models, o.figs, o.tokens = append(o.models, model), append(o.figs, fig), append(o.tokens, tokens)
}

func stage(t *testing.T, b cascade.Backend, obs Observer) *Stage {
	t.Helper()
	router, err := cascade.NewRouter([]cascade.Route{{Name: "up", Type: "openai", Patterns: []string{"*"}, Backend: b}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := meter.New(meter.Options{RAPL: "off", NVML: "off",
		TokenModels: []meter.TokenModel{{Patterns: []string{"*"}, JPerPrompt: 1, JPerCompletion: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return New(router, m, WithObserver(obs))
}

func TestObserver(t *testing.T) {
	obs := &observed{}
	req := &cascade.Request{Chat: cascade.ChatRequest{Model: "llama3"}}
	ans, err := stage(t, backend{completion: 5}, obs).Serve(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(obs.figs) != 1 || obs.models[0] != "llama3" || obs.tokens[0] != 5 || obs.figs[0] != ans.Energy {
		t.Fatalf("observed %+v, answer's figure %+v", obs, ans.Energy)
	}
	if obs.figs[0].Joules != 10+2*5 {
		t.Errorf("observed %v J, want the token model's 20", obs.figs[0].Joules)
	}

	// A failed call is not a cost of answering.
	failed := &observed{}
	if _, err := stage(t, backend{err: errors.New("down")}, failed).Serve(context.Background(), req, nil); err == nil {
		t.Fatal("no error")
	}
	if len(failed.figs) != 0 {
		t.Errorf("a failed call was observed: %+v", failed)
	}
}
