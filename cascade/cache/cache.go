// Package cache is the cascade's first stage: exact matches on the canonical request key.
package cache

import (
	"github.com/eoc-proxy/eoc-proxy/energy"

	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

var (
	_ cascade.Stage        = (*Stage)(nil)
	_ cascade.EagerLearner = (*Stage)(nil)
	_ cascade.EmbedStage   = (*Stage)(nil)
	_ cascade.EmbedLearner = (*Stage)(nil)
	_ cascade.EntryBounder = (*Stage)(nil)
)

// Defaults for the byte bounds (Option).
const (
	// DefaultMaxBytes bounds the bytes of all stored answers and vectors together.
	DefaultMaxBytes = 256 << 20
	// DefaultMaxEntryBytes bounds one stored answer or set of vectors: a larger one is served
	// but not stored.
	DefaultMaxEntryBytes = 1 << 20
)

// Option sets one of a Stage's bounds.
type Option func(*Stage)

// MaxBytes bounds the bytes (cascade.Answer.Size, or the vectors' size) of all entries in the
// in-process LRU together, the least recently used evicted first; n ≤ 0 keeps DefaultMaxBytes.
func MaxBytes(n int64) Option {
	return func(s *Stage) {
		if n > 0 {
			s.maxBytes = n
		}
	}
}

// MaxEntryBytes bounds one entry: a larger answer or set of vectors is not stored, here or in
// the remote tier, and counts in Stats.TooLarge; n ≤ 0 keeps DefaultMaxEntryBytes.
func MaxEntryBytes(n int) Option {
	return func(s *Stage) {
		if n > 0 {
			s.maxEntry = n
		}
	}
}

// Stage answers a request whose canonical key (tenant, model, whole history and every
// answer-changing field) was answered completely before, and an embeddings call whose key
// (tenant, model, dimensions, texts) was embedded before. Both share one LRU; their keys are
// hashed with different prefixes. It is safe for concurrent use.
//
// An entry expires nearTTL after it was stored: a read of an expired entry removes it and
// misses, and each add first removes expired entries at the old end of the LRU. An expired
// entry nobody reads stays until then, within the count and byte bounds. (The LRU with expiry
// buckets that golang-lru offers keeps each of its 100 buckets' maps at the largest count it
// ever held, bookkeeping that grew under churn to tens of MB that no bound counted.)
type Stage struct {
	lru     *lru.Cache[string, entry]
	remote  Remote        // nil: the LRU is the whole cache
	ttl     time.Duration // the remote tier's TTL
	nearTTL time.Duration // the LRU's

	maxBytes int64
	maxEntry int
	addMu    sync.Mutex   // serializes adds, so that a replaced entry's bytes are counted out once
	bytes    atomic.Int64 // the LRU's entries' sizes, counted in by add and out by evicted
	tooLarge atomic.Int64
}

// entry is one stored answer or one stored set of vectors, with its size and expiry.
type entry struct {
	ans     *keptAnswer
	emb     *cascade.Embeddings
	size    int
	expires time.Time
}

// keptAnswer is what an entry keeps of an answer: what a hit serves again (a hit has an id and a
// time of its own), and what producing it cost (cascade.OriginalCost), which the hit reports as
// saved. Its figure's parts and its backend calls are not kept alive by the entry.
type keptAnswer struct {
	model, fingerprint string
	choices            []cascade.Choice
	usage              *cascade.Usage
	timings            *cascade.Timings
	cost               float64
}

// keep is what an entry keeps of ans, which cost cost.
func keep(ans *cascade.Answer, cost float64) *keptAnswer {
	return &keptAnswer{model: ans.Model, fingerprint: ans.SystemFingerprint, choices: ans.Choices, usage: ans.Usage,
		timings: ans.Timings, cost: cost}
}

// New returns a cache of at most maxEntries answers and vector sets, each kept for ttl, within
// the byte bounds opts set (DefaultMaxBytes and DefaultMaxEntryBytes otherwise).
func New(maxEntries int, ttl time.Duration, opts ...Option) *Stage {
	return newStage(maxEntries, ttl, ttl, nil, opts)
}

// NewShared returns a cache whose answers live in remote for ttl, with an in-process LRU of at
// most maxEntries in front of it for NearTTL (or ttl, when shorter).
func NewShared(maxEntries int, ttl time.Duration, remote Remote, opts ...Option) *Stage {
	return newStage(maxEntries, min(ttl, NearTTL), ttl, remote, opts)
}

func newStage(maxEntries int, nearTTL, ttl time.Duration, remote Remote, opts []Option) *Stage {
	s := &Stage{remote: remote, ttl: ttl, nearTTL: nearTTL, maxBytes: DefaultMaxBytes, maxEntry: DefaultMaxEntryBytes}
	for _, o := range opts {
		o(s)
	}
	if maxEntries <= 0 { // as the expiring LRU took it: no bound on the count
		maxEntries = math.MaxInt
	}
	s.lru, _ = lru.NewWithEvict[string, entry](maxEntries, s.evicted) // errs only for a size ≤ 0
	return s
}

// evicted counts an entry's bytes out, whatever removed it (eviction, expiry, replacement).
func (s *Stage) evicted(_ string, e entry) { s.bytes.Add(-int64(e.size)) }

// add stores e under key within the byte bound, evicting the least recently used entries
// while the LRU holds more than maxBytes. It reports false, storing nothing, for an entry over
// the per-entry bound.
func (s *Stage) add(key string, e entry) bool {
	if e.size > s.maxEntry {
		s.tooLarge.Add(1)
		return false
	}
	s.addMu.Lock()
	defer s.addMu.Unlock()
	now := time.Now()
	for {
		_, old, ok := s.lru.GetOldest()
		if !ok || now.Before(old.expires) {
			break
		}
		s.lru.RemoveOldest()
	}
	e.expires = now.Add(s.nearTTL)
	s.lru.Remove(key) // the LRU replaces a value without telling evicted
	s.bytes.Add(int64(e.size))
	s.lru.Add(key, e)
	for s.bytes.Load() > s.maxBytes {
		if _, _, ok := s.lru.RemoveOldest(); !ok {
			break
		}
	}
	return true
}

// get returns the entry under key unless it has expired by now; an expired one is removed.
func (s *Stage) get(key string, now time.Time) (entry, bool) {
	e, ok := s.lru.Get(key)
	if !ok || now.Before(e.expires) {
		return e, ok
	}
	s.addMu.Lock()
	defer s.addMu.Unlock()
	if cur, ok := s.lru.Peek(key); ok && !now.Before(cur.expires) { // not replaced meanwhile
		s.lru.Remove(key)
	}
	return entry{}, false
}

// MaxEntryBytes is the largest answer the stage stores (cascade.EntryBounder).
func (s *Stage) MaxEntryBytes() int { return s.maxEntry }

// Stats are the stage's figures: Entries and Bytes now, TooLarge since New.
type Stats struct {
	// Entries counts the LRU's entries, expired ones not yet removed included.
	Entries int
	// Bytes is the in-process LRU's entries' sizes, at most MaxBytes.
	Bytes int64
	// TooLarge counts answers and vector sets not stored for being over MaxEntryBytes.
	TooLarge int64
}

// Stats returns the stage's figures.
func (s *Stage) Stats() Stats {
	return Stats{Entries: s.lru.Len(), Bytes: s.bytes.Load(), TooLarge: s.tooLarge.Load()}
}

// Name is "cache".
func (*Stage) Name() string { return "cache" }

// Serve returns the stored answer for the request's key, or cascade.ErrMiss.
func (s *Stage) Serve(ctx context.Context, req *cascade.Request, _ cascade.Sink) (*cascade.Answer, error) {
	if req.NoCache {
		return nil, cascade.ErrMiss
	}
	now := time.Now() // the clock read once: the lookup's, and the answer's creation
	ent, ok := s.get(req.Key(), now)
	if !ok {
		ent, ok = s.remoteGet(ctx, req.Tenant, req.Key())
		now = time.Now()
	}
	if !ok || ent.ans == nil {
		return nil, cascade.ErrMiss
	}
	k := ent.ans
	ans := req.NewAnswer()
	// The stored choices are shared; their slices are never mutated. No backend was called for
	// this answer.
	*ans = cascade.Answer{ID: cascade.NewID(), Model: k.model, Created: now.Unix(), SystemFingerprint: k.fingerprint,
		Choices: k.choices, Usage: k.usage, Timings: k.timings, Energy: energy.Figure{Saved: k.cost}, Complete: true}
	return ans, nil
}

// Learn stores a complete answer under the request's key, unless it is over MaxEntryBytes (or
// its stream was too large to record), here and in the remote layer when there is one.
func (s *Stage) Learn(req *cascade.Request, ans *cascade.Answer) {
	if rest := s.LearnEager(req, ans); rest != nil {
		rest()
	}
}

// LearnEager is Learn's part in this process, which the walk runs before the answer goes out,
// so that the same question asked the moment the answer arrives is a hit; the remote layer's
// write is returned for after the answer (nil without one).
func (s *Stage) LearnEager(req *cascade.Request, ans *cascade.Answer) (rest func()) {
	if !ans.Complete {
		return nil
	}
	if ans.Oversize {
		s.tooLarge.Add(1)
		return nil
	}
	cost := cascade.OriginalCost(ans)
	if !s.add(req.Key(), entry{ans: keep(ans, cost), size: ans.Size()}) || s.remote == nil {
		return nil
	}
	// The answer's JSON, what the remote tier stores, as it is now.
	wire := &cascade.Answer{ID: ans.ID, Model: ans.Model, Created: ans.Created, SystemFingerprint: ans.SystemFingerprint,
		Choices: ans.Choices, Usage: ans.Usage}
	return func() {
		s.remoteSet(req.Tenant, req.Key(), stored{Answer: wire, Cost: cost})
	}
}

// embedSize is about how many bytes a set of vectors holds.
func embedSize(e *cascade.Embeddings) int {
	n := 256
	for _, v := range e.Vectors {
		n += 24 + 4*len(v)
	}
	return n
}

// ServeEmbed returns the stored vectors for the call's key, or cascade.ErrMiss. Embeddings are
// deterministic, so a repeat is answered without the upstream.
func (s *Stage) ServeEmbed(ctx context.Context, call *cascade.EmbedCall) (*cascade.Embeddings, error) {
	if call.NoCache {
		return nil, cascade.ErrMiss
	}
	ent, ok := s.get(call.Key(), time.Now())
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
	if !s.add(call.Key(), entry{emb: &kept, size: embedSize(e)}) {
		return
	}
	saved := e.Energy.Saved
	if saved <= 0 {
		saved = e.Energy.Joules
	}
	s.remoteSet(call.Tenant, call.Key(), stored{Vectors: e.Vectors, PromptTokens: e.PromptTokens, Cost: saved})
}

// Len is the number of stored answers and vector sets.
func (s *Stage) Len() int { return s.lru.Len() }
