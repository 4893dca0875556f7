package cascade

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// Attempt records one stage's try at a request.
type Attempt struct {
	Stage    string
	Duration time.Duration
	Err      error // nil for the answering stage; ErrMiss for a pass
}

// Result is the outcome of a walk.
type Result struct {
	Answer   *Answer
	Stage    string
	Attempts []Attempt
	// Wrote is true once any chunk reached the sink; after that an error cannot become a status.
	Wrote bool
	// Settle is how to get Answer.Energy's final figure once its counters settle, nil when it is
	// final: the answering stage's Answer.Settle, with what the walk added to the figure.
	Settle SettleFunc

	attempts [4]Attempt // Attempts' backing array in a walk of up to four stages
}

// ownAnswer is an answer no learner takes (a cache hit's) with its stage estimate's inputs, in
// one allocation rather than two.
type ownAnswer struct {
	ans    Answer
	inputs energy.InputBox
}

// SettleFunc returns a figure's final form once the counters behind its provisional parts have
// settled, waiting at most as long as ctx; on ctx's end it returns the figure it could make,
// still provisional, with ctx's error. It is safe to call from any goroutine, more than once.
type SettleFunc func(ctx context.Context) (energy.Figure, error)

// join returns the settle function of the figure made of ffig, which f settles, plus gfig,
// which g settles; a nil function means its figure is final (or has no settlement of its own)
// and is taken as it is. Both nil gives nil: the sum has nothing to settle.
func join(f SettleFunc, ffig energy.Figure, g SettleFunc, gfig energy.Figure) SettleFunc {
	switch {
	case g == nil && (f == nil || gfig.IsZero()):
		return f
	case f == nil && ffig.IsZero():
		return g
	}
	// Copies the closure captures: capturing the parameters themselves would move them to the
	// heap on every call, also on the paths above that need no closure.
	fcopy, gcopy := ffig, gfig
	return func(ctx context.Context) (energy.Figure, error) {
		a, b, aerr, berr := fcopy, gcopy, error(nil), error(nil)
		if f != nil {
			a, aerr = f(ctx)
		}
		if g != nil {
			b, berr = g(ctx)
		}
		return a.Plus(b), errors.Join(aerr, berr)
	}
}

// Options configure a Cascade.
type Options struct {
	// StageWatts is the power model for in-process stages (cache, kv, graph): wall time × W.
	StageWatts float64
	Logger     zerolog.Logger
}

// Cascade walks requests through its stages. It is safe for concurrent use.
type Cascade struct {
	stages []Stage
	router Router
	opts   Options
	record int // Request.RecordBytes for a request that leaves it 0
	// unlearned is how many stages come before the first Learner (all of them without one): the
	// answer of one of those is taken by no learner, so it may share an allocation with its
	// figure's inputs (Request.NewAnswer).
	unlearned int
}

// EntryBounder is a Learner that stores no answer larger than MaxEntryBytes (Answer.Size).
type EntryBounder interface {
	MaxEntryBytes() int
}

// New returns a Cascade over stages in order. The router decides which models exist.
func New(router Router, stages []Stage, opts Options) *Cascade {
	unlearned := len(stages)
	for i, st := range stages {
		if _, ok := st.(Learner); ok {
			unlearned = i
			break
		}
	}
	return &Cascade{stages: stages, router: router, opts: opts, record: recordBound(stages), unlearned: unlearned}
}

// recordBound is how much of a streamed answer's text is worth recording: as much as the
// learner with the largest bound stores; all of it when a learner has no bound; next to
// nothing when no stage learns.
func recordBound(stages []Stage) int {
	bound := 1
	for _, st := range stages {
		if _, ok := st.(Learner); !ok {
			continue
		}
		b, ok := st.(EntryBounder)
		if !ok || b.MaxEntryBytes() <= 0 {
			return 0
		}
		bound = max(bound, b.MaxEntryBytes())
	}
	return bound
}

// Router returns the cascade's router.
func (c *Cascade) Router() Router { return c.router }

// StageSink is where a walk streams an answer. Stage is called once, with the name of the stage
// that writes, right before its first chunk (the proxy sends that name in the headers that go
// out with the first chunk); Chunk gets every chunk in order, and an error from it (the client
// went away) stops the producer.
type StageSink interface {
	Stage(name string)
	Chunk(ch *Chunk) error
}

// Walk tries each stage in order; the first answer wins, and res records what happened. With a
// non-nil sink the answer is streamed: live by a streaming stage, or replayed from a whole
// answer. A failing stage is skipped with a warning unless it is the last, it already wrote to
// the sink, or ctx is done; then res.Answer may still hold what was spent, for the ledger. The
// stages before the answering one that learn (Learner) take a complete answer before Walk
// returns.
func (c *Cascade) Walk(ctx context.Context, req *Request, res *Result, sink StageSink) error {
	learn, err := c.WalkLearnLater(ctx, req, res, sink)
	if learn != nil {
		learn()
	}
	return err
}

// WalkLearnLater is Walk without the learning: it returns what the learners would have taken as
// learn, for the caller to run once the answer is out (the edge runs it after the response is
// flushed). learn is nil when there is nothing to learn; it runs the learners once, on the
// caller's goroutine, and must be called at most once.
func (c *Cascade) WalkLearnLater(ctx context.Context, req *Request, res *Result, sink StageSink) (learn func(), err error) {
	if err := c.router.Known(req.Chat.Model); err != nil {
		return nil, err
	}
	req.Key() // computed once, before any stage or learner reads it concurrently
	// A walk of this request before this one may have handed out its own answer.
	req.own = nil
	if req.RecordBytes == 0 {
		// A stream is recorded only as far as a learner could store it: a huge answer is served
		// without being held whole.
		req.RecordBytes = c.record
		if req.NoStore {
			req.RecordBytes = 1
		}
	}
	var tracked Sink // nil without a sink: a walk that streams nothing allocates nothing for it
	if bs, ok := sink.(BackendSink); ok {
		req.backends = bs // told of each backend attempt (Request.Announce)
	}
	if sink != nil {
		tracked = trackedSink(sink, res)
	}
	var spent energy.Figure // what stages that did not answer spent outside this process
	var spentSettle SettleFunc
	if res.Attempts == nil {
		res.Attempts = res.attempts[:0]
		if len(c.stages) > len(res.attempts) {
			res.Attempts = make([]Attempt, 0, len(c.stages))
		}
	}
	for i, st := range c.stages {
		res.Stage = st.Name() // trackedSink names it to the sink if it writes
		// No learner takes the answer of a stage before every learner.
		req.mayOwn = i <= c.unlearned && req.own == nil
		start := time.Now()
		sctx, span := StartSpan(ctx, req.Tracer, SpanStage, st.Name())
		ans, err := st.Serve(sctx, req, tracked)
		took := time.Since(start)
		req.mayOwn = false
		res.Attempts = append(res.Attempts, Attempt{Stage: st.Name(), Duration: took, Err: err})
		if err != nil && err != ErrMiss { //nolint:errorlint // a plain miss spent nothing: spared errors.As's reflection
			if se := (*SpentError)(nil); errors.As(err, &se) {
				spentSettle = join(spentSettle, spent, se.Settle, se.Energy)
				spent = spent.Plus(se.Energy)
			}
		}
		if errors.Is(err, ErrMiss) {
			span.endStage(req.Chat.Model, nil, err)
			continue
		}
		if ans != nil {
			if ans.Energy.Grade == "" {
				box := (*energy.InputBox)(nil)
				if req.own != nil && ans == &req.own.ans { // no learner keeps a copy of the figure, which holds box
					box = &req.own.inputs
				}
				ans.Energy = c.stageEstimate(max(took-ans.SpentTime, 0), ans.Energy, box)
			}
			ans.Settle = join(ans.Settle, ans.Energy, ans.SpentSettle, ans.Spent)
			ans.Energy, ans.Spent, ans.SpentSettle, ans.SpentTime = ans.Energy.Plus(ans.Spent), energy.Figure{}, nil, 0
		}
		span.endStage(req.Chat.Model, ans, err)
		if err != nil {
			if i == len(c.stages)-1 || res.Wrote || ctx.Err() != nil {
				res.take(withSpent(ans, spent, spentSettle))
				return nil, err
			}
			c.opts.Logger.Warn().Str("request_id", req.ID).Str("stage", st.Name()).Err(err).Msg("stage failed; skipped")
			continue
		}
		res.take(withSpent(ans, spent, spentSettle))
		if tracked != nil && !ans.Streamed {
			if err := Replay(ans, req.IncludeUsage(), tracked); err != nil {
				return nil, err
			}
		}
		if ans.Complete && !req.NoStore {
			return c.learners(i, req, ans), nil
		}
		return nil, nil
	}
	res.Stage = ""
	if !spent.IsZero() {
		res.take(&Answer{Energy: spent, Settle: spentSettle})
	}
	return nil, ErrMiss
}

// learners returns what learning ans means for the stages before the i-th, which answered req:
// each Learner among them takes it (an Oversize answer too, to count it as not stored); nil
// when none learns. An EagerLearner's eager part runs now, before the answer goes out, and its
// rest with the other learners.
func (c *Cascade) learners(i int, req *Request, ans *Answer) func() {
	var rests []func()
	later := false
	for _, prev := range c.stages[:i] {
		switch l := prev.(type) {
		case EagerLearner:
			if rest := l.LearnEager(req, ans); rest != nil {
				rests = append(rests, rest)
			}
		case Learner:
			later = true
		}
	}
	if !later && rests == nil {
		return nil
	}
	return func() {
		for _, rest := range rests {
			rest()
		}
		for _, prev := range c.stages[:i] {
			if _, eager := prev.(EagerLearner); eager {
				continue
			}
			if l, ok := prev.(Learner); ok {
				l.Learn(req, ans)
			}
		}
	}
}

// trackedSink passes the chunks of the walk that res records to sink, telling the sink first
// which stage writes: the one being tried, res.Stage. It is one allocation, the closure.
func trackedSink(sink StageSink, res *Result) Sink {
	return func(ch *Chunk) error {
		if !res.Wrote {
			sink.Stage(res.Stage)
		}
		res.Wrote = true
		return sink.Chunk(ch)
	}
}

// withSpent adds what earlier stages spent, which settle settles, to the figure of the answer
// that ends the walk; with no answer, an empty one carries it, for the ledger.
func withSpent(ans *Answer, spent energy.Figure, settle SettleFunc) *Answer {
	switch {
	case spent.IsZero():
	case ans == nil:
		ans = &Answer{Energy: spent, Settle: settle}
	default:
		ans.Settle = join(ans.Settle, ans.Energy, settle, spent)
		ans.Energy = ans.Energy.Plus(spent)
	}
	return ans
}

// take makes ans the walk's answer and moves its settle function to the result, before any
// learner copies the answer: a kept answer must not hold the meter's spans, nor hand a later
// call a figure to settle that is not its own.
func (res *Result) take(ans *Answer) {
	res.Answer = ans
	if ans != nil {
		res.Settle, ans.Settle = ans.Settle, nil
	}
}

// stageEstimate is the stated model for in-process stages: wall time × StageWatts. It keeps what
// the stage said it saved, and the stage's reason for that figure after its own. The figure's
// inputs are held in box, when not nil.
func (c *Cascade) stageEstimate(took time.Duration, stage energy.Figure, box *energy.InputBox) energy.Figure {
	reason := "in-process-stage" // no counter isolates microseconds of this process's work
	if stage.Reason != "" {
		reason += ";" + stage.Reason
	}
	if box == nil {
		box = new(energy.InputBox)
	}
	f := energy.StageModelIn(box, took, c.opts.StageWatts, reason) // with its bounds and inputs
	f.Saved = stage.Saved
	return f
}

// OriginalCost is what it took to make ans the first time: the neural figure a memoizing stage
// saved, or the answer's own joules when it came from a backend.
func OriginalCost(ans *Answer) float64 {
	if ans.Energy.Saved > 0 {
		return ans.Energy.Saved
	}
	return ans.Energy.Joules
}

// Replay streams a whole answer as chunks: a role chunk, the content, the tool calls, the finish
// reason, and the usage chunk when includeUsage is set.
func Replay(ans *Answer, includeUsage bool, sink Sink) error {
	base := Chunk{ID: ans.ID, Object: "chat.completion.chunk", Created: ans.Created, Model: ans.Model, SystemFingerprint: ans.SystemFingerprint}
	for _, ch := range ans.Choices {
		r := new(replayed) // a choice's chunks, each its own, in one allocation
		role := r.chunk(0, base, ChunkChoice{Index: ch.Index, Delta: Delta{Role: "assistant"}})
		if err := sink(role); err != nil {
			return err
		}
		m := ch.Message
		if m.Content != nil || m.ReasoningContent != "" || m.Refusal != "" || len(m.ToolCalls) > 0 {
			d := Delta{Content: m.Content, ReasoningContent: m.ReasoningContent, Refusal: m.Refusal}
			for i, tc := range m.ToolCalls {
				tc.Index = &i
				d.ToolCalls = append(d.ToolCalls, tc)
			}
			if err := sink(r.chunk(1, base, ChunkChoice{Index: ch.Index, Delta: d, Logprobs: ch.Logprobs})); err != nil {
				return err
			}
		}
		r.reason = ch.FinishReason
		if err := sink(r.chunk(2, base, ChunkChoice{Index: ch.Index, FinishReason: &r.reason})); err != nil {
			return err
		}
	}
	if includeUsage && ans.Usage != nil {
		u := base
		u.Choices = []ChunkChoice{}
		u.Usage = ans.Usage
		return sink(&u)
	}
	return nil
}

// replayed holds the chunks Replay makes of one choice: its role, its content and its finish.
type replayed struct {
	chunks  [3]Chunk
	choices [3]ChunkChoice
	reason  string
}

// chunk returns the i-th chunk, base with c as its one choice.
func (r *replayed) chunk(i int, base Chunk, c ChunkChoice) *Chunk {
	r.choices[i] = c
	r.chunks[i] = base
	r.chunks[i].Choices = r.choices[i : i+1 : i+1]
	return &r.chunks[i]
}

// BackendSink is a StageSink that also wants to know which backend writes: the neural stage
// announces each backend it tries (Request.Announce), with the number of attempts so far, before
// the attempt; the last announcement before the first chunk names the backend that writes the
// stream, since no call is retried after its first byte.
type BackendSink interface {
	Backend(name string, attempts int)
}

// Announce tells the sink of the walk serving r, when it is a BackendSink, that backend is about
// to be tried as the attempts-th attempt.
func (r *Request) Announce(backend string, attempts int) {
	if r.backends != nil {
		r.backends.Backend(backend, attempts)
	}
}
