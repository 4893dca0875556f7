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
	_ cascade.Stage   = (*Stage)(nil)
	_ cascade.Learner = (*Stage)(nil)
)

// Stage answers a request whose canonical key (tenant, model, whole history and every
// answer-changing field) was answered completely before. It is safe for concurrent use.
type Stage struct {
	lru *expirable.LRU[string, *cascade.Answer]
}

// New returns a cache of at most maxEntries answers, each kept for ttl.
func New(maxEntries int, ttl time.Duration) *Stage {
	return &Stage{lru: expirable.NewLRU[string, *cascade.Answer](maxEntries, nil, ttl)}
}

// Name is "cache".
func (*Stage) Name() string { return "cache" }

// Serve returns the stored answer for the request's key, or cascade.ErrMiss.
func (s *Stage) Serve(_ context.Context, req *cascade.Request, _ cascade.Sink) (*cascade.Answer, error) {
	if req.NoCache {
		return nil, cascade.ErrMiss
	}
	orig, ok := s.lru.Get(req.Key())
	if !ok {
		return nil, cascade.ErrMiss
	}
	ans := *orig // the stored answer is shared; its slices are never mutated
	ans.ID = cascade.NewID()
	ans.Created = time.Now().Unix()
	ans.Streamed = false
	ans.Energy = energy.Figure{Saved: cascade.OriginalCost(orig)}
	return &ans, nil
}

// Learn stores a complete answer under the request's key.
func (s *Stage) Learn(req *cascade.Request, ans *cascade.Answer) {
	if !ans.Complete {
		return
	}
	stored := *ans
	s.lru.Add(req.Key(), &stored)
}

// Len is the number of stored answers.
func (s *Stage) Len() int { return s.lru.Len() }
