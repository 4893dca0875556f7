package kv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	chromem "github.com/philippgille/chromem-go"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/coldbench"
)

var benchVocab = strings.Fields(`account address alert archive backup balance battery billing
	branch browser budget buffer cache calendar camera certificate channel chart checkout cluster
	column comment commit config console contract cookie coupon cursor dashboard database deadline
	deploy device directory disk domain draft driver email endpoint engine export feature filter
	firewall folder font gateway graph header image import inbox index invoice kernel keyboard
	label laptop layout ledger license link locale log mailbox manifest memory menu message meter
	mirror module monitor network node notebook order package page panel parser partition password
	patch payment permission pipeline plugin policy port printer process profile project proxy
	queue quota record region release report repository request router runtime schedule schema
	screen script search secret server session shell snapshot socket spreadsheet storage stream
	subnet summary switch table tablet task template tenant terminal ticket timer token topic
	tracker transfer tunnel upload user vault version video volume wallet webhook widget window
	workflow workspace zone`)

var benchVerbs = strings.Fields(`rename move copy share rotate restore resize rebuild sort merge
	split migrate verify inspect audit tag pin archive refresh reindex`)

// benchQuestion makes a question of varied wording, like a help desk's.
func benchQuestion(r *rand.Rand) string {
	w := func() string { return benchVocab[r.IntN(len(benchVocab))] }
	v := benchVerbs[r.IntN(len(benchVerbs))]
	switch r.IntN(4) {
	case 0:
		return fmt.Sprintf("How do I %s the %s %s for my %s?", v, w(), w(), w())
	case 1:
		return fmt.Sprintf("Why can my %s not %s the %s after the %s %s?", w(), v, w(), w(), w())
	case 2:
		return fmt.Sprintf("What is the best way to %s a %s %s with the %s?", v, w(), w(), w())
	}
	return fmt.Sprintf("Can you explain how the %s %s handles the %s %s?", w(), w(), v, w())
}

type benchSet struct {
	s      *Stage
	col    *collection
	stored []string // questions in the store
	fresh  []string // questions not in it
	vecs   [][]float32
}

var benchSets sync.Map

// benchStore builds (once per size) a stage whose one collection holds n learned entries.
func benchStore(b *testing.B, n int) *benchSet {
	if v, ok := benchSets.Load(n); ok {
		return v.(*benchSet)
	}
	s, err := New(Options{MaxEntries: n})
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, uint64(n)))
	set := &benchSet{s: s}
	for i := 0; i < n; i++ {
		q := benchQuestion(r)
		query := query{question: q, context: contextOf(q)}
		v, _, err := s.embed(context.Background(), query, serveEmbedTimeout)
		if err != nil {
			b.Fatal(err)
		}
		if set.col == nil {
			if set.col, err = s.collectionFor("", "m", len(v)); err != nil {
				b.Fatal(err)
			}
		}
		e := &entry{id: entryID(query), vec: v, sketch: s.sketchOf(v), question: q, context: query.context, answer: "a", joules: 1}
		e.seq = set.col.nextSeq()
		set.col.insert(e, 0)
		if i%(n/100+1) == 0 {
			set.stored = append(set.stored, q)
		}
		set.vecs = append(set.vecs, v)
	}
	for range 100 {
		set.fresh = append(set.fresh, benchQuestion(r)+" today")
	}
	benchSets.Store(n, set)
	return set
}

var benchSizes = []int{1000, 10000, 100000}

func sizeName(n int) string { return fmt.Sprintf("entries=%dk", n/1000) }

// BenchmarkLookup is Serve end to end with the built-in embedder: embedding both halves, the
// index search, and the guards for a hit.
func BenchmarkLookup(b *testing.B) {
	for _, n := range benchSizes {
		for _, kind := range []string{"hit", "miss"} {
			b.Run(sizeName(n)+"/"+kind, func(b *testing.B) {
				set := benchStore(b, n)
				qs := set.stored
				if kind == "miss" {
					qs = set.fresh
				}
				hits := 0
				defer cpuClock(b)()
				for i := 0; b.Loop(); i++ {
					r := request("", "m", user(qs[i%len(qs)]))
					if _, err := set.s.Serve(context.Background(), r, nil); err == nil {
						hits++
					}
				}
				b.StopTimer()
				if kind == "hit" && hits == 0 || kind == "miss" && hits > 0 {
					b.Fatalf("%s: %d hits", kind, hits)
				}
			})
		}
	}
}

// BenchmarkSearch is the index alone, for a vector already embedded.
func BenchmarkSearch(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			set := benchStore(b, n)
			var cands int
			defer cpuClock(b)()
			for i := 0; b.Loop(); i++ {
				v := set.vecs[(i*7919)%len(set.vecs)]
				cands += len(set.col.search(v, set.s.sketchOf(v), DefaultThreshold))
			}
			if cands == 0 {
				b.Fatal("stored vectors not found")
			}
		})
	}
}

// BenchmarkChromemQuery is chromem-go's exhaustive QueryEmbedding over the same vectors, nResults
// 1, for comparison with BenchmarkSearch.
func BenchmarkChromemQuery(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			set := benchStore(b, n)
			db := chromem.NewDB()
			col, err := db.CreateCollection("bench", nil, noEmbed)
			if err != nil {
				b.Fatal(err)
			}
			for i, v := range set.vecs {
				if err := col.AddDocument(context.Background(), chromem.Document{ID: fmt.Sprint(i), Embedding: v, Content: "x"}); err != nil {
					b.Fatal(err)
				}
			}
			defer cpuClock(b)()
			for i := 0; b.Loop(); i++ {
				if _, err := col.QueryEmbedding(context.Background(), set.vecs[(i*7919)%len(set.vecs)], 1, nil, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkBuiltinEmbed(b *testing.B) {
	q := "Can you explain how the payment gateway handles the rotate token?"
	texts := []string{q, contextOf(q)}
	defer cpuClock(b)()
	for b.Loop() {
		_, _, _ = Builtin{}.Embed(context.Background(), texts)
	}
}

// benchPrompt is a user message shaped like scripts/benchout's: a dozen made-up words in a
// sentence, unlike every other.
func benchPrompt(r *rand.Rand) string {
	syl := []string{"ba", "de", "fi", "go", "ku", "la", "me", "ni", "po", "ru", "sa", "te", "vi", "zo", "bra", "tri", "sto", "glu"}
	w := make([]string, 12)
	for i := range w {
		w[i] = syl[r.IntN(len(syl))] + syl[r.IntN(len(syl))] + syl[r.IntN(len(syl))]
	}
	return "Please explain in two sentences how " + strings.Join(w[:6], " ") + " relates to " + strings.Join(w[6:], " ") + "."
}

// BenchmarkServeLearn is what a neural call costs kv with the built-in embedder, the request
// shaped like scripts/benchout's (a system message, then a fresh user question): Serve misses,
// then the answer is learned (Flush waits for it). The collection starts with 2000 entries.
func BenchmarkServeLearn(b *testing.B) {
	s, err := New(Options{MaxEntries: 100000})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	r := rand.New(rand.NewPCG(3, 3))
	sys := msg("system", "You are a helpful assistant. Be brief.")
	for range 2000 {
		s.Learn(request("", "m", sys, user(benchPrompt(r))), neural("a", 1))
		s.Flush()
	}
	ans := neural("Hello from the fake upstream.", 1)
	defer cpuClock(b)()
	for b.Loop() {
		b.StopTimer() // every question is new, as in benchout
		req := request("", "m", sys, user(benchPrompt(r)))
		b.StartTimer()
		if _, err := s.Serve(context.Background(), req, nil); err == nil {
			b.Fatal("hit")
		}
		s.Learn(req, ans)
		s.Flush()
	}
}

// BenchmarkSketch is one sketch of a built-in embedding (question and context halves).
func BenchmarkSketch(b *testing.B) {
	q := "Please explain in two sentences how bakufi glumedo stotri vizo lapo rusate relates to gluba fikute sobra damena tripo zolavi."
	v, _ := join(embedBuiltin(q), embedBuiltin("system: You are a helpful assistant. Be brief.\\n"+contextOf(q)))
	l := newLSH(len(v))
	defer cpuClock(b)()
	for b.Loop() {
		l.sketch(v)
	}
}

// BenchmarkScan is the sketch scan alone over entries of random sketches (none near the
// query), without the embedding a real store needs to be built.
func BenchmarkScan(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(sizeName(n), func(b *testing.B) { benchScan(b, n) })
	}
}

func benchScan(b *testing.B, n int) {
	r := rand.New(rand.NewPCG(4, 4))
	c := newCollection("", "m")
	vec := []float32{1, 0, 0, 0}
	for i := range n {
		e := &entry{id: fmt.Sprint(i), vec: vec, sketch: sketch{r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()}}
		c.insert(e, 0)
	}
	q := sketch{r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64()}
	defer cpuClock(b)()
	for b.Loop() {
		if len(c.search(vec, q, DefaultThreshold)) > 0 {
			b.Fatal("a random sketch within the cutoff")
		}
	}
}

// BenchmarkServeMiss is Serve's miss on scripts/benchout's neural path with the built-in
// embedder: a system message and a fresh question shaped like every learned one (the same
// template, other made-up words), against a collection of n learned entries. Nothing is learned
// during the loop, so every op sees n entries. "search" is the index's part alone.
func BenchmarkServeMiss(b *testing.B) {
	for _, n := range []int{1000, 3000, 10000, 30000, 100000} {
		b.Run(sizeName(n), func(b *testing.B) {
			set := benchMissSet(b, n)
			defer cpuClock(b)()
			for i := 0; b.Loop(); i++ {
				if _, err := set.s.Serve(context.Background(), set.reqs[i%len(set.reqs)], nil); !errors.Is(err, cascade.ErrMiss) {
					b.Fatalf("Serve: %v, want a miss", err)
				}
			}
		})
		b.Run(sizeName(n)+"/search", func(b *testing.B) {
			set := benchMissSet(b, n)
			defer cpuClock(b)()
			for i := 0; b.Loop(); i++ {
				k := i % len(set.vecs)
				if len(set.col.search(set.vecs[k], set.sks[k], DefaultThreshold)) > 0 {
					b.Fatal("a fresh question found")
				}
			}
		})
	}
}

type missSet struct {
	s    *Stage
	col  *collection
	reqs []*cascade.Request // fresh requests
	vecs [][]float32        // their vectors and sketches
	sks  []sketch
}

var missSets sync.Map

// benchMissSet builds (once per size) BenchmarkServeMiss's stage and fresh requests.
func benchMissSet(b *testing.B, n int) *missSet {
	if v, ok := missSets.Load(n); ok {
		return v.(*missSet)
	}
	s, err := New(Options{MaxEntries: 100000})
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, uint64(n)))
	sys := msg("system", "You are a helpful assistant. Be brief.")
	for range n {
		q, ok := s.query(request("", "m", sys, user(benchoutPrompt(r))))
		if !ok {
			b.Fatal("not a query")
		}
		if err := s.learn(job{model: "m", q: q, answer: "a", joules: 1, ctok: 7}); err != nil {
			b.Fatal(err)
		}
	}
	set := &missSet{s: s, col: s.collection("", "m")}
	for range 512 {
		req := request("", "m", sys, user(benchoutPrompt(r)))
		q, _ := s.query(req)
		v, _, err := s.embed(context.Background(), q, serveEmbedTimeout)
		if err != nil {
			b.Fatal(err)
		}
		set.reqs = append(set.reqs, req)
		set.vecs = append(set.vecs, v)
		set.sks = append(set.sks, s.sketchOf(v))
	}
	missSets.Store(n, set)
	return set
}

// benchoutPrompt is scripts/benchout's user message (prompts.next): a dozen made-up words of two
// or three syllables from a small alphabet, so that prompts share many trigrams.
func benchoutPrompt(r *rand.Rand) string {
	cons := []string{"b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "tr", "st", "gl"}
	vows := []string{"a", "e", "i", "o", "u", "ai", "ou"}
	w := make([]string, 12)
	for i := range w {
		var b strings.Builder
		for range 2 + r.IntN(2) {
			b.WriteString(cons[r.IntN(len(cons))])
			b.WriteString(vows[r.IntN(len(vows))])
		}
		w[i] = b.String()
	}
	return "Please explain in two sentences how " + strings.Join(w[:6], " ") + " relates to " + strings.Join(w[6:], " ") + "."
}

// BenchmarkServeMissCold is BenchmarkServeMiss with the caches evicted before each Serve (by
// writing over a buffer larger than them, outside the timer), as in the server, where other
// requests and processes run between two calls: ns/op and median-ns are Serve's own time.
func BenchmarkServeMissCold(b *testing.B) {
	for _, n := range []int{1000, 3000, 30000} {
		b.Run(sizeName(n), func(b *testing.B) {
			set := benchMissSet(b, n)
			cold := coldbench.New()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				var err error
				cold.Time(b, func() { _, err = set.s.Serve(context.Background(), set.reqs[i%len(set.reqs)], nil) })
				if !errors.Is(err, cascade.ErrMiss) {
					b.Fatalf("Serve: %v, want a miss", err)
				}
			}
			cold.Report(b, "median-ns")
		})
	}
}

// BenchmarkLearnServed is the learn worker's part of a neural call (Stage.learn) for the answer
// to a miss of Serve's, as Learn queues it, into a collection of n learned entries (it grows by
// one an op): "counts" joins the counts Serve kept, "embed" counts the query again.
func BenchmarkLearnServed(b *testing.B) {
	for _, n := range []int{3000, 30000} {
		for _, kind := range []string{"counts", "embed"} {
			b.Run(sizeName(n)+"/"+kind, func(b *testing.B) {
				s, err := New(Options{MaxEntries: 100000})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = s.Close() })
				r := rand.New(rand.NewPCG(6, uint64(n)))
				sys := msg("system", "You are a helpful assistant. Be brief.")
				for range n {
					q, _ := s.query(request("", "m", sys, user(benchoutPrompt(r))))
					if err := s.learn(job{model: "m", q: q, answer: "a", joules: 1, ctok: 7}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				defer cpuClock(b)()
				for b.Loop() {
					b.StopTimer()
					var e embedded
					var ref countsRef
					for ok := false; !ok || e.vec != nil; { // a miss with no candidate, the usual one
						req := request("", "m", sys, user(benchoutPrompt(r)))
						if _, err := s.Serve(context.Background(), req, nil); err == nil {
							continue
						}
						e, ref, ok = s.recent.peek(req.Key())
					}
					if kind == "embed" {
						ref = countsRef{}
					}
					j := job{model: "m", q: e.q, counts: ref, sketch: e.sketch, sketched: true, answer: "Hello from the fake upstream.", joules: 1, ctok: 7}
					b.StartTimer()
					if err := s.learn(j); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkServeMissOne is Serve's miss for a request of one fresh user message (no system
// prompt: a plain client's, or a legacy completion's), which the shipped seeds are looked up
// for first, against 2000 learned entries: warm, and with the caches evicted before each call.
func BenchmarkServeMissOne(b *testing.B) {
	s, err := New(Options{SeedFiles: []string{"../../data/faq.jsonl"}, MaxEntries: 100000})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	r := rand.New(rand.NewPCG(7, 7))
	for range 2000 {
		q, _ := s.query(request("", "m", user(benchoutPrompt(r))))
		if err := s.learn(job{model: "m", q: q, answer: "a", joules: 1, ctok: 7}); err != nil {
			b.Fatal(err)
		}
	}
	reqs := make([]*cascade.Request, 512)
	for i := range reqs {
		reqs[i] = request("", "m", user(benchoutPrompt(r)))
	}
	serve := func(b *testing.B, i int) {
		if _, err := s.Serve(context.Background(), reqs[i%len(reqs)], nil); !errors.Is(err, cascade.ErrMiss) {
			b.Fatalf("Serve: %v, want a miss", err)
		}
	}
	b.Run("warm", func(b *testing.B) {
		b.ReportAllocs()
		defer cpuClock(b)()
		for i := 0; b.Loop(); i++ {
			serve(b, i)
		}
	})
	b.Run("cold", func(b *testing.B) {
		cold := coldbench.New()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			cold.Time(b, func() { serve(b, i) })
		}
		cold.Report(b, "median-ns")
	})
}

// BenchmarkServeMissMixed is Serve's miss for fresh questions that come interleaved from three
// kinds of client of one model: two system prompts, and none (one message), against 2000
// learned entries.
func BenchmarkServeMissMixed(b *testing.B) {
	s, err := New(Options{MaxEntries: 100000})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	r := rand.New(rand.NewPCG(8, 8))
	systems := [][]cascade.Message{{msg("system", "You are a helpful assistant. Be brief.")}, {msg("system", "Answer in French.")}, nil}
	next := func(i int) *cascade.Request {
		return request("", "m", append(slices.Clone(systems[i%len(systems)]), user(benchoutPrompt(r)))...)
	}
	for i := range 2000 {
		q, _ := s.query(next(i))
		if err := s.learn(job{model: "m", q: q, answer: "a", joules: 1, ctok: 7}); err != nil {
			b.Fatal(err)
		}
	}
	reqs := make([]*cascade.Request, 513)
	for i := range reqs {
		reqs[i] = next(i)
	}
	b.ReportAllocs()
	defer cpuClock(b)()
	for i := 0; b.Loop(); i++ {
		if _, err := s.Serve(context.Background(), reqs[i%len(reqs)], nil); !errors.Is(err, cascade.ErrMiss) {
			b.Fatalf("Serve: %v, want a miss", err)
		}
	}
}
