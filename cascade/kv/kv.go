// Package kv is the cascade's semantic key-value stage: seeded answers by normalised question,
// then learned answers by embedding similarity over the whole conversation.
package kv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	chromem "github.com/philippgille/chromem-go"
	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

var (
	_ cascade.Stage   = (*Stage)(nil)
	_ cascade.Learner = (*Stage)(nil)
)

// Timeouts for embedder calls.
const (
	serveEmbedTimeout = 10 * time.Second
	learnEmbedTimeout = 60 * time.Second
)

// Stage answers seeded questions by their Normalize form and learned answers by similarity.
// Learn queues complete answers from later stages without blocking. Call Close at shutdown.
// A Stage is safe for concurrent use; its zero value is not usable (use New).
type Stage struct {
	emb        Embedder
	log        zerolog.Logger
	threshold  float32
	cutoffs    cutoffs // the scan's, for threshold
	maxEntries int
	maxTotal   int // bound.go
	maxCols    int
	maxBytes   int64 // bound.go
	maxEntry   int   // the largest entry learned
	maxTemp    float64
	seeds      map[string]seed
	est        Estimator   // nil: seeds without joules save the stated default
	db         *chromem.DB // nil: in memory
	shared     *sharing    // nil: this replica's learning stays here (shared.go)

	mu    sync.RWMutex
	cols  map[colID]*collection
	used  map[colID]*atomic.Uint64 // the last use of each collection (bound.go): its collection's used
	clock useClock
	total atomic.Int64 // entries in all collections, recounted by bound
	lsh   *lsh
	dim   int // full vector dimension once known

	// recent keeps the queries, vectors and sketches Serve computed, by request key, so learning
	// the answer to a miss neither renders the conversation, embeds (unless Serve left the
	// vector to it) nor sketches again.
	recent recentRing

	qmu    sync.RWMutex
	closed bool
	queue  chan job
	done   chan struct{}
	wake   chan struct{} // ends the learn worker's linger (learn.go)

	stats struct {
		seedHits, similarHits, guarded, learned, dropped, failed, evicted atomic.Int64
		droppedCols, learnNanojoules, tooLarge                            atomic.Int64
	}
}

type colID struct{ tenant, model string }

// New builds the stage: it reads the seed files (an unreadable or inconsistent seed file is an
// error), opens the store under o.DataDir (in memory when empty; a store that does not load is
// repaired or moved aside with a warning, never an error), and starts the learning worker.
func New(o Options) (*Stage, error) {
	o = o.withDefaults()
	s := &Stage{
		emb:        o.Embedder,
		log:        o.Logger,
		threshold:  float32(o.Threshold),
		cutoffs:    cutoffsFor(float32(o.Threshold)),
		maxEntries: o.MaxEntries,
		maxTotal:   o.MaxTotalEntries,
		maxCols:    o.MaxCollections,
		maxBytes:   o.MaxBytes,
		maxEntry:   o.MaxEntryBytes,
		est:        o.Estimator,
		maxTemp:    *o.MaxSimilarTemperature,
		cols:       map[colID]*collection{},
		used:       map[colID]*atomic.Uint64{},
	}
	var err error
	if s.seeds, err = loadSeeds(o.Files, o.SeedFiles, o.SeedJoules); err != nil {
		return nil, err
	}
	if o.DataDir != "" {
		if s.db, err = openDB(o.DataDir, s.log); err != nil {
			s.log.Warn().Err(err).Str("data_dir", o.DataDir).Msg("store unusable; learning in memory only")
			s.db = nil
		} else {
			s.load()
		}
	}
	s.queue = make(chan job, o.LearnQueue)
	s.done = make(chan struct{})
	s.wake = make(chan struct{}, 1)
	go s.work()
	return s, nil
}

// load indexes the store's collections that this embedder wrote.
func (s *Stage) load() {
	ctx := context.Background()
	for name, col := range s.db.ListCollections() {
		var n colName
		if json.Unmarshal([]byte(name), &n) != nil || n.KV != storeVersion || n.Dim <= 0 {
			continue
		}
		if n.Embedder != s.emb.ID() {
			s.log.Info().Str("embedder", n.Embedder).Str("model", n.Model).Int("entries", col.Count()).
				Msg("collection from another embedder kept on disk, not used")
			continue
		}
		if s.dim != 0 && n.Dim != s.dim {
			s.log.Warn().Str("collection", name).Int("dim", n.Dim).Int("want", s.dim).Msg("collection has another dimension; not used")
			continue
		}
		entries, bad, err := loadCollection(ctx, col, n.Dim)
		if err != nil {
			s.log.Warn().Err(err).Str("collection", name).Msg("collection does not load; not used")
			continue
		}
		if bad > 0 {
			s.log.Warn().Int("skipped", bad).Str("model", n.Model).Msg("entries that do not parse were skipped")
		}
		s.dim = n.Dim
		if s.lsh == nil {
			s.lsh = newLSH(n.Dim)
		}
		c := newCollection(n.Tenant, n.Model)
		c.store = s.db.GetCollection(name, noEmbed)
		for _, e := range entries {
			e.sketch = s.lsh.sketch(e.vec)
			evicted, _ := c.insert(e, min(s.maxEntries, s.maxTotal))
			s.deleteEvicted(ctx, c, evicted)
		}
		k := colID{n.Tenant, n.Model}
		s.cols[k] = c
		s.used[k] = &c.used
		s.touchLocked(k)
	}
	s.bound(ctx, nil) // a store written under larger bounds is brought within these
}

// Name is "kv".
func (*Stage) Name() string { return "kv" }

// Serve answers a single seeded question, else the most similar learned answer of the same
// tenant and model that passes the false-hit guards. An embedder failure is an error; everything
// else that does not answer is cascade.ErrMiss.
func (s *Stage) Serve(ctx context.Context, req *cascade.Request, _ cascade.Sink) (*cascade.Answer, error) {
	if req.NoCache {
		return nil, cascade.ErrMiss
	}
	if sd, ok := s.seeded(req); ok {
		s.stats.seedHits.Add(1)
		return s.seedAnswer(req, sd), nil
	}
	q, ok := s.query(req)
	if !ok {
		return nil, cascade.ErrMiss
	}
	col := s.collection(req.Tenant, req.Chat.Model)
	if col == nil || col.len() == 0 {
		return nil, cascade.ErrMiss
	}
	var cands []scored
	var spent energy.Figure
	var settle cascade.SettleFunc
	var embedWait time.Duration
	if _, ok := s.emb.(Builtin); ok && len(q.question) < 1<<18 && len(q.context) < 1<<18 {
		// The built-in embedding's counts make the sketch on the stack; its vector is made only
		// for a candidate. Learning takes that vector, or the counts, kept with the query: the
		// worker joins them after the response.
		var c [2 * BuiltinDim]int32
		sk, ok := s.sketchCounts(q, &c)
		if !ok {
			return nil, cascade.ErrMiss
		}
		var vec []float32
		cands = col.searchLazy(func() []float32 {
			vec = make([]float32, 2*BuiltinDim)
			joinCounts(vec, &c)
			return vec
		}, sk, s.threshold, s.cutoffs)
		if vec == nil {
			s.rememberCounts(req, q, &c, sk)
		} else {
			s.remember(req, q, vec, sk)
		}
	} else {
		embedStart := time.Now()
		vec, fig, set, err := s.embedSettle(ctx, q, serveEmbedTimeout)
		spent, settle, embedWait = fig, set, time.Since(embedStart)
		if errors.Is(err, errNothing) {
			return nil, cascade.SpentSettle(cascade.ErrMiss, spent, settle)
		}
		if err != nil {
			return nil, cascade.SpentSettle(fmt.Errorf("kv: %w", err), spent, settle)
		}
		if !s.indexes(len(vec)) { // the embedder changed its dimension: nothing stored can match
			return nil, cascade.SpentSettle(cascade.ErrMiss, spent, settle)
		}
		sk := s.sketchOf(vec)
		s.remember(req, q, vec, sk)
		cands = col.searchCut(vec, sk, s.threshold, s.cutoffs)
	}
	if len(cands) == 0 {
		return nil, cascade.SpentSettle(cascade.ErrMiss, spent, settle)
	}
	qsig := sign(q.context)
	maxTok := req.Chat.MaxOutputTokens()
	for _, c := range cands {
		e := c.e
		if e.params != q.params || (maxTok > 0 && e.ctok > maxTok) {
			continue
		}
		if conflict(qsig, e.signature()) {
			s.stats.guarded.Add(1)
			continue
		}
		s.stats.similarHits.Add(1)
		ans := cascade.TextAnswer(req, e.answer, e.ctok, e.joules)
		// The walk adds the embedding to the stage's own estimate, which leaves out the wait for it
		// (none for the built-in embedder, which spends nothing apart: its time is the stage's).
		ans.Spent, ans.SpentSettle, ans.SpentTime = spent, settle, embedWait
		return ans, nil
	}
	return nil, cascade.SpentSettle(cascade.ErrMiss, spent, settle)
}

// seeded finds the seed for a request that is one user message and nothing else: a system
// prompt can change the answer (language, persona, format), so it takes the request out of the
// operator's FAQ.
func (s *Stage) seeded(req *cascade.Request) (seed, bool) {
	c := &req.Chat
	if len(s.seeds) == 0 || len(c.Messages) != 1 || c.Messages[0].Role != "user" || !plain(c) {
		return seed{}, false
	}
	text, ok := textOf(&c.Messages[0])
	if !ok {
		return seed{}, false
	}
	return s.seedOf(text)
}

// seedOf finds the seed whose key is Normalize(text). An ASCII text's key is made from
// appendNormWords's one pass, in a stack buffer when it fits: the words Normalize joins
// (FuzzSeedKey), without tokenize's tokens and their strings, for a question no seed may have.
func (s *Stage) seedOf(text string) (seed, bool) {
	if !isASCII(text) {
		sd, ok := s.seeds[Normalize(text)]
		return sd, ok
	}
	var buf [256]byte
	wp := wordsPool.Get().(*[]string)
	words := appendNormWords((*wp)[:0], text)
	key := joinWords(buf[:0], words)
	putWords(wp, words)
	sd, ok := s.seeds[string(key)]
	return sd, ok
}

// joinWords appends words to b, a space between each two.
func joinWords(b []byte, words []string) []byte {
	for i, w := range words {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, w...)
	}
	return b
}

// plain reports a request whose answer is one ordinary text: no tools, one choice, no log
// probabilities, no structured output.
func plain(c *cascade.ChatRequest) bool {
	if len(c.Tools) > 0 || (c.N != nil && *c.N > 1) || (c.Logprobs != nil && *c.Logprobs) {
		return false
	}
	return c.ResponseFormat == nil || c.ResponseFormat.Type == "" || c.ResponseFormat.Type == "text"
}

// textOf is a message's text, false when it has non-text parts (an image decides the answer too).
func textOf(m *cascade.Message) (string, bool) {
	for _, p := range m.Parts() {
		if p.Type != "text" {
			return "", false
		}
	}
	return m.Text(), true
}

// query is what similarity compares: the last user message, the whole conversation rendered as
// text, and the parameters that change an answer's text without changing the conversation.
type query struct {
	question string
	context  string
	params   string
}

// query reports whether the request may be matched or learned by similarity, and its parts.
// Requests with tools or tool messages, n > 1, log probabilities, structured output, non-text
// content, or a temperature above the ceiling are not. A request that sets no temperature is.
func (s *Stage) query(req *cascade.Request) (query, bool) {
	c := &req.Chat
	if !plain(c) || (c.Temperature != nil && *c.Temperature > s.maxTemp) || len(c.Messages) == 0 {
		return query{}, false
	}
	last := &c.Messages[len(c.Messages)-1]
	if last.Role != "user" {
		return query{}, false
	}
	// The context is built in a buffer, on the stack when the conversation is short, else pooled,
	// and made a string once; the question is its tail.
	size := 0
	for i := range c.Messages {
		size += len(c.Messages[i].Content) + len(c.Messages[i].Role) + 3
	}
	var b []byte
	var start int // where the last message's text starts in b
	var ok bool
	if size <= smallQuery {
		var buf [smallQuery]byte
		b, start, ok = render(buf[:0], c.Messages)
	} else {
		bp := queryBufs.Get().(*[]byte)
		var pb []byte // not b, which may be on the stack
		pb, start, ok = render((*bp)[:0], c.Messages)
		defer func() {
			if cap(pb) <= 64<<10 { // a long conversation's buffer is not kept
				*bp = pb
				queryBufs.Put(bp)
			}
		}()
		b = pb
	}
	if !ok || len(bytes.TrimSpace(b[start:])) == 0 {
		return query{}, false
	}
	context := string(b)
	return query{question: context[start:], context: context, params: paramsOf(c.StopWords())}, true
}

// smallQuery is the largest conversation (its messages' contents and roles, and three bytes
// each) query renders on the stack.
const smallQuery = 512

// render appends the conversation as query renders it to b, and returns where its last
// message's text starts; false when a message is a tool's, holds tool calls or non-text parts.
func render(b []byte, msgs []cascade.Message) ([]byte, int, bool) {
	start := 0
	for i := range msgs {
		m := &msgs[i]
		if m.Role == "tool" || len(m.ToolCalls) > 0 {
			return b, 0, false
		}
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		if i > 0 {
			b = append(b, '\n')
		}
		b = append(b, role...)
		b = append(b, ": "...)
		start = len(b)
		var ok bool
		if b, ok = appendText(b, m); !ok {
			return b, 0, false
		}
	}
	return b, start, true
}

// queryBufs holds the buffers query renders conversations in.
var queryBufs = sync.Pool{New: func() any { return new([]byte) }}

// appendText appends textOf(m) to dst, false when m has non-text parts. A JSON string is
// unquoted straight into dst, the way Message.Text does first; anything else goes through Text.
func appendText(dst []byte, m *cascade.Message) ([]byte, bool) {
	if inner, ok := plainString(m.Content); ok {
		return append(dst, inner...), true
	}
	if len(m.Content) > 0 && m.Content[0] == '"' {
		if b, err := jsontext.AppendUnquote(dst, m.Content); err == nil {
			return b, true
		}
	}
	text, ok := textOf(m)
	return append(dst, text...), ok
}

// plainString returns the text of a JSON string of printable ASCII without escapes (the usual
// message), which is its bytes between the quotes; false for any other JSON.
func plainString(raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return nil, false
	}
	inner := raw[1 : len(raw)-1]
	for _, c := range inner {
		if c < ' ' || c > '~' || c == '"' || c == '\\' {
			return nil, false
		}
	}
	return inner, true
}

// paramsOf is the canonical form of the stop sequences, the one request field besides the
// conversation that changes a stored answer's text (max_tokens is checked against the entry).
func paramsOf(stop []string) string {
	if len(stop) == 0 {
		return ""
	}
	stop = slices.Clone(stop)
	slices.Sort(stop)
	b, _ := json.Marshal(map[string]any{"stop": slices.Compact(stop)})
	return string(b)
}

// contextOf renders a single question the way query renders a one-message conversation.
func contextOf(question string) string { return "user: " + question }

var errNothing = errors.New("nothing to embed")

// recentRing keeps the last recentSize queries Serve embedded, by request key. Each is written
// once, by a miss, and looked up at most once, by Learn, newest first (the answer to a miss is
// learned soon after it): fixed slots written in turn, so that keeping one allocates nothing
// and touches no map. A built-in miss that made no vector keeps the query's feature counts in
// its slot, which the learn worker copies out (counts) unless the slot was written again
// meanwhile. Safe for concurrent use; the zero value is empty.
type recentRing struct {
	mu    sync.Mutex
	next  int    // the slot written next
	n     int    // slots written, up to recentSize
	gen   uint64 // writes so far: a slot's gen names one write
	slots [recentSize]struct {
		key     string
		e       embedded
		gen     uint64
		counted bool
		counts  [2 * BuiltinDim]int32
	}
}

// recentSize is how many queries the ring keeps.
const recentSize = 256

func (r *recentRing) add(key string, e embedded) { r.addCounts(key, e, nil) }

// addCounts is add, keeping c too (nil: none).
func (r *recentRing) addCounts(key string, e embedded, c *[2 * BuiltinDim]int32) {
	r.mu.Lock()
	r.gen++
	sl := &r.slots[r.next]
	sl.key, sl.e, sl.gen, sl.counted = key, e, r.gen, c != nil
	if c != nil {
		sl.counts = *c
	}
	r.next = (r.next + 1) % recentSize
	r.n = min(r.n+1, recentSize)
	r.mu.Unlock()
}

// peek returns the newest query kept under key, and where its counts are when it has them
// (ref.gen 0: none).
func (r *recentRing) peek(key string) (embedded, countsRef, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := 1; i <= r.n; i++ {
		slot := (r.next - i + recentSize) % recentSize
		if sl := &r.slots[slot]; sl.key == key {
			var ref countsRef
			if sl.counted {
				ref = countsRef{slot: int32(slot), gen: sl.gen}
			}
			return sl.e, ref, true
		}
	}
	return embedded{}, countsRef{}, false
}

// countsRef names the counts one write kept in a slot of the ring.
type countsRef struct {
	slot int32
	gen  uint64
}

// counts copies the counts ref names into c, false when the slot was written again since.
func (r *recentRing) counts(ref countsRef, c *[2 * BuiltinDim]int32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	sl := &r.slots[ref.slot]
	if ref.gen == 0 || sl.gen != ref.gen || !sl.counted {
		return false
	}
	*c = sl.counts
	return true
}

// embedded is a query, its stored-vector form and its sketch, as Serve computed them.
type embedded struct {
	q      query
	vec    []float32
	sketch sketch
}

// embed returns the stored-vector form of a query (see join) and what the embedder spent, also
// when it fails. A remote embedder has timeout to answer; the builtin one needs no deadline.
func (s *Stage) embed(ctx context.Context, q query, timeout time.Duration) ([]float32, energy.Figure, error) {
	v, fig, _, err := s.embedSettle(ctx, q, timeout)
	return v, fig, err
}

// settlingEmbedder is an embedder whose figure can be provisional (a GPU's, neural.Embedder): it
// also says how to settle it.
type settlingEmbedder interface {
	EmbedSettle(ctx context.Context, texts []string) ([][]float32, energy.Figure, cascade.SettleFunc, error)
}

// embedSettle is embed, also returning how to settle what the embedder spent (nil when final).
func (s *Stage) embedSettle(ctx context.Context, q query, timeout time.Duration) ([]float32, energy.Figure, cascade.SettleFunc, error) {
	if _, ok := s.emb.(Builtin); ok {
		v, ok := embedQueryJoined(q)
		if !ok {
			return nil, energy.Figure{}, nil, errNothing
		}
		return v, energy.Figure{}, nil, nil
	}
	// Only a remote embedder can keep the call waiting, so only it gets a deadline (and the
	// timer that comes with one).
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var vs [][]float32
	var fig energy.Figure
	var settle cascade.SettleFunc
	var err error
	if se, ok := s.emb.(settlingEmbedder); ok {
		vs, fig, settle, err = se.EmbedSettle(ctx, []string{q.question, q.context})
	} else {
		vs, fig, err = s.emb.Embed(ctx, []string{q.question, q.context})
	}
	if err != nil {
		return nil, fig, settle, err
	}
	if len(vs) != 2 {
		return nil, fig, settle, fmt.Errorf("embedder %s returned %d vectors for 2 texts", s.emb.ID(), len(vs))
	}
	if len(vs[0]) != len(vs[1]) {
		return nil, fig, settle, fmt.Errorf("embedder %s returned vectors of %d and %d dimensions", s.emb.ID(), len(vs[0]), len(vs[1]))
	}
	v, ok := join(vs[0], vs[1])
	if !ok {
		return nil, fig, settle, errNothing
	}
	return v, fig, settle, nil
}

// remember keeps q, its vector (nil: learning embeds it) and its sketch for Learn, unless q is
// too large to be learned.
func (s *Stage) remember(req *cascade.Request, q query, vec []float32, sk sketch) {
	if len(q.question)+len(q.context)+len(q.params) <= s.maxEntry {
		s.recent.add(req.Key(), embedded{q: q, vec: vec, sketch: sk})
	}
}

// rememberCounts is remember for a built-in query whose vector was not made: its feature counts
// (countQueryInto) are kept in its place.
func (s *Stage) rememberCounts(req *cascade.Request, q query, c *[2 * BuiltinDim]int32, sk sketch) {
	if len(q.question)+len(q.context)+len(q.params) <= s.maxEntry {
		s.recent.addCounts(req.Key(), embedded{q: q, sketch: sk}, c)
	}
}

// sketchCounts writes q's built-in feature counts into c (countQueryInto) and returns the
// sketch of the vector they make (embedQueryJoined's), without making the vector; false when
// q embeds to nothing, or the index holds another dimension.
func (s *Stage) sketchCounts(q query, c *[2 * BuiltinDim]int32) (sketch, bool) {
	const dim = 2 * BuiltinDim
	s.mu.RLock() // indexes and rotation under one lock
	l, ok := s.lsh, (s.lsh == nil || s.lsh.dim == dim) && (s.dim == 0 || s.dim == dim)
	s.mu.RUnlock()
	if !ok {
		return sketch{}, false
	}
	if l == nil {
		l = s.rotation(dim)
	}
	countQueryInto(c, q)
	var x [2 * BuiltinDim]float32
	if l.dim != dim || l.n != dim || !joinCounts(x[:], c) {
		return sketch{}, false
	}
	return l.rotateInPlace(x[:]), true
}

// sketchOf returns v's sketch, creating the rotation for the first dimension seen. The caller
// makes sure v has the index's dimension (collectionFor, indexes).
func (s *Stage) sketchOf(v []float32) sketch { return s.rotation(len(v)).sketch(v) }

// rotation returns the index's rotation, creating it for dim when there is none yet.
func (s *Stage) rotation(dim int) *lsh {
	s.mu.RLock() // the rotation is made once: concurrent calls share the read lock after that
	l := s.lsh
	s.mu.RUnlock()
	if l == nil {
		s.mu.Lock()
		if s.lsh == nil {
			s.lsh = newLSH(dim)
			s.dim = dim
		}
		l = s.lsh
		s.mu.Unlock()
	}
	return l
}

// indexes reports whether vectors of dim dimensions can be sketched and compared: no dimension
// is fixed yet, or it is dim.
func (s *Stage) indexes(dim int) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return (s.lsh == nil || s.lsh.dim == dim) && (s.dim == 0 || s.dim == dim)
}

func (s *Stage) collection(tenant, model string) *collection {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c := s.cols[colID{tenant, model}]
	if c != nil {
		c.used.Store(s.clock.tick()) // touchLocked, without looking the stamp up
	}
	return c
}

// collectionFor returns the collection, creating it (and its chromem collection) when missing.
func (s *Stage) collectionFor(tenant, model string, dim int) (*collection, error) {
	k := colID{tenant, model}
	s.mu.RLock() // the usual case, without excluding Serve's readers
	if c := s.cols[k]; c != nil && s.dim == dim {
		s.touchLocked(k)
		s.mu.RUnlock()
		return c, nil
	}
	s.mu.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dim != 0 && dim != s.dim {
		return nil, fmt.Errorf("embedder %s returned %d dimensions; the store holds %d", s.emb.ID(), dim, s.dim)
	}
	s.dim = dim
	if c := s.cols[k]; c != nil {
		s.touchLocked(k)
		return c, nil
	}
	c := newCollection(tenant, model)
	if s.db != nil {
		name := colName{KV: storeVersion, Embedder: s.emb.ID(), Dim: dim, Tenant: tenant, Model: model}.String()
		col, err := s.db.GetOrCreateCollection(name, nil, noEmbed)
		if err != nil {
			return nil, fmt.Errorf("creating store collection: %w", err)
		}
		c.store = col
	}
	s.cols[k] = c
	s.used[k] = &c.used
	s.touchLocked(k)
	return c, nil
}

// Stats are the stage's counters. Entries and Collections are current; the rest count since New.
type Stats struct {
	Seeds       int
	Collections int
	Entries     int
	SeedHits    int64
	SimilarHits int64
	// Guarded counts candidates above the threshold that a false-hit guard rejected.
	Guarded int64
	Learned int64
	// Dropped counts answers not queued because the queue was full or the stage closed.
	Dropped int64
	// Failed counts answers that could not be embedded or stored.
	Failed  int64
	Evicted int64
	// Bytes is the entries' size together (see entry.size), at most MaxBytes after each insert.
	Bytes int64
	// TooLarge counts answers not learned for being over MaxEntryBytes.
	TooLarge int64
	// DroppedCollections counts collections dropped whole to keep the store within
	// MaxTotalEntries and MaxCollections (their entries count in Evicted too).
	DroppedCollections int64
	// LearnJoules is what the embedder spent on learning answers in the background (embeddings
	// Serve had not already made): metered, but part of no request's figure.
	LearnJoules float64
}

func (s *Stage) addLearnJoules(j float64) {
	if j > 0 {
		s.stats.learnNanojoules.Add(int64(math.Round(j * 1e9)))
	}
}

// Stats returns the counters.
func (s *Stage) Stats() Stats {
	st := Stats{
		Seeds:              len(s.seeds),
		SeedHits:           s.stats.seedHits.Load(),
		SimilarHits:        s.stats.similarHits.Load(),
		Guarded:            s.stats.guarded.Load(),
		Learned:            s.stats.learned.Load(),
		Dropped:            s.stats.dropped.Load(),
		Failed:             s.stats.failed.Load(),
		Evicted:            s.stats.evicted.Load(),
		DroppedCollections: s.stats.droppedCols.Load(),
		TooLarge:           s.stats.tooLarge.Load(),
		LearnJoules:        float64(s.stats.learnNanojoules.Load()) / 1e9,
	}
	s.mu.RLock()
	cols := make([]*collection, 0, len(s.cols))
	for _, c := range s.cols {
		cols = append(cols, c)
	}
	s.mu.RUnlock()
	st.Collections = len(cols)
	for _, c := range cols {
		st.Entries += c.len()
		st.Bytes += c.size()
	}
	return st
}
