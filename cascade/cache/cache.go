// Package cache is the cascade's first stage: exact matches on the canonical request key.
package cache

import (
	"github.com/eoc-proxy/eoc-proxy/energy"

	"context"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

var (
	_ cascade.Stage        = (*Stage)(nil)
	_ cascade.Learner      = (*Stage)(nil)
	_ cascade.EmbedStage   = (*Stage)(nil)
	_ cascade.EmbedLearner = (*Stage)(nil)
)

// Stage answers a request whose canonical key (tenant, model, whole history and every
// answer-changing field) was answered completely before, and an embeddings call whose key
// (tenant, model, dimensions, texts) was embedded before. Both share one LRU; their keys are
// hashed with different prefixes. It is safe for concurrent use.
type Stage struct {
	lru    *expirable.LRU[string, entry]
	remote Remote        // nil: the LRU is the whole cache
	ttl    time.Duration // the remote tier's TTL
}

// entry is one stored answer or one stored set of vectors.
type entry struct {
	ans *cascade.Answer
	emb *cascade.Embeddings
}

// New returns a cache of at most maxEntries answers and vector sets, each kept for ttl.
func New(maxEntries int, ttl time.Duration) *Stage {
	return &Stage{lru: expirable.NewLRU[string, entry](maxEntries, nil, ttl), ttl: ttl}
}

// NewShared returns a cache whose answers live in remote for ttl, with an in-process LRU of at
// most maxEntries in front of it for NearTTL (or ttl, when shorter).
func NewShared(maxEntries int, ttl time.Duration, remote Remote) *Stage {
	return &Stage{lru: expirable.NewLRU[string, entry](maxEntries, nil, min(ttl, NearTTL)), remote: remote, ttl: ttl}
}

// Name is "cache".
func (*Stage) Name() string { return "cache" }

// Serve returns the stored answer for the request's key, or cascade.ErrMiss.
func (s *Stage) Serve(ctx context.Context, req *cascade.Request, _ cascade.Sink) (*cascade.Answer, error) {
	if req.NoCache {
		return nil, cascade.ErrMiss
	}
	ent, ok := s.lru.Get(req.Key())
	if !ok {
		ent, ok = s.remoteGet(ctx, req.Tenant, req.Key())
	}
	if !ok || ent.ans == nil {
		return nil, cascade.ErrMiss
	}
	orig := ent.ans
	ans := *orig // the stored answer is shared; its slices are never mutated
	ans.ID = cascade.NewID()
	ans.Created = time.Now().Unix()
	ans.Streamed = false
	ans.Energy = energy.Figure{Saved: cascade.OriginalCost(orig)}
	ans.Backend, ans.Attempts = "", nil // no backend was called for this answer
	return &ans, nil
}

// Learn stores a complete answer under the request's key.
func (s *Stage) Learn(req *cascade.Request, ans *cascade.Answer) {
	if !ans.Complete {
		return
	}
	kept := *ans
	s.lru.Add(req.Key(), entry{ans: &kept})
	s.remoteSet(req.Tenant, req.Key(), stored{Answer: &kept, Cost: cascade.OriginalCost(ans)})
}

// ServeEmbed returns the stored vectors for the call's key, or cascade.ErrMiss. Embeddings are
// deterministic, so a repeat is answered without the upstream.
func (s *Stage) ServeEmbed(ctx context.Context, call *cascade.EmbedCall) (*cascade.Embeddings, error) {
	if call.NoCache {
		return nil, cascade.ErrMiss
	}
	ent, ok := s.lru.Get(call.Key())
	if !ok {
		ent, ok = s.remoteGet(ctx, call.Tenant, call.Key())
	}
	if !ok || ent.emb == nil {
		return nil, cascade.ErrMiss
	}
	e := *ent.emb // the vectors are shared and never mutated
	saved := e.Energy.Saved
	if saved <= 0 {
		saved = e.Energy.Joules
	}
	e.Energy = energy.Figure{Saved: saved}
	e.Backend, e.Attempts = "", nil // no backend was called for these
	return &e, nil
}

// LearnEmbed stores vectors under the call's key.
func (s *Stage) LearnEmbed(call *cascade.EmbedCall, e *cascade.Embeddings) {
	kept := *e
	s.lru.Add(call.Key(), entry{emb: &kept})
	saved := e.Energy.Saved
	if saved <= 0 {
		saved = e.Energy.Joules
	}
	s.remoteSet(call.Tenant, call.Key(), stored{Vectors: e.Vectors, PromptTokens: e.PromptTokens, Cost: saved})
}

// Len is the number of stored answers.
func (s *Stage) Len() int { return s.lru.Len() }
