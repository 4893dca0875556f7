package graph

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/internal/text"
)

// TestWordsAsReference: words splits every line as the rune-by-rune reference (the split before
// ASCII lines were read in place), and a question store.answer declines by a word, declined by
// the reference's check of the same words, on random text of ASCII, accented and other letters,
// apostrophes of each kind, white space, line breaks and punctuation.
func TestWordsAsReference(t *testing.T) {
	st := shipped(t).g.Load()
	const alphabet = "aAsSzZ09 \t\n\v\r'`.!?,-:\"#éÉçßİıﬁ’ʼ´＇\u0301Ωω北 "
	pieces := []string{"capital", "France", "what", "is", "the", "of", "Paris", "'s", "Côte d'Ivoire", "bakufi"}
	letters := []rune(alphabet)
	r := rand.New(rand.NewPCG(7, 7))
	lines := slices.Clone(precheckQuestions)
	lines = append(lines, asciiLines...)
	lines = append(lines, strings.Repeat("what ", maxWords), strings.Repeat("what ", maxWords+1)) // the bound
	for range 5000 {
		var b strings.Builder
		for range r.IntN(12) {
			if r.IntN(3) == 0 {
				b.WriteString(pieces[r.IntN(len(pieces))])
			} else {
				b.WriteRune(letters[r.IntN(len(letters))])
			}
		}
		lines = append(lines, b.String())
	}
	for _, l := range lines {
		want, _ := refScanWords(l, nil)
		if got := words(l); !slices.Equal(got, want) {
			t.Errorf("%q: %+v, want %+v", l, got, want)
		}
		n := 0
		_, wantOK := refScanWords(l, func(norm string) bool {
			n++
			return n <= maxWords && (glue[norm] || st.vocab[norm] || strings.Contains(norm, " "))
		})
		if _, gotOK := scanWords(nil, l, st); gotOK != wantOK {
			t.Errorf("%q: checked %v, want %v", l, gotOK, wantOK)
		}
		if _, gotOK := scanWords(nil, []byte(l), st); gotOK != wantOK {
			t.Errorf("%q as bytes: checked %v, want %v", l, gotOK, wantOK)
		}
	}
}

// A question the graph declines at a word costs the stage no allocation.
func TestServeMissAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	s := shipped(t)
	q, _ := json.Marshal("Please explain in two sentences how bakufi glumedo relates to gluba.")
	req := &cascade.Request{Chat: cascade.ChatRequest{Model: "m", Messages: []cascade.Message{{Role: "user", Content: q}}}}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := s.Serve(context.Background(), req, nil); !errors.Is(err, cascade.ErrMiss) {
			t.Fatalf("err %v, want a miss", err)
		}
	}); n != 0 {
		t.Errorf("a declined question allocates %v objects", n)
	}
}

// refScanWords is scanWords as it was written before ASCII lines were read in place, checking
// words with keep: the reference the test compares with.
func refScanWords(s string, keep func(norm string) bool) ([]word, bool) {
	out := make([]word, 0, 8)
	var curBuf, lineBuf [64]rune // on the stack: a question's words and lines are mostly short
	cur := curBuf[:0]
	initial := true
	rejected := false
	flush := func() {
		if len(cur) == 0 {
			return
		}
		w := string(cur)
		norm := text.Fold(w)
		if keep != nil && !keep(norm) {
			rejected = true
		}
		out = append(out, word{norm: norm, cap: unicode.IsUpper(cur[0]), initial: initial})
		cur = cur[:0]
		initial = false
	}
	// Lines one at a time: text.Canon turns a line break into a space, and a new line starts a
	// sentence.
	// strings.Cut rather than SplitSeq: the range-over-func body would be a closure, and what
	// it and flush capture would move to the heap on every call.
	for rest, more := s, true; more; {
		var line string
		line, rest, more = strings.Cut(rest, "\n")
		rs := refCanonRunes(line, lineBuf[:0])
		for i := 0; i < len(rs) && !rejected; i++ {
			r := rs[i]
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r):
				cur = append(cur, r)
			case r == '\'':
				// "'s" closing a word is the possessive; any other apostrophe joins (d'Ivoire).
				if len(cur) > 0 && i+1 < len(rs) && (rs[i+1] == 's' || rs[i+1] == 'S') &&
					(i+2 == len(rs) || !unicode.IsLetter(rs[i+2]) && !unicode.IsDigit(rs[i+2])) {
					flush()
					out = append(out, word{norm: "'s"})
					i++
				}
			default:
				flush()
				if strings.ContainsRune(".!?", r) {
					initial = true
				}
			}
		}
		flush()
		if rejected {
			return nil, false
		}
		initial = true
	}
	return out, true
}

// canonRunes is text.StripMarks(text.Canon(line)) as runes, as far as words can tell: an ASCII
// line is already NFKC and has no marks, and Canon's one change to it that words can see is a
// backquote written as an apostrophe (the runs of white space it collapses and trims end a word
// either way, and no rule of words looks further than the next two runes). Other lines take
// the full path.
// The runes are appended to buf.
func refCanonRunes(line string, buf []rune) []rune {
	for i := 0; i < len(line); i++ {
		if line[i] >= utf8.RuneSelf {
			return append(buf, []rune(text.StripMarks(text.Canon(line)))...)
		}
	}
	for i := 0; i < len(line); i++ {
		r := rune(line[i])
		if r == '`' {
			r = '\''
		}
		buf = append(buf, r)
	}
	return buf
}
