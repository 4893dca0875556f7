package kv

import (
	"context"
	"encoding/gob"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
	chromem "github.com/philippgille/chromem-go"
)

func msg(role, text string) cascade.Message {
	b, _ := json.Marshal(text)
	return cascade.Message{Role: role, Content: b}
}

func user(text string) cascade.Message { return msg("user", text) }

// request builds a request the way the proxy does: the chat and its raw body.
func request(tenant, model string, msgs ...cascade.Message) *cascade.Request {
	r := &cascade.Request{Tenant: tenant, Chat: cascade.ChatRequest{Model: model, Messages: msgs}}
	r.Raw, _ = json.Marshal(r.Chat)
	return r
}

// rekey refreshes Raw after a test changed the chat, so the request's key changes too.
func rekey(r *cascade.Request) *cascade.Request {
	c := *r
	c.Raw, _ = json.Marshal(c.Chat)
	return &c
}

// neural is a complete answer as the neural stage returns it after the walk.
func neural(text string, joules float64) *cascade.Answer {
	content := text
	return &cascade.Answer{
		ID: "chatcmpl-up", Model: "m", Backend: "local", Complete: true,
		Choices: []cascade.Choice{{Message: cascade.AnswerMessage{Role: "assistant", Content: &content}, FinishReason: "stop"}},
		Usage:   &cascade.Usage{PromptTokens: 9, CompletionTokens: 7, TotalTokens: 16},
		Energy:  energy.Figure{Joules: joules, Grade: energy.Measured},
	}
}

func newStage(t testing.TB, o Options) *Stage {
	t.Helper()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// teach learns ans for r and waits for it.
func teach(t testing.TB, s *Stage, r *cascade.Request, ans *cascade.Answer) {
	t.Helper()
	before := s.Stats().Learned
	s.Learn(r, ans)
	s.Flush()
	if s.Stats().Learned != before+1 {
		t.Fatalf("not learned: %+v", s.Stats())
	}
}

func serve(t testing.TB, s *Stage, r *cascade.Request) (*cascade.Answer, bool) {
	t.Helper()
	ans, err := s.Serve(context.Background(), r, nil)
	if errors.Is(err, cascade.ErrMiss) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	return ans, true
}

func writeFile(t testing.TB, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNormalize(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"case", "What Is THE Capital?", "what is the capital"},
		{"whitespace", "  what\tis \n the   capital ", "what is the capital"},
		{"punctuation", "what... is, the capital?!", "what is the capital"},
		{"apostrophes", "what’s up, what's up, whats up", "what is up what is up what is up"},
		{"contractions", "Don't, can't, won't, I'm, you're, it's, isn't, we've, they'll", "do not can not will not i am you are it is is not we have they will"},
		{"cannot", "I cannot", "i can not"},
		{"possessive", "John's book, the dogs' bowl, its lid", "johns book the dogs bowl its lid"},
		{"ambiguous kept", "I'd go, ain't, cant, wont", "id go aint cant wont"},
		{"inner apostrophe", "Côte d’Ivoire", "côte divoire"},
		{"misplaced apostrophe", "Do'nt, wo'nt", "do not wont"},
		{"nfkc fullwidth", "ＷＨＡＴ　ｉｓ　２ＦＡ？", "what is 2fa"},
		{"fold sharp s", "STRASSE straße", "strasse strasse"},
		{"decimal kept", "pay 3.5 or 35", "pay 3.5 or 35"},
		{"thousands kept", "1,000 vs 1000", "1,000 vs 1000"},
		{"time kept", "at 10:30.", "at 10:30"},
		{"negative kept", "set it to -4, not 4", "set it to -4 not 4"},
		{"hyphen word", "e-mail", "e mail"},
		{"symbols kept", "C++ and C# and 5%", "c++ and c# and 5%"},
		{"empty", " ?! ", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Normalize(tc.in); got != tc.want {
				t.Errorf("Normalize(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestConflict(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b string
		want bool
	}{
		{"same", "How do I enable 2FA?", "how do i enable 2fa", false},
		{"enable disable", "How do I enable 2FA?", "How do I disable 2FA?", true},
		{"enabled enabling", "Is 2FA enabled?", "Is 2FA enabling?", false},
		{"can cannot", "I can log in", "I cannot log in", true},
		{"can't cannot", "I can't log in", "I cannot log in", false},
		{"can can't", "I can log in", "I can't log in", true},
		{"is isn't", "it is running", "it isn't running", true},
		{"isn't is not", "it isn't running", "it is not running", false},
		{"what's what is", "What's the port?", "what is the port", false},
		{"do does not", "It works", "It does not work", true},
		{"lock unlock", "how to lock the door", "how to unlock the door", true},
		{"possible impossible", "is it possible", "is it impossible", true},
		{"numbers", "3 apples", "4 apples", true},
		{"number words", "three apples", "four apples", true},
		{"digit and word", "3 apples", "three apples", false},
		{"decimals", "pay 3.5 euros", "pay 35 euros", true},
		{"entity", "Tell me about Paris", "Tell me about Rome", true},
		{"entity lowercase query", "tell me about paris", "Tell me about Paris", false},
		{"entity lowercase other", "tell me about rome", "Tell me about Paris", true},
		{"mixed token", "reset 2FA", "reset 3FA", true},
		{"initial common word", "What is it", "Which is it", false},
		{"initial name", "Paris is big", "Rome is big", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := conflict(sign(tc.a), sign(tc.b)); got != tc.want {
				t.Errorf("conflict(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
}

func TestSeeds(t *testing.T) {
	faq := writeFile(t, "faq.jsonl", `{"question":"What is the capital of France?","answer":"Paris."}
# a comment
{"question":"How do I enable 2FA?","answer":"Settings, Security, Enable.","joules":42}
`)
	s := newStage(t, Options{SeedFiles: []string{faq}})
	two := 2
	for _, tc := range []struct {
		name   string
		req    *cascade.Request
		answer string
		saved  float64
	}{
		{"exact", request("", "m", user("What is the capital of France?")), "Paris.", DefaultSeedJoules},
		{"case", request("", "m", user("WHAT IS THE CAPITAL OF FRANCE?")), "Paris.", DefaultSeedJoules},
		{"whitespace", request("", "m", user("  what is\tthe capital\nof france ")), "Paris.", DefaultSeedJoules},
		{"punctuation", request("", "m", user("what is the capital of france")), "Paris.", DefaultSeedJoules},
		{"unicode", request("", "m", user("Ｗｈａｔ ｉｓ ｔｈｅ ｃａｐｉｔａｌ ｏｆ Ｆｒａｎｃｅ？")), "Paris.", DefaultSeedJoules},
		{"any tenant and model", request("acme", "other-model", user("what is the capital of France")), "Paris.", DefaultSeedJoules},
		{"joules from file", request("", "m", user("how do i enable 2fa")), "Settings, Security, Enable.", 42},
		{"negation", request("", "m", user("How do I disable 2FA?")), "", 0},
		{"other question", request("", "m", user("What is the capital of Spain?")), "", 0},
		{"system prompt", request("", "m", msg("system", "Answer in French."), user("What is the capital of France?")), "", 0},
		{"second turn", request("", "m", user("hi"), msg("assistant", "hello"), user("What is the capital of France?")), "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ans, hit := serve(t, s, tc.req)
			if tc.answer == "" {
				if hit {
					t.Fatalf("hit %q, want a miss", ans.Text())
				}
				return
			}
			if !hit {
				t.Fatal("miss, want a hit")
			}
			if ans.Text() != tc.answer || ans.Energy.Saved != tc.saved || ans.Model != tc.req.Chat.Model {
				t.Errorf("got %q saved %v model %q", ans.Text(), ans.Energy.Saved, ans.Model)
			}
			if !strings.HasPrefix(ans.ID, "chatcmpl-") || !ans.Complete || ans.Choices[0].FinishReason != "stop" || ans.Energy.Grade != "" {
				t.Errorf("answer shape: %+v", ans)
			}
		})
	}
	t.Run("tools", func(t *testing.T) {
		r := request("", "m", user("What is the capital of France?"))
		r.Chat.Tools = []cascade.Tool{{Type: "function", Function: cascade.ToolFunction{Name: "f"}}}
		if _, hit := serve(t, s, r); hit {
			t.Error("hit with tools")
		}
	})
	t.Run("n=2", func(t *testing.T) {
		r := request("", "m", user("What is the capital of France?"))
		r.Chat.N = &two
		if _, hit := serve(t, s, r); hit {
			t.Error("hit with n=2")
		}
	})
	t.Run("no-cache", func(t *testing.T) {
		r := request("", "m", user("What is the capital of France?"))
		r.NoCache = true
		if _, hit := serve(t, s, r); hit {
			t.Error("hit with no-cache")
		}
	})
}

func TestSeedFileErrors(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"bad json", `{"question": "a"`, "faq.jsonl:1"},
		{"unknown field", `{"question":"a","answer":"b","x":1}`, "faq.jsonl:1"},
		{"no answer", `{"question":"a"}`, "question and answer are required"},
		{"two answers", "{\"question\":\"Hi?\",\"answer\":\"a\"}\n{\"question\":\"hi\",\"answer\":\"b\"}", "two answers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Options{SeedFiles: []string{writeFile(t, "faq.jsonl", tc.body)}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		if _, err := New(Options{SeedFiles: []string{filepath.Join(t.TempDir(), "nope.jsonl")}}); err == nil {
			t.Fatal("no error for a missing seed file")
		}
	})
	t.Run("yaml", func(t *testing.T) {
		p := writeFile(t, "faq.yaml", "- question: Where is it?\n  answer: Here.\n")
		s := newStage(t, Options{SeedFiles: []string{p}})
		if ans, hit := serve(t, s, request("", "m", user("where is it"))); !hit || ans.Text() != "Here." {
			t.Fatal("yaml seed not served")
		}
	})
	t.Run("shipped file", func(t *testing.T) {
		// The shipped file, read from the module root as eoc-proxy reads it beside eoc.yaml.
		s := newStage(t, Options{SeedFiles: []string{"data/faq.jsonl"}, Files: os.DirFS("../..")})
		if ans, hit := serve(t, s, request("", "m", user("what is eoc-proxy"))); !hit || !strings.Contains(ans.Text(), "proxy") {
			t.Fatal("shipped seed not served")
		}
	})
}

func TestSimilarHits(t *testing.T) {
	s := newStage(t, Options{})
	teach(t, s, request("", "m", user("How do I reset my password?")), neural("Click 'Forgot password'.", 123.5))
	for _, tc := range []struct{ name, q string }{
		{"same", "How do I reset my password?"},
		{"case", "HOW DO I RESET MY PASSWORD?"},
		{"whitespace", "  how do  i reset\nmy password?"},
		{"punctuation", "how do i reset my password"},
		{"unicode", "ｈｏｗ ｄｏ ｉ ｒｅｓｅｔ ｍｙ ｐａｓｓｗｏｒｄ？"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ans, hit := serve(t, s, request("", "m", user(tc.q)))
			if !hit {
				t.Fatal("miss")
			}
			if ans.Text() != "Click 'Forgot password'." || ans.Energy.Saved != 123.5 || ans.Usage.CompletionTokens != 7 {
				t.Errorf("got %q saved %v usage %+v", ans.Text(), ans.Energy.Saved, ans.Usage)
			}
		})
	}
}

// TestGuards learns one side of each pair and asks the other. At the default threshold the pairs
// are too far apart anyway; at 0.5 the cosine lets them through and only a guard stops them.
func TestGuards(t *testing.T) {
	pairs := []struct{ name, learned, asked string }{
		{"enable disable", "How do I enable 2FA on my account in the settings page?", "How do I disable 2FA on my account in the settings page?"},
		{"can cannot", "Why I can log in to the admin dashboard from my laptop", "Why I cannot log in to the admin dashboard from my laptop"},
		{"is isn't", "The backup job is running on the main database server tonight", "The backup job isn't running on the main database server tonight"},
		{"allow deny", "Write a firewall rule to allow inbound traffic on the web port", "Write a firewall rule to deny inbound traffic on the web port"},
		{"lock unlock", "Explain how to lock the shared spreadsheet for the whole team", "Explain how to unlock the shared spreadsheet for the whole team"},
		{"numbers", "If I buy 3 apples and each costs two dollars what do I pay in total", "If I buy 4 apples and each costs two dollars what do I pay in total"},
		{"number words", "If I buy three apples and each costs two dollars what do I pay in total", "If I buy four apples and each costs two dollars what do I pay in total"},
		{"decimals", "Convert 3.5 kilometres into miles and show the working step by step", "Convert 35 kilometres into miles and show the working step by step"},
		{"entity", "Write a short travel guide for a weekend in Paris with three museums", "Write a short travel guide for a weekend in Rome with three museums"},
		{"entity product", "Summarise the release notes of PostgreSQL for the operations team", "Summarise the release notes of MySQL for the operations team"},
		{"entity version", "What changed in Python 3.12 compared with the previous release", "What changed in Python 3.13 compared with the previous release"},
	}
	for _, th := range []float64{DefaultThreshold, 0.5} {
		for _, tc := range pairs {
			t.Run(tc.name+"/"+strings.TrimRight(strings.TrimRight(jsonNum(th), "0"), "."), func(t *testing.T) {
				s := newStage(t, Options{Threshold: th})
				teach(t, s, request("", "m", user(tc.learned)), neural("answer", 1))
				if ans, hit := serve(t, s, request("", "m", user(tc.asked))); hit {
					t.Fatalf("%q answered %q's answer %q", tc.asked, tc.learned, ans.Text())
				}
				if th < DefaultThreshold && s.Stats().Guarded == 0 {
					t.Errorf("the pair never reached a guard; make it more alike")
				}
			})
		}
	}
}

func jsonNum(f float64) string { b, _ := json.Marshal(f); return string(b) }

func TestIsolation(t *testing.T) {
	s := newStage(t, Options{})
	q := "How do I reset my password?"
	teach(t, s, request("acme", "llama3", user(q)), neural("acme's answer", 1))
	for _, tc := range []struct {
		name string
		req  *cascade.Request
		hit  bool
	}{
		{"same tenant and model", request("acme", "llama3", user(q)), true},
		{"other tenant", request("globex", "llama3", user(q)), false},
		{"no tenant", request("", "llama3", user(q)), false},
		{"other model", request("acme", "mistral", user(q)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, hit := serve(t, s, tc.req); hit != tc.hit {
				t.Errorf("hit = %v, want %v", hit, tc.hit)
			}
		})
	}
}

func TestHistory(t *testing.T) {
	last := user("What is its population?")
	paris := []cascade.Message{user("Tell me about Paris."), msg("assistant", "Paris is the capital of France."), last}
	for _, tc := range []struct {
		name string
		msgs []cascade.Message
		hit  bool
		// guarded rows hold at a threshold of 0.5 too: a guard, not the cosine, tells them apart.
		guarded bool
	}{
		{"same history", paris, true, true},
		{"other history", []cascade.Message{user("Tell me about Rome."), msg("assistant", "Rome is the capital of Italy."), last}, false, true},
		{"no history", []cascade.Message{last}, false, false},
		{"system prompt added", append([]cascade.Message{msg("system", "You are a pirate.")}, paris...), false, false},
		{"other last message", []cascade.Message{paris[0], paris[1], user("What is its area?")}, false, false},
	} {
		for _, th := range []float64{DefaultThreshold, 0.5} {
			if th != DefaultThreshold && !tc.guarded {
				continue
			}
			t.Run(tc.name+"/"+jsonNum(th), func(t *testing.T) {
				s := newStage(t, Options{Threshold: th})
				teach(t, s, request("", "m", paris...), neural("About 2.1 million.", 1))
				if _, hit := serve(t, s, request("", "m", tc.msgs...)); hit != tc.hit {
					t.Errorf("hit = %v, want %v", hit, tc.hit)
				}
			})
		}
	}
}

func TestSkipsSimilarity(t *testing.T) {
	hot, cold, two := 0.9, 0.2, 2
	tools := []cascade.Tool{{Type: "function", Function: cascade.ToolFunction{Name: "f"}}}
	q := "How do I reset my password?"
	for _, tc := range []struct {
		name string
		edit func(*cascade.ChatRequest)
		hit  bool
	}{
		{"plain", func(*cascade.ChatRequest) {}, true},
		{"cold", func(c *cascade.ChatRequest) { c.Temperature = &cold }, true},
		{"hot", func(c *cascade.ChatRequest) { c.Temperature = &hot }, false},
		{"tools", func(c *cascade.ChatRequest) { c.Tools = tools }, false},
		{"n=2", func(c *cascade.ChatRequest) { c.N = &two }, false},
		{"json", func(c *cascade.ChatRequest) { c.ResponseFormat = &cascade.ResponseFormat{Type: "json_object"} }, false},
		{"stop differs", func(c *cascade.ChatRequest) { c.Stop = json.RawMessage(`"\n"`) }, false},
		{"max_tokens too small", func(c *cascade.ChatRequest) { n := 3; c.MaxTokens = &n }, false},
		{"max_tokens enough", func(c *cascade.ChatRequest) { n := 7; c.MaxTokens = &n }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStage(t, Options{})
			teach(t, s, request("", "m", user(q)), neural("answer", 1))
			r := request("", "m", user(q))
			tc.edit(&r.Chat)
			if _, hit := serve(t, s, rekey(r)); hit != tc.hit {
				t.Errorf("served: hit = %v, want %v", hit, tc.hit)
			}
			// The same request is not learned either, unless it could be matched.
			s2 := newStage(t, Options{})
			s2.Learn(rekey(r), neural("answer", 1))
			s2.Flush()
			if got := s2.Stats().Learned == 1; got != (tc.hit || tc.name == "stop differs" || strings.HasPrefix(tc.name, "max_tokens")) {
				t.Errorf("learned = %v", got)
			}
		})
	}
}

func TestLearnFilters(t *testing.T) {
	r := request("", "m", user("How do I reset my password?"))
	for _, tc := range []struct {
		name  string
		req   *cascade.Request
		edit  func(*cascade.Answer)
		learn bool
	}{
		{"complete neural", r, func(*cascade.Answer) {}, true},
		{"cut by length", r, func(a *cascade.Answer) { a.Choices[0].FinishReason = "length" }, false},
		{"incomplete", r, func(a *cascade.Answer) { a.Complete = false }, false},
		{"from a cheap stage", r, func(a *cascade.Answer) { a.Backend = "" }, false},
		{"tool call", r, func(a *cascade.Answer) {
			a.Choices[0].Message.ToolCalls = []cascade.ToolCall{{ID: "1", Function: cascade.ToolCallFunction{Name: "f"}}}
		}, false},
		{"empty", r, func(a *cascade.Answer) { e := ""; a.Choices[0].Message.Content = &e }, false},
		{"no-store", &cascade.Request{Chat: r.Chat, Raw: r.Raw, NoStore: true}, func(*cascade.Answer) {}, false},
		{"no-cache still learns", &cascade.Request{Chat: r.Chat, Raw: r.Raw, NoCache: true}, func(*cascade.Answer) {}, true},
		{"assistant last", request("", "m", user("hi"), msg("assistant", "hello")), func(*cascade.Answer) {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStage(t, Options{})
			ans := neural("answer", 1)
			tc.edit(ans)
			s.Learn(tc.req, ans)
			s.Flush()
			if got := s.Stats().Learned == 1; got != tc.learn {
				t.Errorf("learned = %v, want %v", got, tc.learn)
			}
		})
	}
}

// TestSavedIsOriginalCost: an answer that a memoizing stage served carries Saved, and that is
// what it is remembered for, not the cheap stage's joules.
func TestSavedIsOriginalCost(t *testing.T) {
	s := newStage(t, Options{})
	ans := neural("answer", 0.01)
	ans.Energy.Saved = 55
	teach(t, s, request("", "m", user("How do I reset my password?")), ans)
	got, hit := serve(t, s, request("", "m", user("how do I reset my password")))
	if !hit || got.Energy.Saved != 55 {
		t.Fatalf("hit %v saved %v, want 55", hit, got)
	}
}

func TestPersistence(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kv")
	cfg := Options{DataDir: dir}
	s := newStage(t, cfg)
	teach(t, s, request("acme", "llama3", user("How do I reset my password?")), neural("Use the reset link.", 321))
	teach(t, s, request("acme", "llama3", msg("system", "Be brief."), user("What is DNS?")), neural("Names to addresses.", 12))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := newStage(t, cfg)
	if st := s2.Stats(); st.Entries != 2 || st.Collections != 1 {
		t.Fatalf("reopened: %+v", st)
	}
	ans, hit := serve(t, s2, request("acme", "llama3", user("how do i reset my password")))
	if !hit || ans.Text() != "Use the reset link." || ans.Energy.Saved != 321 {
		t.Fatalf("after reopen: hit %v %+v", hit, ans)
	}
	if _, hit := serve(t, s2, request("acme", "llama3", msg("system", "Be brief."), user("what is dns"))); !hit {
		t.Fatal("conversation with a system prompt not found after reopen")
	}
	if _, hit := serve(t, s2, request("other", "llama3", user("How do I reset my password?"))); hit {
		t.Fatal("reopened store crossed tenants")
	}
	// Learning continues where the store left off.
	teach(t, s2, request("acme", "llama3", user("What is NTP?")), neural("Time sync.", 3))
	if st := s2.Stats(); st.Entries != 3 {
		t.Fatalf("after learning again: %+v", st)
	}
}

func TestEviction(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kv")
	cfg := Options{DataDir: dir, MaxEntries: 3}
	s := newStage(t, cfg)
	qs := []string{"How do I reset my password?", "What is DNS?", "Explain TCP handshakes.", "What is a VLAN?", "Define latency."}
	for _, q := range qs {
		teach(t, s, request("", "m", user(q)), neural("answer to "+q, 1))
	}
	check := func(s *Stage) {
		t.Helper()
		for i, q := range qs {
			_, hit := serve(t, s, request("", "m", user(q)))
			if want := i >= 2; hit != want {
				t.Errorf("%q: hit = %v, want %v", q, hit, want)
			}
		}
		if st := s.Stats(); st.Entries != 3 {
			t.Errorf("entries = %d, want 3", st.Entries)
		}
	}
	check(s)
	if s.Stats().Evicted != 2 {
		t.Errorf("evicted = %d, want 2", s.Stats().Evicted)
	}
	_ = s.Close()
	check(newStage(t, cfg)) // evicted entries are gone from disk too
	// A smaller bound on reopen evicts the oldest.
	s3 := newStage(t, Options{DataDir: dir, MaxEntries: 1})
	if _, hit := serve(t, s3, request("", "m", user(qs[4]))); !hit || s3.Stats().Entries != 1 {
		t.Errorf("reopen with max 1: hit %v, %+v", hit, s3.Stats())
	}
}

func TestCorruptStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kv")
	cfg := Options{DataDir: dir}
	s := newStage(t, cfg)
	teach(t, s, request("", "m", user("How do I reset my password?")), neural("kept", 1))
	teach(t, s, request("", "m", user("What is DNS?")), neural("lost", 1))
	_ = s.Close()

	// Truncate one entry's file, as a crash mid-write would.
	docs, _ := filepath.Glob(filepath.Join(dir, "*", "*.gob"))
	var victim string
	for _, d := range docs {
		if doc, ok := readDoc(d); ok && doc.Metadata[metaAnswer] == "lost" {
			victim = d
		}
	}
	if victim == "" {
		t.Fatal("no document file found")
	}
	if err := os.WriteFile(victim, []byte("\x00garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	s2 := newStage(t, cfg)
	if ans, hit := serve(t, s2, request("", "m", user("How do I reset my password?"))); !hit || ans.Text() != "kept" {
		t.Fatalf("the readable entry did not survive: %v", hit)
	}
	if _, err := os.Stat(victim + ".corrupt"); err != nil {
		t.Errorf("the unreadable file was not set aside: %v", err)
	}
	teach(t, s2, request("acme", "m", user("What is DNS?")), neural("acme's", 1))
	_ = s2.Close()

	// A collection whose metadata does not decode is moved out; the others load, and the stage
	// starts anyway. chromem-go v0.7.0 names a collection's metadata file 00000000.gob.
	metas, _ := filepath.Glob(filepath.Join(dir, "*", "00000000.gob"))
	if len(metas) != 2 {
		t.Fatalf("%d collection metadata files, want 2", len(metas))
	}
	for _, m := range metas {
		if b, _ := os.ReadFile(m); !strings.Contains(string(b), "acme") {
			_ = os.WriteFile(m, []byte("nope"), 0o600)
		}
	}
	s3 := newStage(t, cfg)
	if st := s3.Stats(); st.Entries != 1 || st.Collections != 1 {
		t.Errorf("entries = %d in %d collections, want acme's 1 in 1", st.Entries, st.Collections)
	}
	if ans, hit := serve(t, s3, request("acme", "m", user("What is DNS?"))); !hit || ans.Text() != "acme's" {
		t.Errorf("the readable collection did not survive: %v", hit)
	}
	if moved, _ := filepath.Glob(filepath.Join(dir+".corrupt", "*")); len(moved) != 1 {
		t.Errorf("%d collections in %s.corrupt, want 1", len(moved), dir)
	}
	teach(t, s3, request("", "m", user("What is DNS?")), neural("new", 1))

	// A data_dir that is a file cannot be opened at all: the stage learns in memory.
	file := writeFile(t, "notadir", "x")
	s4 := newStage(t, Options{DataDir: file})
	teach(t, s4, request("", "m", user("What is DNS?")), neural("mem", 1))
}

// blockingEmbedder holds every call until release is closed.
type blockingEmbedder struct {
	release chan struct{}
	calls   atomic.Int64
}

func (b *blockingEmbedder) ID() string { return "blocking" }
func (b *blockingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, energy.Figure, error) {
	b.calls.Add(1)
	<-b.release
	return Builtin{}.Embed(ctx, texts)
}

// TestLearnWithoutFlush: answers queued while the worker lingers after emptying the queue are
// learned when the linger ends, with no Flush to cut it short (the deadline only bounds a hang).
// A model server's embedder, whose call Learn does not make itself, sends them to the worker.
func TestLearnWithoutFlush(t *testing.T) {
	s := newStage(t, Options{Embedder: &countingEmbedder{}})
	s.Learn(request("", "m", user("How do I reset my password?")), neural("Use the link.", 1))
	for i := 0; s.Stats().Learned < 1; i++ {
		if i > 1000 {
			t.Fatal("the first answer was never learned")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The worker has emptied the queue: these come while it lingers, or after.
	s.Learn(request("", "m", user("How do I rename my account?")), neural("In settings.", 1))
	s.Learn(request("", "m", user("How do I delete my account?")), neural("Ask support.", 1))
	for i := 0; s.Stats().Learned < 3; i++ {
		if i > 1000 {
			t.Fatalf("learned %d of 3 answers", s.Stats().Learned)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLearnInline: an answer whose learning does no I/O is learned by Learn itself, on the
// caller's goroutine, before it returns: no Flush, no worker. Any other goes to the worker: a
// model server's embedder to call, a store on disk, other replicas to publish to.
func TestLearnInline(t *testing.T) {
	s := newStage(t, Options{})
	s.Learn(request("", "m", user("How do I reset my password?")), neural("Use the link.", 1))
	if st := s.Stats(); st.Learned != 1 {
		t.Fatalf("learned %d when Learn returned, want 1 (learned inline)", st.Learned)
	}
	if ans, ok := serve(t, s, rekey(request("", "m", user("how do I reset my password")))); !ok || *ans.Choices[0].Message.Content != "Use the link." {
		t.Fatalf("the answer learned inline does not serve a similar question: %v %v", ok, ans)
	}

	withVec, without := job{vec: make([]float32, 2*BuiltinDim)}, job{}
	shared := newStage(t, Options{})
	shared.Share(&busPort{bus: newBus()})
	for _, tc := range []struct {
		name       string
		s          *Stage
		vec, novec bool // inline, with the vector at hand and without
	}{
		{"built-in embedder, in memory", s, true, true},
		{"model server's embedder", newStage(t, Options{Embedder: &countingEmbedder{}}), true, false},
		{"store on disk", newStage(t, Options{DataDir: t.TempDir()}), false, false},
		{"other replicas", shared, false, false},
	} {
		if got := tc.s.inline(&withVec); got != tc.vec {
			t.Errorf("%s, vector at hand: inline %v, want %v", tc.name, got, tc.vec)
		}
		if got := tc.s.inline(&without); got != tc.novec {
			t.Errorf("%s, no vector: inline %v, want %v", tc.name, got, tc.novec)
		}
	}
}

func TestQueueFullDrops(t *testing.T) {
	emb := &blockingEmbedder{release: make(chan struct{})}
	s := newStage(t, Options{LearnQueue: 2, Embedder: emb})
	for i := range 10 {
		s.Learn(request("", "m", user("question number "+string(rune('a'+i)))), neural("a", 1))
	}
	// One job is in the worker, two in the queue: the other seven were dropped, not waited for.
	if got := s.Stats().Dropped; got < 7 {
		t.Errorf("dropped = %d, want ≥ 7", got)
	}
	close(emb.release)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Learned+st.Dropped != 10 {
		t.Errorf("learned %d + dropped %d != 10", st.Learned, st.Dropped)
	}
	s.Learn(request("", "m", user("after close")), neural("a", 1)) // must not panic
	s.Flush()                                                      // must not block
}

// failingEmbedder fails once fail is set.
type failingEmbedder struct{ fail atomic.Bool }

func (f *failingEmbedder) ID() string { return "failing" }
func (f *failingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, energy.Figure, error) {
	if f.fail.Load() {
		return nil, energy.Figure{}, errors.New("connection refused")
	}
	return Builtin{}.Embed(ctx, texts)
}

func TestEmbedderDown(t *testing.T) {
	emb := &failingEmbedder{}
	s := newStage(t, Options{Embedder: emb})
	r := request("", "m", user("How do I reset my password?"))
	teach(t, s, r, neural("a", 1))
	emb.fail.Store(true)
	_, err := s.Serve(context.Background(), request("", "m", user("How do I reset my password?")), nil)
	if err == nil || errors.Is(err, cascade.ErrMiss) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err = %v, want the embedder's error", err)
	}
	s.Learn(request("", "m", user("Another question entirely")), neural("b", 1))
	s.Flush()
	if st := s.Stats(); st.Failed != 1 {
		t.Errorf("failed = %d, want 1", st.Failed)
	}
}

// TestLearnReusesServeVector: after a miss, learning the same request does not embed again.
func TestLearnReusesServeVector(t *testing.T) {
	emb := &countingEmbedder{}
	s := newStage(t, Options{Embedder: emb})
	teach(t, s, request("", "m", user("first question")), neural("a", 1))
	r := request("", "m", user("second question"))
	if _, hit := serve(t, s, r); hit {
		t.Fatal("unexpected hit")
	}
	before := emb.calls.Load()
	teach(t, s, r, neural("b", 1))
	if emb.calls.Load() != before {
		t.Errorf("learning embedded again")
	}
}

type countingEmbedder struct{ calls atomic.Int64 }

func (c *countingEmbedder) ID() string { return "counting" }
func (c *countingEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, energy.Figure, error) {
	c.calls.Add(1)
	return Builtin{}.Embed(ctx, texts)
}

func TestImportExport(t *testing.T) {
	src := newStage(t, Options{})
	teach(t, src, request("acme", "llama3", user("How do I reset my password?")), neural("Use the link.", 5))
	teach(t, src, request("", "mistral", msg("system", "Be brief."), user("What is DNS?")), neural("Names.", 7))
	stopReq := request("", "mistral", user("List three colours"))
	stopReq.Chat.Stop = json.RawMessage(`["\n"]`)
	teach(t, src, rekey(stopReq), neural("red", 2))
	var buf strings.Builder
	var last, total int
	n, err := src.Export(&buf, func(d, tot int) { last, total = d, tot })
	if err != nil || n != 3 || last != 3 || total != 3 {
		t.Fatalf("export: n=%d err=%v progress %d/%d", n, err, last, total)
	}

	dir := filepath.Join(t.TempDir(), "kv")
	dst := newStage(t, Options{DataDir: dir})
	plain := "{\"question\":\"Where is the office?\",\"answer\":\"Berlin.\"}\n"
	n, err = dst.Import(context.Background(), strings.NewReader(buf.String()+plain), Record{Model: "llama3", Joules: 9}, nil)
	if err != nil || n != 4 {
		t.Fatalf("import: n=%d err=%v", n, err)
	}
	_ = dst.Close()
	re := newStage(t, Options{DataDir: dir})
	for _, tc := range []struct {
		name   string
		req    *cascade.Request
		answer string
		saved  float64
	}{
		{"tenant kept", request("acme", "llama3", user("how do i reset my password")), "Use the link.", 5},
		{"context kept", request("", "mistral", msg("system", "Be brief."), user("What is DNS?")), "Names.", 7},
		{"stop kept", rekey(stopReq), "red", 2},
		{"defaults applied", request("", "llama3", user("Where is the office?")), "Berlin.", 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ans, hit := serve(t, re, tc.req)
			if !hit || ans.Text() != tc.answer || ans.Energy.Saved != tc.saved {
				t.Fatalf("hit %v ans %+v", hit, ans)
			}
		})
	}
	if _, hit := serve(t, re, request("", "mistral", user("What is DNS?"))); hit {
		t.Error("imported context lost: a bare question matched a system-prompted entry")
	}

	_, err = dst.Import(context.Background(), strings.NewReader("{\"question\":\"q\",\"answer\":\"a\"}\n"), Record{}, nil)
	if err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("import without a model: err = %v", err)
	}
}

func TestConcurrentServeLearn(t *testing.T) {
	s := newStage(t, Options{DataDir: filepath.Join(t.TempDir(), "kv"), MaxEntries: 20})
	done := make(chan struct{})
	for w := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 50 {
				q := "question " + string(rune('a'+w)) + " " + jsonNum(float64(i%30))
				r := request("", "m", user(q))
				if _, err := s.Serve(context.Background(), r, nil); err != nil && !errors.Is(err, cascade.ErrMiss) {
					t.Error(err)
				}
				s.Learn(r, neural("a", 1))
			}
		}()
	}
	for range 4 {
		<-done
	}
	s.Flush()
	if st := s.Stats(); st.Entries > 20 {
		t.Errorf("entries %d over the bound", st.Entries)
	}
}

// TestContractions learns one wording and asks another, in the shape of a held-out set:
// contractions and their expansions are one question; a contraction that flips the meaning, a
// different number or a different name is still refused, at the default threshold and at one
// low enough that only a guard stops it.
func TestContractions(t *testing.T) {
	hits := []struct{ name, learned, asked string }{
		{"what's", "What is the default port for PostgreSQL?", "what's the default port for PostgreSQL?"},
		{"what is", "What’s the difference between TCP and UDP?", "What is the difference between TCP and UDP?"},
		{"whats", "What is a good name for a cat?", "whats a good name for a cat"},
		{"it's", "It's slow when I open large files in the editor, why?", "It is slow when I open large files in the editor, why?"},
		{"I'm", "I am getting a timeout from the API, what should I do?", "I'm getting a timeout from the API, what should I do?"},
		{"can't cannot", "I can't log in to the admin dashboard, what now?", "I cannot log in to the admin dashboard, what now?"},
		{"don't", "Why don't my tests run in parallel?", "Why do not my tests run in parallel?"},
		{"isn't", "Why is not the cron job running at midnight?", "Why isn't the cron job running at midnight?"},
		{"you're", "How do I know you are up to date?", "How do I know you're up to date?"},
		{"won't", "Why won't the laptop charge overnight?", "Why will not the laptop charge overnight?"},
	}
	for _, tc := range hits {
		t.Run("hit/"+tc.name, func(t *testing.T) {
			s := newStage(t, Options{})
			teach(t, s, request("", "m", user(tc.learned)), neural("the answer", 1))
			if ans, hit := serve(t, s, request("", "m", user(tc.asked))); !hit || ans.Text() != "the answer" {
				t.Fatalf("%q did not find %q", tc.asked, tc.learned)
			}
		})
	}
	refused := []struct{ name, learned, asked string }{
		{"is isn't", "What's wrong when the backup service is running at night?", "What's wrong when the backup service isn't running at night?"},
		{"can can't", "Why can I log in to the admin dashboard from my laptop?", "Why can't I log in to the admin dashboard from my laptop?"},
		{"can cannot", "Why can I log in to the admin dashboard from my laptop?", "Why cannot I log in to the admin dashboard from my laptop?"},
		{"do don't", "Why do my tests run in parallel on the build server?", "Why don't my tests run in parallel on the build server?"},
		{"will won't", "Why will the laptop charge overnight when it is switched off?", "Why won't the laptop charge overnight when it is switched off?"},
		{"number", "What's 15% of 240 when rounded to the nearest whole number?", "What's 15% of 250 when rounded to the nearest whole number?"},
		{"number word", "What's the cost of three tickets for the museum on Sunday?", "What's the cost of four tickets for the museum on Sunday?"},
		{"name", "What's the best time of year to visit Paris with children?", "What's the best time of year to visit Rome with children?"},
		{"name and contraction", "What is the best time of year to visit Paris with children?", "What's the best time of year to visit Lisbon with children?"},
	}
	for _, th := range []float64{DefaultThreshold, 0.5} {
		for _, tc := range refused {
			t.Run("refused/"+tc.name+"/"+jsonNum(th), func(t *testing.T) {
				s := newStage(t, Options{Threshold: th})
				teach(t, s, request("", "m", user(tc.learned)), neural("answer", 1))
				if ans, hit := serve(t, s, request("", "m", user(tc.asked))); hit {
					t.Fatalf("%q answered %q's answer %q", tc.asked, tc.learned, ans.Text())
				}
				if th < DefaultThreshold && s.Stats().Guarded == 0 {
					t.Errorf("the pair never reached a guard; make it more alike")
				}
			})
		}
	}
}

// TestSeedSavedFollowsTracker: a seed without joules of its own saves the stated default until
// the tracker has a figure for the model asked; a seed file's own figure always wins.
func TestSeedSavedFollowsTracker(t *testing.T) {
	faq := writeFile(t, "faq.jsonl", `{"question":"What is the capital of France?","answer":"Paris."}
{"question":"How do I enable 2FA?","answer":"Settings, Security, Enable.","joules":42}
`)
	tr := energy.NewTracker(1)
	s := newStage(t, Options{SeedFiles: []string{faq}, Estimator: tr})
	saved := func(q string) (float64, string, int) {
		t.Helper()
		ans, hit := serve(t, s, request("", "m", user(q)))
		if !hit {
			t.Fatalf("%q: miss", q)
		}
		return ans.Energy.Saved, ans.Energy.Reason, ans.Usage.CompletionTokens
	}
	if j, reason, _ := saved("What is the capital of France?"); j != DefaultSeedJoules || reason != energy.SavedStated {
		t.Fatalf("before any call: %v %q", j, reason)
	}
	tr.Observe("m", energy.Figure{Joules: 8, Grade: energy.Measured}, 4) // 2 J/token
	if j, reason, tokens := saved("What is the capital of France?"); j != 2*float64(tokens) || reason != energy.SavedRunningMeasured {
		t.Errorf("after a call: %v %q, want %v", j, reason, 2*float64(tokens))
	}
	if j, _, _ := saved("How do I enable 2FA?"); j != 42 {
		t.Errorf("the file's own figure: %v, want 42", j)
	}
}

// readDoc decodes one of chromem-go's document files.
func readDoc(p string) (chromem.Document, bool) {
	f, err := os.Open(p)
	if err != nil {
		return chromem.Document{}, false
	}
	defer func() { _ = f.Close() }()
	var d chromem.Document
	return d, gob.NewDecoder(f).Decode(&d) == nil && d.ID != ""
}

// TestLearnReusesServeSketch: learning the answer to a miss takes the sketch Serve made from
// the built-in counts, and projects nothing again; it stores the vector Serve would have made.
func TestLearnReusesServeSketch(t *testing.T) {
	s := newStage(t, Options{})
	teach(t, s, request("", "m", user("first question")), neural("a", 1))
	r := request("", "m", user("second question"))
	if _, hit := serve(t, s, r); hit {
		t.Fatal("unexpected hit")
	}
	e, _, ok := s.recent.peek(r.Key())
	v, _ := embedQueryJoined(e.q)
	if !ok || e.vec != nil || e.sketch != s.sketchOf(v) {
		t.Fatalf("Serve kept no sketch (%v), a vector, or another sketch", ok)
	}
	if q, _ := s.query(r); e.q != q {
		t.Fatalf("Serve kept the query %+v, not %+v", e.q, q)
	}
	// A marker in place of the sketch shows which one learn stores.
	marker := sketch{1, 2, 3, 4}
	s.recent.add(r.Key(), embedded{q: e.q, vec: e.vec, sketch: marker})
	teach(t, s, r, neural("b", 1))
	col := s.collection("", "m")
	var found bool
	for _, x := range col.entries() {
		if x.question == "second question" {
			found = x.sketch == marker
			if !slices.Equal(x.vec, v) {
				t.Error("learn stored another vector than the query's")
			}
		}
	}
	if !found {
		t.Error("learn projected the vector again instead of taking Serve's sketch")
	}
}

// TestLearnReusesBuiltinVector: when Serve made the query's vector (the scan found a candidate,
// here one the guards turn down: its answer is longer than max_tokens), learning the answer
// stores that vector, the one embedQueryJoined makes, and embeds nothing again.
func TestLearnReusesBuiltinVector(t *testing.T) {
	s := newStage(t, Options{})
	q := "How do I reset my password?"
	teach(t, s, request("", "m", user(q)), neural("a", 1))
	r := request("", "m", user(q))
	n := 3
	r.Chat.MaxTokens = &n
	r = rekey(r)
	if _, hit := serve(t, s, r); hit {
		t.Fatal("an answer longer than max_tokens served")
	}
	e, _, ok := s.recent.peek(r.Key())
	v, _ := embedQueryJoined(e.q)
	if !ok || !slices.Equal(e.vec, v) {
		t.Fatalf("Serve kept no vector (%v) or another one", ok)
	}
	// A copy in place of the vector shows which one learn stores.
	marker := slices.Clone(e.vec)
	s.recent.add(r.Key(), embedded{q: e.q, vec: marker, sketch: e.sketch})
	teach(t, s, r, neural("b", 1))
	for _, x := range s.collection("", "m").entries() {
		if x.answer == "b" && &x.vec[0] != &marker[0] {
			t.Error("learn embedded the query again instead of taking Serve's vector")
		}
	}
}

// TestLearnJoinsServeCounts: a built-in miss that made no vector keeps the query's feature
// counts, and learning its answer joins those (not the query counted again) into the vector
// embedQueryJoined makes; when the ring slot was written again since, learning counts the
// query itself.
func TestLearnJoinsServeCounts(t *testing.T) {
	s := newStage(t, Options{})
	teach(t, s, request("", "m", user("first question")), neural("a", 1))
	r := request("", "m", msg("system", "Be brief."), user("second question"))
	if _, hit := serve(t, s, r); hit {
		t.Fatal("unexpected hit")
	}
	e, ref, ok := s.recent.peek(r.Key())
	if !ok || e.vec != nil || ref.gen == 0 {
		t.Fatalf("Serve kept no counts: %v %+v", ok, ref)
	}
	var c [2 * BuiltinDim]int32
	if !s.recent.counts(ref, &c) {
		t.Fatal("the counts kept are not found")
	}
	var want [2 * BuiltinDim]int32
	countQueryInto(&want, e.q)
	if c != want {
		t.Fatal("Serve kept other counts than the query's")
	}
	// Counts of another query in the slot show which ones learn joins.
	other, _ := s.query(request("", "m", user("a third question, unlike the others")))
	var oc [2 * BuiltinDim]int32
	countQueryInto(&oc, other)
	s.recent.slots[ref.slot].counts = oc
	teach(t, s, r, neural("b", 1))
	v, _ := embedQueryJoined(other)
	if x := learned(s, "b"); x == nil || !slices.Equal(x.vec, v) {
		t.Fatal("learn did not join the counts Serve kept")
	}

	// Written again: the query is counted.
	for i := range recentSize {
		s.recent.add("k"+strconv.Itoa(i), embedded{})
	}
	if s.recent.counts(ref, &c) {
		t.Fatal("counts found in a slot written again")
	}
	if err := s.learn(job{model: "m", q: e.q, counts: ref, sketch: e.sketch, sketched: true, answer: "c"}); err != nil {
		t.Fatal(err)
	}
	v, _ = embedQueryJoined(e.q)
	if x := learned(s, "c"); x == nil || !slices.Equal(x.vec, v) {
		t.Fatal("learn did not embed the query when its counts were gone")
	}
}

// learned is the entry of model m whose answer is answer, nil when there is none.
func learned(s *Stage, answer string) *entry {
	for _, x := range s.collection("", "m").entries() {
		if x.answer == answer {
			return x
		}
	}
	return nil
}

// TestNotMyKindEmbedsNothing: a call kv can neither answer nor learn (tools offered, a tool
// call or a tool result in the conversation, the assistant's turn, several choices, a JSON
// answer, an image) is a miss decided before any embedding, in Serve and in Learn alike; so is
// a question for a tenant and model with nothing learned yet.
func TestNotMyKindEmbedsNothing(t *testing.T) {
	emb := &countingEmbedder{}
	s := newStage(t, Options{Embedder: emb})
	teach(t, s, request("", "m", user("How do I reset my password?")), neural("Use the link.", 1))
	withTools := request("", "m", user("How do I reset my password?"))
	withTools.Chat.Tools = []cascade.Tool{{Type: "function", Function: cascade.ToolFunction{Name: "reset"}}}
	toolCall := msg("assistant", "")
	toolCall.Content = nil
	toolCall.ToolCalls = []cascade.ToolCall{{ID: "c1", Type: "function", Function: cascade.ToolCallFunction{Name: "reset", Arguments: "{}"}}}
	toolResult := msg("tool", "done")
	toolResult.ToolCallID = "c1"
	two := 2
	several := request("", "m", user("How do I reset my password?"))
	several.Chat.N = &two
	asJSON := request("", "m", user("How do I reset my password?"))
	asJSON.Chat.ResponseFormat = &cascade.ResponseFormat{Type: "json_object"}
	image := request("", "m", cascade.Message{Role: "user", Content: json.RawMessage(`[{"type":"text","text":"How do I reset my password?"},{"type":"image_url","image_url":{"url":"data:,"}}]`)})
	for name, r := range map[string]*cascade.Request{
		"tools offered":       rekey(withTools),
		"tool call and reply": request("", "m", user("Reset my password"), toolCall, toolResult, user("How do I reset my password?")),
		"assistant's turn":    request("", "m", user("How do I reset my password?"), msg("assistant", "Use")),
		"several choices":     rekey(several),
		"json answer":         rekey(asJSON),
		"image":               image,
		"nothing learned":     request("other-tenant", "m", user("How do I reset my password?")),
	} {
		before := emb.calls.Load()
		if _, hit := serve(t, s, r); hit {
			t.Errorf("%s: a hit", name)
		}
		if n := emb.calls.Load() - before; n != 0 {
			t.Errorf("%s: Serve made %d embedding calls", name, n)
		}
		if name == "nothing learned" {
			continue // its answer is learned: that embeds
		}
		before = emb.calls.Load()
		s.Learn(r, neural("Use the link.", 1))
		s.Flush()
		if n := emb.calls.Load() - before; n != 0 {
			t.Errorf("%s: Learn made %d embedding calls", name, n)
		}
	}
}
