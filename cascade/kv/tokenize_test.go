package kv

import (
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/eoc-proxy/eoc-proxy/internal/text"
)

// FuzzTokenize: tokenize slices words out of the Canon line; tokenizeRef is the version that
// built them rune by rune (until 2026-12), kept as the reference.
func FuzzTokenize(f *testing.F) {
	for _, s := range []string{"What's 3.5 + -4?", "I can't, won't, I'm, John's, dont", "'s n't'", "ＷＨＡＴ is 2FA",
		"Don't disable C#!", "", "1,000:30", "'-'", "x −4 and a−4, −−4 '−4", "Ünïcödé’s ‘quote’ ﬁle", "iPhone NASA\nnew line. Next",
		"system: Be brief.\nuser: How do I rotate the token?", "a''b ''c d'' '", "\xff\xfe bad \xc3", "tab\there  two  spaces"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := tokenize(s), tokenizeRef(s); !slices.Equal(got, want) {
			t.Errorf("tokenize(%q) = %+v, want %+v", s, got, want)
		}
	})
}

// tokenizeRef is tokenize as it was: the word written into a strings.Builder rune by rune.
func tokenizeRef(s string) []token {
	var toks []token
	var word strings.Builder
	initial := true
	apos := false // word holds an apostrophe
	flush := func() {
		if word.Len() == 0 {
			return
		}
		w := word.String()
		word.Reset()
		folded := text.Fold(w)
		parts := expand(folded)
		if parts == nil {
			parts = []string{folded}
		}
		for i, p := range parts {
			if apos {
				p = strings.ReplaceAll(p, "'", "")
			}
			if p == "" {
				continue
			}
			t := token{norm: p, initial: initial}
			if i == 0 {
				// How the first part was written is how the word was.
				for j, r := range w {
					if unicode.IsUpper(r) {
						if j == 0 {
							t.cap = true
						} else {
							t.inner = true
						}
					}
				}
			}
			toks = append(toks, t)
			initial = false
		}
		apos = false
	}
	// Lines one at a time: text.Canon turns a line break into a space, and a new line starts a
	// sentence.
	for line := range strings.SplitSeq(s, "\n") {
		runes := []rune(text.Canon(line))
		for i, r := range runes {
			var prev, next rune
			if i > 0 {
				prev = runes[i-1]
			}
			if i+1 < len(runes) {
				next = runes[i+1]
			}
			switch {
			case unicode.IsSpace(r):
				flush()
			case strings.ContainsRune(".,:", r) && unicode.IsDigit(prev) && unicode.IsDigit(next):
				word.WriteRune(r) // 3.5, 1,000, 10:30
			case (r == '-' || r == '−') && unicode.IsDigit(next) && !isWordRune(prev):
				flush()
				word.WriteRune('-') // -4
			case r == '\'':
				if word.Len() > 0 {
					word.WriteRune(r) // kept until flush: contractions are read with it
					apos = true
				}
			case unicode.IsPunct(r) && !strings.ContainsRune(keptPunct, r):
				flush()
				if strings.ContainsRune(".!?:;", r) {
					initial = true
				}
			default:
				word.WriteRune(r)
			}
		}
		flush()
		initial = true
	}
	return toks
}

// FuzzNormWords: appendNormWords's pass over an ASCII text finds normWords's words (tokenize
// after text.Canon), for the text and for its bytes made ASCII.
func FuzzNormWords(f *testing.F) {
	for _, s := range []string{"What's 3.5 + -4?", "I can't, won't, I'm, John's, dont do'nt it`s", "'s n't' `ll", "a-4 -4 x--4 .5 3. 4",
		"system: Be brief.\nuser: How do I rotate the token?", "a''b ''c d'' '", "1,000:30", "tab\there  two\v\f\r spaces",
		"C++ & C# 5% $3 @x *y /z \\w _u [v] {w} (x) <y> |z| ~a ^b =c", "WHATS Theyre IM", "\x00\x01\x1f\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		for i := range b {
			b[i] &= 0x7f
		}
		for _, s := range []string{s, string(b)} {
			if got, want := appendNormWords(nil, s), normWords(s); !slices.Equal(got, want) {
				t.Errorf("appendNormWords(%q) = %q, want %q", s, got, want)
			}
		}
	})
}

// TestWhole: every key of contractions and bare expands through whole as it did through the
// two maps, and each bare form to a contraction's expansion.
func TestWhole(t *testing.T) {
	for w, parts := range contractions {
		if !slices.Equal(expand(w), parts) {
			t.Errorf("expand(%q) = %q, want %q", w, expand(w), parts)
		}
	}
	for b, c := range bare {
		if got := expand(b); got == nil || !slices.Equal(got, expand(c)) {
			t.Errorf("expand(%q) = %q, want expand(%q) = %q", b, got, c, expand(c))
		}
	}
	if expand("john's") != nil || expand("word") != nil {
		t.Error("a possessive or a plain word expanded")
	}
}

// FuzzSeedKey: the seed key of an ASCII text, made from appendNormWords's words (Stage.seedOf),
// is Normalize's, for the text and for its bytes made ASCII.
func FuzzSeedKey(f *testing.F) {
	for _, s := range []string{"How do I reset my password?", "What's 3.5 + -4?", "I can't, won't, I'm, John's, dont do'nt it`s",
		"'s n't' `ll", "a-4 -4 x--4 .5 3. 4", "a''b ''c d'' '", "tab\there  two\v\f\r spaces", "line\nbreak. New SENTENCE",
		"C++ & C# 5% $3 @x *y /z \\w _u [v] {w} (x) <y> |z| ~a ^b =c", "WHATS Theyre IM", "\x00\x01\x1f\x7f", "", "  ", "!!!"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		for i := range b {
			b[i] &= 0x7f
		}
		ascii := string(b)
		if got, want := string(joinWords(nil, appendNormWords(nil, ascii))), Normalize(ascii); got != want {
			t.Errorf("seed key of %q = %q, want %q", ascii, got, want)
		}
	})
}
