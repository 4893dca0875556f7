package kv

import (
	"context"
	"errors"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

// gpuEmbedder is remoteEmbedder on a GPU: each call's figure is provisional, with a
// function that settles it.
type gpuEmbedder struct{ remoteEmbedder }

func (s *gpuEmbedder) EmbedSettle(ctx context.Context, texts []string) ([][]float32, energy.Figure, cascade.SettleFunc, error) {
	vs, fig, err := s.Embed(ctx, texts)
	fig.Provisional = true
	return vs, fig, func(context.Context) (energy.Figure, error) { return remoteFigure, nil }, err
}

// TestEmbeddingSettles: kv carries the embedder's settle function with what it spent, on a hit
// (Answer.SpentSettle) and on a miss (SpentError.Settle), so the walk can settle it.
func TestEmbeddingSettles(t *testing.T) {
	emb := &gpuEmbedder{}
	s := newStage(t, Options{Embedder: emb})
	teach(t, s, request("", "m", user("How do I reset my password?")), neural("Use the link.", 4))
	ans, hit := serve(t, s, request("", "m", user("how do I reset my password")))
	if !hit || !ans.Spent.Provisional || ans.SpentSettle == nil {
		t.Fatalf("hit %v: Spent %+v, settle set %v", hit, ans.Spent, ans.SpentSettle != nil)
	}
	_, err := s.Serve(context.Background(), request("", "m", user("What is the capital of Mongolia?")), nil)
	var se *cascade.SpentError
	if !errors.As(err, &se) || se.Settle == nil {
		t.Fatalf("miss: err = %v, want a SpentError with a settle function", err)
	}
	if fig, err := se.Settle(context.Background()); err != nil || fig != remoteFigure {
		t.Fatalf("settled %+v, %v", fig, err)
	}
}
