package graph

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/internal/text"
)

func msg(role, text string) cascade.Message {
	b, _ := json.Marshal(text)
	return cascade.Message{Role: role, Content: b}
}

func ask(msgs ...cascade.Message) *cascade.Request {
	r := &cascade.Request{Chat: cascade.ChatRequest{Model: "any-model", Messages: msgs}}
	r.Raw, _ = json.Marshal(r.Chat)
	return r
}

// shipped is the stage over the shipped facts, read from the module root as eoc-proxy reads
// them beside eoc.yaml.
func shipped(t testing.TB) *Stage {
	t.Helper()
	s, err := New(Options{Files: []string{"data/facts.tsv"}, FS: os.DirFS("../..")})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func serve(t testing.TB, s *Stage, r *cascade.Request) (string, bool) {
	t.Helper()
	ans, err := s.Serve(context.Background(), r, nil)
	if errors.Is(err, cascade.ErrMiss) {
		return "", false
	}
	if err != nil {
		t.Fatalf("Serve: %v", err)
	}
	return ans.Text(), true
}

func TestAnswers(t *testing.T) {
	s := shipped(t)
	if s.Len() < 300 {
		t.Fatalf("shipped facts: %d, want a few hundred", s.Len())
	}
	for _, tc := range []struct{ name, q, want string }{
		{"what is the capital", "What is the capital of France?", "The capital of France is Paris."},
		{"bare phrase", "capital of france", "The capital of France is Paris."},
		{"inverse with as", "Which country has Paris as its capital?", "The capital of France is Paris."},
		{"who wrote", "Who wrote Hamlet?", "Hamlet was written by William Shakespeare."},
		{"possessive", "What is France's capital?", "The capital of France is Paris."},
		{"inverse is the", "Paris is the capital of which country?", "The capital of France is Paris."},
		{"whose", "Which country's capital is Kuwait City?", "The capital of Kuwait is Kuwait City."},
		{"alias predicate", "What is the capital city of Japan?", "The capital of Japan is Tokyo."},
		{"author of", "Who is the author of Pride and Prejudice?", "Pride and Prejudice was written by Jane Austen."},
		{"title with the", "Who wrote The Hobbit?", "The Hobbit was written by J. R. R. Tolkien."},
		{"passive", "Hamlet was written by whom?", "Hamlet was written by William Shakespeare."},
		{"passive inverse", "Which novel was written by Harper Lee?", "To Kill a Mockingbird was written by Harper Lee."},
		{"alias entity", "who wrote 1984", "Nineteen Eighty-Four was written by George Orwell."},
		{"several objects", "What are the official languages of Switzerland?", "The official languages of Switzerland are German, French, Italian and Romansh."},
		{"several subjects", "What did Shakespeare write?", "William Shakespeare wrote Hamlet, Macbeth, Romeo and Juliet, Othello and King Lear."},
		{"painter", "Who painted the Mona Lisa?", "Mona Lisa was painted by Leonardo da Vinci."},
		{"what did paint", "What did Picasso paint?", "Guernica was painted by Pablo Picasso."},
		{"director", "Who directed Jaws?", "Jaws was directed by Steven Spielberg."},
		{"relation picks the entity", "Who directed The Lord of the Rings?", "The Lord of the Rings (film series) was directed by Peter Jackson."},
		{"same name, other relation", "Who wrote The Lord of the Rings?", "The Lord of the Rings was written by J. R. R. Tolkien."},
		{"symbol", "What is the chemical symbol of gold?", "The chemical symbol of gold is Au."},
		{"symbol inverse", "Which element has the symbol Fe?", "The chemical symbol of iron is Fe."},
		{"verb with noun", "What currency does Japan use?", "The currency of Japan is the Japanese yen."},
		{"verb inverse", "Which countries use the euro?", "The euro is the currency of France, Germany, Italy, Spain and the Netherlands."},
		{"spoken in", "What language is spoken in Brazil?", "The official language of Brazil is Portuguese."},
		{"spoken inverse", "In which countries is Portuguese spoken?", "Portuguese is an official language of Portugal and Brazil."},
		{"capitalised alias", "What is the capital of the US?", "The capital of the United States is Washington, D.C."},
		{"long alias after the", "capital of the United States of America", "The capital of the United States is Washington, D.C."},
		{"accents", "What is the capital of Colombia", "The capital of Colombia is Bogotá."},
		{"accent-free name", "Which country has Bogota as its capital?", "The capital of Colombia is Bogotá."},
		{"unicode variants", "ＷＨＯ ＷＲＯＴＥ ＨＡＭＬＥＴ？", "Hamlet was written by William Shakespeare."},
		{"polite", "Could you please tell me the capital of Italy?", "The capital of Italy is Rome."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := serve(t, s, ask(msg("user", tc.q)))
			if !ok || got != tc.want {
				t.Errorf("%q = %q (answered %v), want %q", tc.q, got, ok, tc.want)
			}
		})
	}
}

func TestDeclines(t *testing.T) {
	s := shipped(t)
	for _, tc := range []struct{ name, q string }{
		{"ambiguous entity", "What is the capital of Georgia?"},
		{"wrong direction", "What is the capital of Paris?"},
		{"wrong direction inverse", "Which country has France as its capital?"},
		{"nonsense inverse", "France is the capital of which country?"},
		{"when", "When was Hamlet written?"},
		{"qualifier", "What is the capital of France in 1700?"},
		{"multi-hop", "What is the currency of the country whose capital is Paris?"},
		{"negation", "What is not the capital of France?"},
		{"unknown entity", "Who wrote the Bible?"},
		{"two entities", "What is the capital of France and Germany?"},
		{"no relation", "Tell me about France"},
		{"where", "Where is Paris?"},
		{"how many", "How many people live in Paris?"},
		{"fiction", "What is the capital of Atlantis?"},
		{"gated symbol lowercase", "Which element has the symbol fe?"},
		{"pronoun is not a symbol", "What is the symbol of he?"},
		{"unknown word", "Which country uses the euro as its currency in Europe?"},
		{"opinion", "What is the best capital in Europe?"},
		{"empty", "?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, ok := serve(t, s, ask(msg("user", tc.q))); ok {
				t.Errorf("%q answered %q, want a decline", tc.q, got)
			}
		})
	}
}

func TestRequestShapes(t *testing.T) {
	s := shipped(t)
	q := "What is the capital of France?"
	two := 2
	tools := ask(msg("user", q))
	tools.Chat.Tools = []cascade.Tool{{Type: "function", Function: cascade.ToolFunction{Name: "f"}}}
	n2 := ask(msg("user", q))
	n2.Chat.N = &two
	noCache := ask(msg("user", q))
	noCache.NoCache = true
	image := ask(cascade.Message{Role: "user", Content: json.RawMessage(`[{"type":"text","text":"` + q + `"},{"type":"image_url","image_url":{"url":"data:,"}}]`)})
	parts := ask(cascade.Message{Role: "user", Content: json.RawMessage(`[{"type":"text","text":"` + q + `"}]`)})
	for _, tc := range []struct {
		name string
		req  *cascade.Request
		ok   bool
	}{
		{"one user message", ask(msg("user", q)), true},
		{"system then user", ask(msg("system", "Be terse."), msg("user", q)), true},
		{"text parts", parts, true},
		{"history", ask(msg("user", "hi"), msg("assistant", "hello"), msg("user", q)), false},
		{"two system messages", ask(msg("system", "a"), msg("system", "b"), msg("user", q)), false},
		{"assistant last", ask(msg("user", q), msg("assistant", "x")), false},
		{"tools", tools, false},
		{"n=2", n2, false},
		{"no-cache", noCache, false},
		{"image", image, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := serve(t, s, tc.req); ok != tc.ok {
				t.Errorf("answered = %v, want %v", ok, tc.ok)
			}
		})
	}
	ans, err := s.Serve(context.Background(), ask(msg("user", q)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ans.Model != "any-model" || !strings.HasPrefix(ans.ID, "chatcmpl-") || !ans.Complete ||
		ans.Choices[0].FinishReason != "stop" || ans.Energy.Saved != DefaultSavedJoules || ans.Energy.Grade != "" || ans.Usage == nil {
		t.Errorf("answer shape: %+v", ans)
	}
	s2, _ := New(Options{Files: []string{"data/facts.tsv"}, FS: os.DirFS("../.."), SavedJoules: 3})
	if ans, _ := s2.Serve(context.Background(), ask(msg("user", q)), nil); ans.Energy.Saved != 3 {
		t.Errorf("saved = %v, want 3", ans.Energy.Saved)
	}
}

func write(t testing.TB, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNTriples(t *testing.T) {
	nt := write(t, "facts.nt", `# a comment
<http://ex.org/France> <http://ex.org/capitalCity> <http://ex.org/Paris> .
<http://ex.org/France> <http://www.w3.org/2000/01/rdf-schema#label> "France"@en .
<http://ex.org/France> <http://www.w3.org/2004/02/skos/core#altLabel> "French Republic" .
<http://ex.org/France> <http://www.w3.org/2000/01/rdf-schema#label> "Frankreich"@de .
<http://ex.org/Paris> <http://www.w3.org/2000/01/rdf-schema#label> "Paris" .
<http://ex.org/capitalCity> <http://www.w3.org/2004/02/skos/core#altLabel> "capital" .
<http://ex.org/capitalCity> <https://eoc-proxy.dev/ns/graph#template> "{o} is the capital of {s}." .
<http://ex.org/Hamlet> <http://ex.org/playwright> "William Shakespeare" .
<http://ex.org/playwright> <https://eoc-proxy.dev/ns/graph#inverseVerb> "wrote" .
<http://ex.org/Jaws> <http://ex.org/director> "Steven Spielberg" .
<http://ex.org/Cats> <http://ex.org/musicBy> "Andrew Lloyd Webber" .
_:b1 <http://ex.org/note> "caf\u00E9 \"quoted\""^^<http://www.w3.org/2001/XMLSchema#string> .
`)
	s, err := New(Options{Files: []string{nt}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ q, want string }{
		{"What is the capital of the French Republic?", "Paris is the capital of France."},
		{"What is the capital city of France?", "Paris is the capital of France."},
		{"Who wrote Hamlet?", "The playwright of Hamlet is William Shakespeare."},
		// A built-in relation, by the IRI's local name.
		{"Who directed Jaws?", "Jaws was directed by Steven Spielberg."},
		{"What did Steven Spielberg direct?", "Jaws was directed by Steven Spielberg."},
	} {
		if got, ok := serve(t, s, ask(msg("user", tc.q))); got != tc.want {
			t.Errorf("%q = %q (%v), want %q", tc.q, got, ok, tc.want)
		}
	}
	if got, ok := serve(t, s, ask(msg("user", "Who composed Cats?"))); ok {
		t.Errorf("a relation the table does not know (musicBy) took a built-in verb: %q", got)
	}
	if _, ok := serve(t, s, ask(msg("user", "What is the capital of Frankreich?"))); ok {
		t.Error("a German label was used")
	}
}

func TestFileErrors(t *testing.T) {
	for _, tc := range []struct{ name, file, body, want string }{
		{"two columns", "f.tsv", "France\tcapital\n", "f.tsv:1"},
		{"five columns", "f.tsv", "a\tb\tc\td\te\n", "f.tsv:1"},
		{"bad directive", "f.tsv", "# ok\n@capital\tcolour\tred\n", "f.tsv:2"},
		{"verb on an entity", "f.tsv", "France\tverb\tx\n", "f.tsv:1"},
		{"nt no dot", "f.nt", "<a> <b> <c>\n", "f.nt:1"},
		{"nt literal subject", "f.nt", "\"a\" <b> <c> .\n", "f.nt:1"},
		{"nt bad escape", "f.nt", "<a> <b> \"\\q\" .\n", "f.nt:1"},
		{"nt unterminated", "f.nt", "<a> <b> \"abc .\n", "f.nt:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Options{Files: []string{write(t, tc.file, tc.body)}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := New(Options{Files: []string{filepath.Join(t.TempDir(), "missing.tsv")}}); err == nil {
		t.Error("a missing file loaded")
	}
	s, err := New(Options{})
	if err != nil || s.Len() != 0 {
		t.Fatalf("no files: %v", err)
	}
	if _, ok := serve(t, s, ask(msg("user", "What is the capital of France?"))); ok {
		t.Error("an empty graph answered")
	}
}

func TestTooManyValues(t *testing.T) {
	var b strings.Builder
	for i := range maxFacts + 1 {
		b.WriteString("Country " + string(rune('A'+i)) + "\tcurrency\teuro\n")
	}
	s, err := New(Options{Files: []string{write(t, "facts.tsv", b.String())}})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := serve(t, s, ask(msg("user", "Which country has the euro as its currency?"))); ok {
		t.Errorf("answered with %d values: %q", maxFacts+1, got)
	}
	if got, ok := serve(t, s, ask(msg("user", "What is the currency of Country B?"))); !ok || got != "The currency of Country B is the euro." {
		t.Errorf("forward: %q", got)
	}
}

func TestReload(t *testing.T) {
	p := write(t, "facts.tsv", "France\tcapital\tParis\n")
	s, err := New(Options{Files: []string{p}})
	if err != nil {
		t.Fatal(err)
	}
	q := ask(msg("user", "What is the capital of France?"))

	// Readers keep being served while reloads swap the graph.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Serve(context.Background(), q, nil); err != nil && !errors.Is(err, cascade.ErrMiss) {
					t.Error(err)
				}
			}
		}()
	}
	if err := os.WriteFile(p, []byte("France\tcapital\tLutetia\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, _ := serve(t, s, q); got != "The capital of France is Lutetia." {
		t.Errorf("after reload: %q", got)
	}
	// A broken file leaves the previous graph in place.
	if err := os.WriteFile(p, []byte("France\tcapital\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("broken file reloaded")
	}
	if got, _ := serve(t, s, q); got != "The capital of France is Lutetia." {
		t.Errorf("after failed reload: %q", got)
	}
	close(stop)
	wg.Wait()
}

func TestWords(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"France's capital?", "france 's capital"},
		{"Côte d'Ivoire", "cote divoire"},
		{"São  Paulo!", "sao paulo"},
		{"Washington, D.C.", "washington d c"},
		{"Moby-Dick", "moby dick"},
		{"ＰＡＲＩＳ", "paris"},
		{"its", "its"},
		{"France’s capital", "france 's capital"},
		{"Côte dʼIvoire", "cote divoire"},
		{"ＦＲＡＮＣＥ＇Ｓ", "france 's"},
		{"line\nbreak", "line break"},
	} {
		if got := joinNorm(words(tc.in)); got != tc.want {
			t.Errorf("words(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestBuiltinRelations: a user's TSV with only author, director and founder rows, and no
// directives, is asked the way the shipped facts are.
func TestBuiltinRelations(t *testing.T) {
	p := write(t, "mine.tsv", `# my own facts
The Quiet Harbour	author	Mira Okonkwo
Glass Orchard	author	Mira Okonkwo
Night Ferry	director	Tomas Vell
Lumen Robotics	founder	Ada Brandt
Lumen Robotics	founder	Ravi Sen
Lumen Robotics	mascot	Sparky
Night Ferry	sponsor	Harbour Bank
`)
	s, err := New(Options{Files: []string{p}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, q, want string }{
		{"who wrote", "Who wrote The Quiet Harbour?", "The Quiet Harbour was written by Mira Okonkwo."},
		{"author noun", "Who is the author of Glass Orchard?", "Glass Orchard was written by Mira Okonkwo."},
		{"alias noun", "Who is the writer of The Quiet Harbour?", "The Quiet Harbour was written by Mira Okonkwo."},
		{"passive", "Glass Orchard was written by whom?", "Glass Orchard was written by Mira Okonkwo."},
		{"what did write", "What did Mira Okonkwo write?", "Mira Okonkwo wrote The Quiet Harbour and Glass Orchard."},
		{"which was written by", "Which book was written by Mira Okonkwo?", "Mira Okonkwo wrote The Quiet Harbour and Glass Orchard."},
		{"who directed", "Who directed Night Ferry?", "Night Ferry was directed by Tomas Vell."},
		{"what did direct", "What did Tomas Vell direct?", "Night Ferry was directed by Tomas Vell."},
		{"director noun", "Who is the director of Night Ferry?", "Night Ferry was directed by Tomas Vell."},
		{"directed by", "Which film was directed by Tomas Vell?", "Night Ferry was directed by Tomas Vell."},
		{"who founded", "Who founded Lumen Robotics?", "Lumen Robotics was founded by Ada Brandt and Ravi Sen."},
		{"founders", "Who are the founders of Lumen Robotics?", "Lumen Robotics was founded by Ada Brandt and Ravi Sen."},
		{"what was founded by", "What was founded by Ada Brandt?", "Lumen Robotics was founded by Ada Brandt."},
		{"what did establish", "What did Ravi Sen establish?", "Lumen Robotics was founded by Ravi Sen."},
		{"own relation as a noun", "What is the mascot of Lumen Robotics?", "The mascot of Lumen Robotics is Sparky."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := serve(t, s, ask(msg("user", tc.q)))
			if !ok || got != tc.want {
				t.Errorf("%q = %q (answered %v), want %q", tc.q, got, ok, tc.want)
			}
		})
	}
	for _, q := range []string{
		"Who sponsored Night Ferry?",   // sponsor is no built-in relation: no verb for it
		"Who wrote Night Ferry?",       // a film with no author row
		"Who directed Lumen Robotics?", // a company with no director row
		"Who painted Glass Orchard?",   // a built-in relation the file has no rows of
		"When was Lumen Robotics founded?",
	} {
		t.Run("miss/"+q, func(t *testing.T) {
			if got, ok := serve(t, s, ask(msg("user", q))); ok {
				t.Errorf("%q answered %q", q, got)
			}
		})
	}
}

// TestOwnVerbs: a TSV adds verbs to a relation, built-in or its own, with @p directives.
func TestOwnVerbs(t *testing.T) {
	p := write(t, "mine.tsv", "@sponsor\tverb\tsponsored by|was sponsored by\n"+
		"@sponsor\tinverse_verb\tsponsored|sponsor\n"+
		"@author\tinverse_verb\tdreamt up\n"+
		"@author\ttemplate\t{o} is the author of {s}.\n"+
		"Night Ferry\tsponsor\tHarbour Bank\n"+
		"Glass Orchard\tauthor\tMira Okonkwo\n")
	s, err := New(Options{Files: []string{p}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ q, want string }{
		{"Who sponsored Night Ferry?", "The sponsor of Night Ferry is Harbour Bank."},
		{"What did Harbour Bank sponsor?", "The sponsor of Night Ferry is Harbour Bank."},
		{"Who dreamt up Glass Orchard?", "Mira Okonkwo is the author of Glass Orchard."},
		{"Who wrote Glass Orchard?", "Mira Okonkwo is the author of Glass Orchard."}, // built-in verbs stay
	} {
		if got, ok := serve(t, s, ask(msg("user", tc.q))); !ok || got != tc.want {
			t.Errorf("%q = %q (answered %v), want %q", tc.q, got, ok, tc.want)
		}
	}
}

func TestRelationsTable(t *testing.T) {
	table, err := relations()
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"author", "director", "painter", "founder", "composer", "inventor", "capital",
		"currency", "official_language", "officialLanguage", "population"} {
		if len(table[relationNorm(rel)]) == 0 {
			t.Errorf("no built-in words for %q", rel)
		}
	}
	if _, err := readRelations("@author\tcolour\tred\n"); err == nil || !strings.Contains(err.Error(), "1:") {
		t.Errorf("bad kind: err = %v", err)
	}
	if _, err := readRelations("author\tverb\twrote\n"); err == nil {
		t.Error("a row without @ was read")
	}
}

// TestSavedFollowsTracker: an answer saves the stated constant until the tracker has a figure for
// the model asked, then the model's running joules per completion token × the answer's tokens.
func TestSavedFollowsTracker(t *testing.T) {
	tr := energy.NewTracker(0.5)
	s, err := New(Options{Files: []string{"data/facts.tsv"}, FS: os.DirFS("../.."), Estimator: tr})
	if err != nil {
		t.Fatal(err)
	}
	saved := func(model string) (float64, string, int) {
		t.Helper()
		r := ask(msg("user", "Who wrote Hamlet?"))
		r.Chat.Model = model
		ans, err := s.Serve(context.Background(), r, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ans.Energy.Saved, ans.Energy.Reason, ans.Usage.CompletionTokens
	}
	if j, reason, _ := saved("m"); j != DefaultSavedJoules || reason != energy.SavedStated {
		t.Fatalf("before any call: saved %v %q, want %v %q", j, reason, DefaultSavedJoules, energy.SavedStated)
	}
	tr.Observe("m", energy.Figure{Joules: 30, Grade: energy.Estimated}, 10) // 3 J/token
	j, reason, tokens := saved("m")
	if j != 3*float64(tokens) || reason != energy.SavedRunningEstimated {
		t.Errorf("after one call: saved %v %q, want %v %q", j, reason, 3*float64(tokens), energy.SavedRunningEstimated)
	}
	tr.Observe("m", energy.Figure{Joules: 10, Grade: energy.Measured}, 10) // measured 1 J/token wins
	if j, reason, _ := saved("m"); j != float64(tokens) || reason != energy.SavedRunningMeasured {
		t.Errorf("after a measured call: saved %v %q, want %v %q", j, reason, float64(tokens), energy.SavedRunningMeasured)
	}
	if j, _, _ := saved("other"); j != DefaultSavedJoules {
		t.Errorf("a model never called: saved %v, want the constant", j)
	}
}

var precheckQuestions = []string{
	"What is the capital of France?", "Who wrote Hamlet?", "Which country has Paris as its capital?",
	"What's France's capital?", "please tell me the capital of france", "What is the capital of France in 1700?",
	"When did France get its capital?", "Please explain in two sentences how bakufi glumedo relates to gluba.",
	"the the the", "'s 's", "", "Paris", "capital", "What is the currency of Japan?",
	"What is the capital of France and Germany?", "Who is the author of The Hobbit?", "Côte d'Ivoire's capital?",
	strings.Repeat("what is the ", 14) + "capital of France?",
}

func checkPrecheck(t *testing.T, st *store, q string) {
	t.Helper()
	got, gotOK := st.answer(q)
	want, wantOK := st.answerWords(words(q))
	if gotOK != wantOK || gotOK && (got.node != want.node || got.pred != want.pred || got.dir != want.dir) {
		t.Errorf("%q: answer %v %+v, matching every word %v %+v", q, gotOK, got, wantOK, want)
	}
}

// TestAnswerPrecheck: the early decline changes no answer.
func TestAnswerPrecheck(t *testing.T) {
	st := shipped(t).g.Load()
	answered := 0
	for _, q := range precheckQuestions {
		checkPrecheck(t, st, q)
		if _, ok := st.answer(q); ok {
			answered++
		}
	}
	if answered == 0 {
		t.Error("no question answered: the comparison proves nothing")
	}
}

var asciiLines = []string{
	"What's France's capital?", "  it`s   Paris`s\tcapital  ", "x's", "x' s", "x'   ", "x's\t\tthen",
	"Hello. world! ok? fine", "d'Ivoire", "\v\f\r", "'s", "A.B.C", "10:30 -4 3.5",
}

func checkASCIIWords(t *testing.T, line string) {
	t.Helper()
	if strings.ContainsRune(line, '\n') {
		return
	}
	for i := 0; i < len(line); i++ {
		if line[i] >= 0x80 {
			return
		}
	}
	c := text.Canon(line)
	if text.StripMarks(c) != c {
		t.Fatalf("StripMarks changed ASCII %q", c)
	}
	if got, want := words(line), words(c); !slices.Equal(got, want) {
		t.Errorf("%q: %+v, want %+v (as after text.Canon)", line, got, want)
	}
}

// TestWordsASCII: the ASCII shortcut splits as text.Canon and text.StripMarks would, on random
// lines of letters, digits, white space, apostrophes, backquotes and punctuation.
func TestWordsASCII(t *testing.T) {
	for _, l := range asciiLines {
		checkASCIIWords(t, l)
	}
	const alphabet = "aAsSzZ09 \t\v\f\r'`.!?,-:\"#"
	r := rand.New(rand.NewPCG(5, 5))
	for range 5000 {
		b := make([]byte, r.IntN(16))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		checkASCIIWords(t, string(b))
	}
}
