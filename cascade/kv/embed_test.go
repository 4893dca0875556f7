package kv

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

// remoteFigure is what remoteEmbedder says each call cost: a model server's metered figure.
var remoteFigure = energy.Figure{Joules: 0.25, Grade: energy.Estimated, Coverage: energy.CoverageWhole,
	Method: "token-model", Reason: "remote-backend"}

// remoteEmbedder stands in for a metered model-server embedder (cmd hands kv one built on a
// backend): builtin vectors, remoteFigure per call, and an error once fail is set.
type remoteEmbedder struct {
	calls  atomic.Int64
	fail   atomic.Bool
	delay  time.Duration // how long each call takes, as a model server's would
	lastNS atomic.Int64  // the wall time of the last call, as the embedder itself saw it
}

// took is the wall time of the last call, from its start to its return, as the embedder saw it.
func (r *remoteEmbedder) took() time.Duration { return time.Duration(r.lastNS.Load()) }

func (*remoteEmbedder) ID() string { return "ollama:nomic-embed-text" }
func (r *remoteEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, energy.Figure, error) {
	start := time.Now()
	defer func() { r.lastNS.Store(int64(time.Since(start))) }()
	r.calls.Add(1)
	time.Sleep(r.delay)
	if r.fail.Load() {
		return nil, remoteFigure, errors.New("backend kv-embedder: status 503: model is loading")
	}
	vs, _, err := Builtin{}.Embed(ctx, texts)
	return vs, remoteFigure, err
}

// TestRemoteEmbedderEnergy: what a remote embedder spent reaches the figures: a hit carries it
// as Spent, a miss and a failure carry it in a cascade.SpentError.
func TestRemoteEmbedderEnergy(t *testing.T) {
	emb := &remoteEmbedder{}
	s := newStage(t, Options{Embedder: emb})
	teach(t, s, request("", "m", user("How do I reset my password?")), neural("Use the link.", 4))
	if emb.calls.Load() != 1 {
		t.Fatalf("learning an answer Serve had not embedded: %d embed calls, want 1", emb.calls.Load())
	}
	if got := s.Stats().LearnJoules; got != remoteFigure.Joules {
		t.Errorf("LearnJoules = %v, want %v", got, remoteFigure.Joules)
	}

	ans, hit := serve(t, s, request("", "m", user("how do I reset my password")))
	if !hit || ans.Energy.Saved != 4 {
		t.Fatalf("hit %v, answer %+v", hit, ans)
	}
	if ans.Spent != remoteFigure {
		t.Errorf("hit: Spent = %+v, want %+v", ans.Spent, remoteFigure)
	}

	_, err := s.Serve(context.Background(), request("", "m", user("What is the capital of Mongolia?")), nil)
	var se *cascade.SpentError
	if !errors.Is(err, cascade.ErrMiss) || !errors.As(err, &se) || se.Energy != remoteFigure {
		t.Errorf("miss: err = %v, want ErrMiss carrying %+v", err, remoteFigure)
	}

	emb.fail.Store(true)
	_, err = s.Serve(context.Background(), request("", "m", user("How do I reset my password?")), nil)
	if err == nil || errors.Is(err, cascade.ErrMiss) || !strings.Contains(err.Error(), "model is loading") {
		t.Fatalf("embedder down: err = %v, want the embedder's error", err)
	}
	if !errors.As(err, &se) || se.Energy != remoteFigure {
		t.Errorf("embedder down: err = %v, want it to carry what the failed call cost", err)
	}
}

// answering is a last stage that answers every request with a measured figure.
type answering struct{ fig energy.Figure }

func (*answering) Name() string { return "neural" }
func (a *answering) Serve(_ context.Context, _ *cascade.Request, _ cascade.Sink) (*cascade.Answer, error) {
	ans := neural("from the model", 0)
	ans.Energy = a.fig
	return ans, nil
}

type nopBackend struct{}

func (nopBackend) Chat(context.Context, *cascade.Request, cascade.Sink) (*cascade.Answer, error) {
	return nil, errors.New("unused")
}

// TestRemoteEmbedderEnergyInWalk: through the walk, a kv hit's figure is the stage estimate plus
// the embedding, and a kv miss's embedding is added to the answer that ends the walk.
func TestRemoteEmbedderEnergyInWalk(t *testing.T) {
	emb := &remoteEmbedder{}
	s := newStage(t, Options{Embedder: emb})
	router, err := routing.New([]routing.Route{{Name: "b", Type: "ollama", Patterns: []string{"*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	last := &answering{fig: energy.Figure{Joules: 3, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: "rapl"}}
	c := cascade.New(router, []cascade.Stage{s, last}, cascade.Options{StageWatts: 10})
	teach(t, s, request("", "m", user("How do I reset my password?")), neural("Use the link.", 4))

	var hit cascade.Result
	if err := c.Walk(context.Background(), request("", "m", user("how do I reset my password")), &hit, nil); err != nil {
		t.Fatal(err)
	}
	f := hit.Answer.Energy
	if hit.Stage != "kv" || f.Joules <= remoteFigure.Joules || f.Saved != 4 || f.Grade != energy.Estimated ||
		f.Method != "stage-model+token-model" || !strings.Contains(f.Reason, "remote-backend") {
		t.Errorf("kv hit: stage %s figure %+v, want the stage estimate plus %v J of embedding", hit.Stage, f, remoteFigure.Joules)
	}

	var miss cascade.Result
	if err := c.Walk(context.Background(), request("", "m", user("What is the capital of Mongolia?")), &miss, nil); err != nil {
		t.Fatal(err)
	}
	f = miss.Answer.Energy
	if miss.Stage != "neural" || f.Joules != 3+remoteFigure.Joules || f.Grade != energy.Estimated || f.Method != "rapl+token-model" {
		t.Errorf("kv miss: stage %s figure %+v, want the model's 3 J plus the embedding's %v J", miss.Stage, f, remoteFigure.Joules)
	}
}

// checkEmbedQuery: the stage's built-in embedding of a query is Builtin.Embed of its question
// and its context, bit for bit.
func checkEmbedQuery(t *testing.T, q query) {
	t.Helper()
	qv, cv := embedQuery(q)
	want, _, _ := Builtin{}.Embed(context.Background(), []string{q.question, q.context})
	if !slices.Equal(qv, want[0]) || !slices.Equal(cv, want[1]) {
		t.Errorf("question %q, context %q: embedQuery differs from Builtin.Embed", q.question, q.context)
	}
	// Three times: the prefix is offered, kept, then its kept features are used.
	wv, wok := join(want[0], want[1])
	for i := range 3 {
		jv, jok := embedQueryJoined(q)
		if jok != wok || !slices.Equal(jv, wv) {
			t.Errorf("question %q, context %q: embedQueryJoined (call %d) differs from join of Builtin.Embed", q.question, q.context, i+1)
		}
	}
	for _, s := range []string{q.question, q.context} {
		if got, want := embedBuiltin(s), embedWordsJoinedRunes(normWords(s)); !slices.Equal(got, want) {
			t.Errorf("%q: the trigram window differs from the trigrams of the joined text", s)
		}
	}
}

// embedWordsJoinedRunes is embedWords as first written: the trigrams taken from the runes of
// the words joined by spaces, with a space before and after. Stored vectors were made this way.
func embedWordsJoinedRunes(words []string) []float32 {
	v := make([]float32, BuiltinDim)
	bump := func(h uint64, w float32) {
		h ^= h >> 33
		h *= 0xff51afd7ed558ccd
		h ^= h >> 33
		if h>>63 == 1 {
			w = -w
		}
		v[h%BuiltinDim] += w
	}
	for i, w := range words {
		bump(fnvString(fnvByte(fnvOffset, 'w'), w), weightWord)
		if i > 0 {
			h := fnvString(fnvByte(fnvOffset, 'b'), words[i-1])
			bump(fnvString(fnvByte(h, ' '), w), weightBigram)
		}
	}
	r := []rune(" " + strings.Join(words, " ") + " ")
	for i := 0; i+3 <= len(r); i++ {
		h := fnvByte(fnvOffset, 't')
		for _, c := range r[i : i+3] {
			h = fnvRune(h, c)
		}
		bump(h, weightTrigram)
	}
	normalize(v)
	return v
}

var embedQueryCases = [][]string{
	{"What's the capital of France?"},
	{"  leading spaces and\ttabs  "},
	{"it`s a backquote", "second line\nthird line"},
	{"", "-4 degrees, 3.5 or 1,000?"},
	{"You are terse.", "Can't I reset my 2FA token?"},
	{"Sois bref.", "Où est la Côte d'Ivoire ?"},
	{"x", "\u0301combining first"},
	{"système", "¨ diaeresis, ͺ ypogegrammeni"},
	{"sys", " \n user: nested\nuser: roles"},
	{"sys", "'s apostrophe first"},
	{"sys", "ＦＵＬＬＷＩＤＴＨ question"},
}

// TestEmbedQuery: sharing the question's words with the context changes no vector, for
// conversations of one and two messages and for queries built another way.
func TestEmbedQuery(t *testing.T) {
	s := newStage(t, Options{})
	for _, tc := range embedQueryCases {
		msgs := []cascade.Message{user(tc[len(tc)-1])}
		if len(tc) == 2 {
			msgs = []cascade.Message{msg("system", tc[0]), msgs[0]}
		}
		q, ok := s.query(request("", "m", msgs...))
		if !ok {
			continue
		}
		if _, ok := builtinTail(q); !ok && tc[len(tc)-1] != "" && tc[len(tc)-1][0] < 0x80 {
			t.Errorf("%q: the shared path was not taken", tc)
		}
		checkEmbedQuery(t, q)
	}
	checkEmbedQuery(t, query{question: "q", context: "assistant: q"})
	checkEmbedQuery(t, query{question: "q", context: "xuser: q"})
	checkEmbedQuery(t, query{question: "question", context: contextOf("question")})
}

// FuzzEmbedQuery: for any system message and question, the stage's built-in embedding is
// Builtin.Embed's.
func FuzzEmbedQuery(f *testing.F) {
	for _, tc := range embedQueryCases {
		f.Add(tc[0], tc[len(tc)-1])
	}
	s, err := New(Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Close() })
	f.Fuzz(func(t *testing.T, system, question string) {
		if q, ok := s.query(request("", "m", msg("system", system), user(question))); ok {
			checkEmbedQuery(t, q)
		}
		checkEmbedQuery(t, query{question: question, context: system + question})
	})
}

// TestEmbedWaitNotBilledTwice: the wait for a remote embedding is in the embedding's own figure,
// so the kv stage's wall-time estimate leaves it out: with a 200 ms embedding at 10 W a hit costs
// the embedding's 0.25 J and the stage's own time, not 2 J more. The stage's own time is read
// off the walk's record of the stage (its duration less the embedder's own time), not assumed
// to be a few milliseconds: on a loaded machine the stage's work can take 100 ms of wall time.
func TestEmbedWaitNotBilledTwice(t *testing.T) {
	emb := &remoteEmbedder{}
	s := newStage(t, Options{Embedder: emb})
	router, err := routing.New([]routing.Route{{Name: "b", Type: "ollama", Patterns: []string{"*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := cascade.New(router, []cascade.Stage{s, &answering{}}, cascade.Options{StageWatts: 10})
	teach(t, s, request("", "m", user("How do I reset my password?")), neural("Use the link.", 4))
	emb.delay = 200 * time.Millisecond
	var hit cascade.Result
	if err := c.Walk(context.Background(), request("", "m", user("how do I reset my password")), &hit, nil); err != nil {
		t.Fatal(err)
	}
	if hit.Stage != "kv" {
		t.Fatalf("stage %q, want kv", hit.Stage)
	}
	if len(hit.Attempts) != 1 || hit.Attempts[0].Stage != "kv" {
		t.Fatalf("attempts %+v, want kv's only", hit.Attempts)
	}
	// The stage's estimate may bill at most the stage's time outside the embedder: the walk's
	// duration of the kv stage less the embedder's own wall time (the stage's measured wait
	// holds the embedder's call, so it is at least that). Billing the wait would add ≥ 2 J.
	took, waited := hit.Attempts[0].Duration, emb.took()
	if waited < emb.delay {
		t.Fatalf("the embedder took %v, less than its %v delay", waited, emb.delay)
	}
	const watts = 10
	own := (took - waited).Seconds() * watts
	got := hit.Answer.Energy.Joules
	if got < remoteFigure.Joules || got > remoteFigure.Joules+own+1e-9 {
		t.Errorf("kv hit after a %v embedding in a %v stage: %v J, want %v J plus at most the stage's own %v (%v J)",
			waited, took, got, remoteFigure.Joules, took-waited, own)
	}
}

// TestEmbedQueryMany: on many conversations shaped like real ones (benchout's prompts and help
// desk questions, after one of a few system messages that come in runs and alternate, or none,
// or a turn before), the stage's built-in embedding is join of Builtin.Embed's, bit for bit,
// whether the lines before the question are kept (prefixCounts) or not.
func TestEmbedQueryMany(t *testing.T) {
	s := newStage(t, Options{})
	r := rand.New(rand.NewPCG(41, 41))
	systems := []string{"You are a helpful assistant. Be brief.", "Answer in French.", "Réponds en français, brièvement."}
	for i := range 3000 {
		question := benchoutPrompt(r)
		if i%3 == 1 {
			question = benchQuestion(r)
		}
		var msgs []cascade.Message
		switch k := (i / 7) % 5; k {
		case 0, 1, 2:
			msgs = append(msgs, msg("system", systems[k]))
		case 3:
			msgs = append(msgs, user(benchQuestion(r)), msg("assistant", "Sure."))
		}
		msgs = append(msgs, user(question))
		q, ok := s.query(request("", "m", msgs...))
		if !ok {
			t.Fatalf("%q: not a query", question)
		}
		want, _, _ := Builtin{}.Embed(context.Background(), []string{q.question, q.context})
		wv, wok := join(want[0], want[1])
		if v, ok := embedQueryJoined(q); ok != wok || !slices.Equal(v, wv) {
			t.Fatalf("conversation %d %q: embedQueryJoined differs from join of Builtin.Embed", i, q.context)
		}
	}
}

// countWords is what wordCounter must count for s: addWeights of appendNormWords's words, and
// addBoundary's features after "user" (when s has words) into boundary.
func countWords(s string) (v, boundary [BuiltinDim]int32) {
	w := appendNormWords(nil, s)
	addWeights(v[:], w, "", &countWeights)
	if len(w) > 0 {
		addBoundary(boundary[:], "user", w[0], &countWeights)
	}
	return v, boundary
}

// checkCountNormWords: countNormWords counts what countWords does of an ASCII s, and reports a
// text that is not.
func checkCountNormWords(t *testing.T, s string) {
	t.Helper()
	var got, gotb [BuiltinDim]int32
	f := newWordCounter(&got)
	if !countNormWords(&f, s) {
		if isASCII(s) {
			t.Fatalf("%q: ASCII, reported not", s)
		}
		return
	}
	if !isASCII(s) {
		t.Fatalf("%q: not ASCII, counted", s)
	}
	f.end()
	if f.words > 0 {
		f.boundary(gotb[:])
	}
	want, wantb := countWords(s)
	if got != want || gotb != wantb {
		t.Fatalf("%q: the counts read in one pass differ from those of the word list", s)
	}
}

// TestCountNormWords: on texts of words, numbers, contractions (with and without their
// apostrophe, upper-cased, backquoted), punctuation kept and dropped, and white space of every
// kind, one pass counts what the word list gives.
func TestCountNormWords(t *testing.T) {
	pieces := []string{"What's", "WHAT'S", "what`s", "Can't", "CANNOT", "dont", "DONT", "Im", "John's", "do'nt",
		"'s", "it's'", "''", "-4", "x-4", "3.5", "1,000", "10:30", "a.b", "C++", "C#", "5%", "$", "@home",
		"Please", "explain", "bakufi", "HOW", "iPhone", "NASA", ".", ",", "!", "?", ";", "(", ")", "\"", "`",
		" ", "  ", "\t", "\n", "\r\n", "\v", "\f", "\x00", "\x7f", "é", "Ünïcode"}
	r := rand.New(rand.NewPCG(45, 45))
	for range 20000 {
		var b strings.Builder
		for range r.IntN(12) {
			b.WriteString(pieces[r.IntN(len(pieces))])
			if r.IntN(3) > 0 {
				b.WriteByte(" \n.-'"[r.IntN(5)])
			}
		}
		checkCountNormWords(t, b.String())
	}
	for _, c := range embedQueryCases {
		for _, s := range c {
			checkCountNormWords(t, s)
		}
	}
}

// FuzzCountNormWords: for any text, one pass counts what the word list gives.
func FuzzCountNormWords(f *testing.F) {
	for _, c := range embedQueryCases {
		f.Add(c[len(c)-1])
	}
	f.Fuzz(checkCountNormWords)
}

// TestPrefixCacheInterleaved: the lines before the question of conversations that come
// interleaved, from a few services, are all kept once each was offered twice, and a prefix
// offered once among others is not.
func TestPrefixCacheInterleaved(t *testing.T) {
	var c prefixCache
	prefixes := []string{"", "system: You are a helpful assistant. Be brief.\n", "system: Answer in French.\n", "system: Be terse.\n"}
	for round := range 3 {
		for _, p := range prefixes {
			if c.lookup(p) == nil {
				c.offer(p, append(appendNormWords(nil, p), "user"))
			}
			if round > 1 && c.lookup(p) == nil {
				t.Fatalf("round %d: %q was not kept", round, p)
			}
		}
	}
	c.offer("system: once\n", []string{"system", "once", "user"})
	if c.lookup("system: once\n") != nil {
		t.Error("a prefix offered once was kept")
	}
	for _, p := range prefixes {
		e := c.lookup(p)
		var want [BuiltinDim]int32
		addWeights(want[:], append(appendNormWords(nil, p), "user"), "", &countWeights)
		if e == nil || e.counts != want {
			t.Fatalf("%q: kept %v, with other counts", p, e != nil)
		}
	}
}
