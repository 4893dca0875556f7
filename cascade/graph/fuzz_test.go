package graph

import (
	"os"
	"strings"
	"testing"
)

// FuzzNTriples: any line either parses or fails; it never panics.
func FuzzNTriples(f *testing.F) {
	for _, s := range []string{
		`<a> <b> <c> .`, `_:x <b> "lit"@en .`, `<a> <b> "x\u00e9\"y"^^<t> .`, `<a> <b> "`, `"`, `<a`, `_:`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		_ = newBuilder().readNT(strings.NewReader(line))
	})
}

// FuzzAnswer: any question is answered or declined without panicking.
func FuzzAnswer(f *testing.F) {
	st, err := load(os.DirFS("../.."), []string{"data/facts.tsv"})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"What is the capital of France?", "France's's capital", "'s 's", "Who wrote", "the the the"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		if fa, ok := st.answer(q); ok {
			_ = st.render(fa)
		}
	})
}

// FuzzAnswerPrecheck: declining a question at its first word that no name, relation or glue
// has answers exactly what matching all of its words answers.
func FuzzAnswerPrecheck(f *testing.F) {
	st, err := load(os.DirFS("../.."), []string{"data/facts.tsv"})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range precheckQuestions {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		checkPrecheck(t, st, q)
	})
}

// FuzzWordsASCII: an ASCII line splits into the same words without text.Canon and
// text.StripMarks as with them.
func FuzzWordsASCII(f *testing.F) {
	for _, s := range asciiLines {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		checkASCIIWords(t, line)
	})
}
