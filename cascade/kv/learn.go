package kv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// Learning: the proxy calls Learn once the response is flushed (cascade.Learner), so learning
// never delays a response. An answer whose learning does no I/O (the store in memory, no other
// replicas to publish to, and the vector at hand or made by the built-in embedder from the counts
// Serve kept) is learned there and then, on the caller's goroutine: no other goroutine is woken
// for it, and its cost is spread over the calls instead of coming in bursts. Any other answer
// goes to one worker goroutine through a bounded channel; the worker embeds (a model server's
// call), stores (to disk, when the store is), publishes and indexes it. Flush and Close drain
// it. After emptying the queue the worker lingers (learnLinger) before it waits on the channel
// again: a send to a goroutine waiting on a channel wakes it (and, with a processor idle, a
// thread to run it), so while answers keep coming each one is queued without waking anything,
// and the worker takes them in batches. Flush and Close cut a linger short.

// learnLinger is how long the worker lets answers accumulate after emptying the queue: the most
// an answer waits to be learned beyond the worker's own work.
const learnLinger = 5 * time.Millisecond

// job is one answer to learn, or a flush barrier.
type job struct {
	tenant, model string
	q             query
	vec           []float32 // nil: learn embeds, or joins the counts kept in s.recent
	counts        countsRef // the built-in counts Serve kept (gen 0: none)
	sketch        sketch    // vec's, when sketched
	sketched      bool
	answer        string
	joules        float64
	ctok          int
	barrier       chan struct{}
}

// Learn stores a complete neural answer in the similarity store, itself when that does no I/O
// (inline), else by queueing it for the worker. It never waits for I/O or for the queue: when
// the queue is full the answer is dropped and counted. Answers from in-process stages (no Backend),
// unfinished ones (finish_reason other than stop), tool calls, refusals and requests that
// similarity would not match are not learned.
func (s *Stage) Learn(req *cascade.Request, ans *cascade.Answer) {
	if req.NoStore || ans.Backend == "" || !ans.Complete || len(ans.Choices) != 1 {
		return
	}
	if ans.Oversize || ans.Size() > s.maxEntry {
		s.stats.tooLarge.Add(1) // served, not learned: see MaxEntryBytes
		return
	}
	m := ans.Choices[0].Message
	if ans.Choices[0].FinishReason != "stop" || m.Content == nil || strings.TrimSpace(*m.Content) == "" ||
		len(m.ToolCalls) > 0 || m.Refusal != "" {
		return
	}
	// Serve kept the query with its vector when it embedded this request (same key, same
	// conversation): the one it matched is the one learned.
	e, counts, served := s.recent.peek(req.Key())
	q := e.q
	if !served {
		var ok bool
		if q, ok = s.query(req); !ok {
			return
		}
	}
	if len(q.question)+len(q.context)+len(q.params)+len(*m.Content) > s.maxEntry {
		s.stats.tooLarge.Add(1)
		return
	}
	j := job{tenant: req.Tenant, model: req.Chat.Model, q: q, answer: *m.Content, joules: cascade.OriginalCost(ans)}
	if ans.Usage != nil {
		j.ctok = ans.Usage.CompletionTokens
	}
	if served {
		j.vec, j.counts, j.sketch, j.sketched = e.vec, counts, e.sketch, true
	}
	s.qmu.RLock()
	defer s.qmu.RUnlock()
	if s.closed {
		s.stats.dropped.Add(1)
		return
	}
	if s.inline(&j) {
		s.do(j) // under qmu's read lock: Close waits for it
		return
	}
	select {
	case s.queue <- j:
	default:
		s.stats.dropped.Add(1)
	}
}

// inline reports whether learning j does no I/O, so that Learn does it itself: the store is in
// memory, no other replica follows it, and j's vector is at hand or the built-in embedder makes
// it (from the counts Serve kept, or from the query).
func (s *Stage) inline(j *job) bool {
	if s.db != nil || s.shared != nil {
		return false
	}
	if j.vec != nil {
		return true
	}
	_, builtin := s.emb.(Builtin)
	return builtin
}

// MaxEntryBytes is the largest answer the stage learns (cascade.EntryBounder).
func (s *Stage) MaxEntryBytes() int { return s.maxEntry }

// Flush waits until every answer queued before it has been learned (or failed). For tests and
// tools; it may block.
func (s *Stage) Flush() {
	done := make(chan struct{})
	s.qmu.RLock()
	if s.closed {
		s.qmu.RUnlock()
		return
	}
	s.queue <- job{barrier: done}
	s.qmu.RUnlock()
	s.hurry()
	<-done
}

// hurry ends the worker's linger, or its next one.
func (s *Stage) hurry() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Close stops accepting answers, learns those already queued and returns. Learn after Close
// drops. It is safe to call more than once.
func (s *Stage) Close() error {
	s.stopSharing()
	s.qmu.Lock()
	if !s.closed {
		s.closed = true
		close(s.queue)
	}
	s.qmu.Unlock()
	s.hurry()
	<-s.done
	return nil
}

func (s *Stage) work() {
	defer close(s.done)
	linger := time.NewTimer(learnLinger)
	linger.Stop()
	for j := range s.queue {
		s.do(j)
		for more := true; more; { // the rest of the queue
			select {
			case j, ok := <-s.queue:
				if !ok {
					return
				}
				s.do(j)
			default:
				more = false
			}
		}
		linger.Reset(learnLinger)
		select {
		case <-linger.C:
		case <-s.wake:
			linger.Stop()
		}
	}
}

// do learns one job, or releases a barrier.
func (s *Stage) do(j job) {
	if j.barrier != nil {
		close(j.barrier)
		return
	}
	if err := s.learn(j); err != nil {
		s.stats.failed.Add(1)
		s.log.Warn().Err(err).Str("model", j.model).Msg("kv: answer not learned")
	}
}

func (s *Stage) learn(j job) error {
	// A remote embedder's call gets its deadline in embed; the store's calls take none (chromem
	// reads a context only to embed, and entries carry their vectors), so a learn that Serve
	// embedded makes no timer.
	ctx := context.Background()
	if j.vec == nil && j.counts.gen != 0 {
		// Serve's counts, unless 256 misses came since: joined as embedQueryJoined joins them.
		var c [2 * BuiltinDim]int32
		if s.recent.counts(j.counts, &c) {
			v := make([]float32, 2*BuiltinDim)
			if joinCounts(v, &c) {
				j.vec = v
			}
		}
	}
	if j.vec == nil {
		// Metered by the embedder like any model call, but billed to no request: counted apart.
		v, fig, err := s.embed(ctx, j.q, learnEmbedTimeout)
		s.addLearnJoules(fig.Joules)
		if err != nil {
			return err
		}
		j.vec = v
	}
	col, err := s.collectionFor(j.tenant, j.model, len(j.vec))
	if err != nil {
		return err
	}
	if !j.sketched {
		j.sketch = s.sketchOf(j.vec)
	}
	e := &entry{
		id:       entryID(j.q),
		vec:      j.vec,
		sketch:   j.sketch,
		question: j.q.question,
		context:  j.q.context,
		params:   j.q.params,
		answer:   j.answer,
		joules:   j.joules,
		ctok:     j.ctok,
		created:  time.Now().Unix(),
	}
	if err := s.add(ctx, col, e); err != nil {
		return err
	}
	s.publish(j.tenant, j.model, e)
	return nil
}

// add persists e (when the store is on disk), indexes it and evicts what overflows.
func (s *Stage) add(ctx context.Context, col *collection, e *entry) error {
	e.seq = col.nextSeq()
	if col.store != nil {
		if err := col.store.AddDocument(ctx, docOf(e)); err != nil {
			return fmt.Errorf("storing entry: %w", err)
		}
	}
	s.deleteEvicted(ctx, col, s.insertBounded(ctx, col, e))
	s.stats.learned.Add(1)
	return nil
}

func (s *Stage) deleteEvicted(ctx context.Context, col *collection, evicted []*entry) {
	s.stats.evicted.Add(int64(len(evicted)))
	if col.store == nil || len(evicted) == 0 {
		return
	}
	ids := make([]string, len(evicted))
	for i, e := range evicted {
		ids[i] = e.id
	}
	if err := col.store.Delete(ctx, nil, nil, ids...); err != nil {
		s.log.Warn().Err(err).Msg("kv: evicted entries not removed from disk")
	}
}

// entryID names an entry by what it answers, so learning the same conversation again replaces
// the entry.
func entryID(q query) string {
	var buf [1 << 10]byte // a usual conversation's bytes, on the stack
	h := sha256.Sum256(append(append(append(buf[:0], q.params...), 0), q.context...))
	return hex.EncodeToString(h[:16])
}
