package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// queryRef is Stage.query as it was: each message's text through textOf, the context written
// into a strings.Builder.
func queryRef(s *Stage, req *cascade.Request) (query, bool) {
	c := &req.Chat
	if !plain(c) || (c.Temperature != nil && *c.Temperature > s.maxTemp) || len(c.Messages) == 0 {
		return query{}, false
	}
	if c.Messages[len(c.Messages)-1].Role != "user" {
		return query{}, false
	}
	var b strings.Builder
	var question string
	for i := range c.Messages {
		m := &c.Messages[i]
		if m.Role == "tool" || len(m.ToolCalls) > 0 {
			return query{}, false
		}
		text, ok := textOf(m)
		if !ok {
			return query{}, false
		}
		question = text
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(role + ": " + text)
	}
	if strings.TrimSpace(question) == "" {
		return query{}, false
	}
	return query{question: question, context: b.String(), params: paramsOf(c.StopWords())}, true
}

// FuzzQuery: query renders any conversation of two messages, their contents raw JSON (strings
// with escapes, invalid UTF-8, parts, null, not JSON), short or long, as queryRef does.
func FuzzQuery(f *testing.F) {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	for _, c := range [][3]string{
		{"system", q("You are a helpful assistant. Be brief."), q("Please explain how x relates to y.")},
		{"developer", q("Be terse.\n"), q("  ")},
		{"assistant", `null`, `"\ud800 lone \u00e9 \"quoted\" \\ \n"`},
		{"user", `[{"type":"text","text":"a"},{"type":"text","text":"b"}]`, `[{"type":"image_url","image_url":{"url":"x"}}]`},
		{"system", "\"\xff\xfe invalid\"", `"unterminated`},
		{"tool", q("t"), q("q")},
		{"system", ``, `42`},
		{"system", q(strings.Repeat("A long system prompt. ", 30)), q("Short question?")}, // rendered in a pooled buffer
		{"user", q("Short."), q(strings.Repeat("A long question ", 40))},
		{"system", q(strings.Repeat("x", smallQuery-len("system")-3-len("user")-3-len(`"q"`)-2)), q("q")}, // the largest on the stack
	} {
		f.Add(c[0], c[1], c[2])
	}
	s, err := New(Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Close() })
	f.Fuzz(func(t *testing.T, role, first, last string) {
		req := request("", "m", cascade.Message{Role: role, Content: json.RawMessage(first)}, cascade.Message{Role: "user", Content: json.RawMessage(last)})
		got, gok := s.query(req)
		want, wok := queryRef(s, req)
		if got != want || gok != wok {
			t.Errorf("query(%q: %q, user: %q) = %+v %v, want %+v %v", role, first, last, got, gok, want, wok)
		}
	})
}

// missAllocs is the allocations of s's Serve per request of reqs (each a miss), after two
// misses that warm what a miss keeps (a system message's features are kept from the second on).
func missAllocs(t *testing.T, s *Stage, reqs []*cascade.Request) float64 {
	t.Helper()
	i := 0
	serve := func() {
		if _, err := s.Serve(context.Background(), reqs[i], nil); !errors.Is(err, cascade.ErrMiss) {
			t.Fatalf("Serve: %v, want a miss", err)
		}
		i++
	}
	serve()
	serve()
	return testing.AllocsPerRun(100, serve)
}

// TestServeMissAllocs: a miss on benchout's neural path (a system message and a fresh question,
// the system message's features kept) allocates what it hands to Learn and nothing else: the
// rendered conversation.
func TestServeMissAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates on its own")
	}
	s := newStage(t, Options{})
	r := rand.New(rand.NewPCG(43, 43))
	sys := msg("system", "You are a helpful assistant. Be brief.")
	for range 50 {
		teach(t, s, request("", "m", sys, user(benchoutPrompt(r))), neural("a", 1))
	}
	reqs := make([]*cascade.Request, 300)
	for i := range reqs {
		reqs[i] = request("", "m", sys, user(benchoutPrompt(r)))
		reqs[i].Key() // made once per request, before any stage
	}
	if n := missAllocs(t, s, reqs); n > 1 {
		t.Errorf("a miss allocates %v objects, want at most 1 (the conversation rendered)", n)
	}
}

// TestServeMissOneAllocs: a miss for one fresh user message, looked up among the seeds first,
// allocates at most 3 objects (the message's text, its lower-cased copy, the conversation
// rendered): the seed key is made on the stack.
func TestServeMissOneAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates on its own")
	}
	seeds := writeFile(t, "faq.jsonl", `{"question":"How do I reset my password?","answer":"Use the link."}`+"\n")
	s := newStage(t, Options{SeedFiles: []string{seeds}})
	r := rand.New(rand.NewPCG(44, 44))
	for range 50 {
		teach(t, s, request("", "m", user(benchoutPrompt(r))), neural("a", 1))
	}
	reqs := make([]*cascade.Request, 300)
	for i := range reqs {
		reqs[i] = request("", "m", user(benchoutPrompt(r)))
		reqs[i].Key()
	}
	if n := missAllocs(t, s, reqs); n > 3 {
		t.Errorf("a one-message miss allocates %v objects, want at most 3", n)
	}
}

// TestServeBuiltinSketchCounts: Serve's built-in path (the sketch from the counts, the vector
// made only for a candidate) finds the candidates, with the same scores, that the sketch and
// search of embedQueryJoined's vector find, for questions learned, reworded and new.
func TestServeBuiltinSketchCounts(t *testing.T) {
	s := newStage(t, Options{})
	r := rand.New(rand.NewPCG(47, 47))
	sys := msg("system", "You are a helpful assistant. Be brief.")
	var asked []string
	for i := range 60 {
		q := benchoutPrompt(r)
		if i%2 == 0 {
			q = benchQuestion(r)
		}
		teach(t, s, request("", "m", sys, user(q)), neural("a", 1))
		asked = append(asked, q)
	}
	col := s.collection("", "m")
	found := 0
	for i := range 300 {
		question := asked[i%len(asked)]
		switch i % 3 {
		case 1:
			question = strings.ToUpper(question[:1]) + question[1:] + " please"
		case 2:
			question = benchoutPrompt(r)
		}
		q, ok := s.query(request("", "m", sys, user(question)))
		if !ok {
			t.Fatalf("%q: not a query", question)
		}
		var c [2 * BuiltinDim]int32
		sk, ok := s.sketchCounts(q, &c)
		v, vok := embedQueryJoined(q)
		if ok != vok || !ok {
			t.Fatalf("%q: sketchCounts %v, embedQueryJoined %v", question, ok, vok)
		}
		if sk != s.sketchOf(v) {
			t.Fatalf("%q: the sketch of the counts differs from the vector's", question)
		}
		calls := 0
		got := col.searchLazy(func() []float32 {
			calls++
			w := make([]float32, 2*BuiltinDim)
			joinCounts(w, &c)
			return w
		}, sk, s.threshold, s.cutoffs)
		want := col.searchCut(v, sk, s.threshold, s.cutoffs)
		if !slices.Equal(got, want) || calls > 1 {
			t.Fatalf("%q: searchLazy found %v (vector made %d times), searchCut %v", question, got, calls, want)
		}
		found += len(got)
	}
	if found == 0 {
		t.Fatal("no candidates: the test compares nothing")
	}
}

// TestRecentRing: the ring finds the newest query kept under a key, among the last recentSize
// kept, and none older or never kept.
func TestRecentRing(t *testing.T) {
	var r recentRing
	if _, _, ok := r.peek(""); ok {
		t.Fatal("an empty ring found a query")
	}
	kept := func(i int) embedded { return embedded{q: query{question: fmt.Sprint(i)}} }
	for i := range 3 * recentSize {
		r.add(fmt.Sprint("k", i%(recentSize+10)), kept(i))
		for _, back := range []int{0, 1, recentSize - 1, recentSize} {
			j := i - back
			if j < 0 {
				continue
			}
			e, _, ok := r.peek(fmt.Sprint("k", j%(recentSize+10)))
			newest := j + (i-j)/(recentSize+10)*(recentSize+10) // the key's last add
			switch want := back < recentSize || newest != j; {
			case ok != want:
				t.Fatalf("after %d adds, key of add %d found %v, want %v", i+1, j, ok, want)
			case ok && e.q.question != fmt.Sprint(newest):
				t.Fatalf("after %d adds, key of add %d gives add %s, want %d", i+1, j, e.q.question, newest)
			}
		}
	}
}

// TestPlainString: a JSON string of printable ASCII without escapes is read as its bytes between
// the quotes, as jsontext reads it; anything else is left to jsontext.
func TestPlainString(t *testing.T) {
	for _, raw := range []string{`""`, `"a"`, `"Please explain how x relates to y."`, `"~ !#$%&'()*+,-./09:;<=>?@AZ[]^_` + "`" + `az{|}"`} {
		got, ok := plainString([]byte(raw))
		var want string
		if err := json.Unmarshal([]byte(raw), &want); err != nil || !ok || string(got) != want {
			t.Errorf("%s: %q %v, want %q", raw, got, ok, want)
		}
	}
	for _, raw := range []string{``, `"`, `a`, `"a" `, ` "a"`, `"a\"b"`, `"a\nb"`, `"a"b"`, "\"a\tb\"", "\"a\x7fb\"", "\"é\"", `"\u0041"`, `null`, `42`} {
		if got, ok := plainString([]byte(raw)); ok {
			t.Errorf("%s: read as %q, want it left to jsontext", raw, got)
		}
	}
}
