package kv

import (
	"maps"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/eoc-proxy/eoc-proxy/internal/text"
)

// Normalize returns the normal form of s: text.Canon (NFKC, one apostrophe, one space), case-folded,
// contractions written out ("what's" → "what is", "can't" → "can not"), punctuation dropped.
// Marks inside numbers ("3.5", "1,000", "10:30", "-4") are kept, so different numbers never share
// a form; symbols that change meaning ("C++", "C#", "5%", "$") are kept too. Seeded questions are
// looked up by this form, and the built-in embedder embeds it.
func Normalize(s string) string {
	toks := tokenize(s)
	var b strings.Builder
	for i, t := range toks {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(t.norm)
	}
	return b.String()
}

// token is one word of a text: its folded form, and how it was written.
type token struct {
	norm    string
	cap     bool // first letter upper case
	inner   bool // an upper-case letter after the first rune (NASA, iPhone)
	initial bool // first word of a sentence or message
}

// keptPunct are punctuation marks that change what a text asks for.
const keptPunct = "#%&@*/\\§"

// tokenize splits s into words after text.Canon, the way Normalize does. An apostrophe inside a
// word is dropped ("whats" and "what's" are one word) unless the word is a contraction, which is
// written out.
func tokenize(s string) []token {
	toks := make([]token, 0, len(s)/5+1)
	initial := true
	// Lines one at a time: text.Canon turns a line break into a space, and a new line starts a
	// sentence.
	for line := range strings.SplitSeq(s, "\n") {
		toks = tokenizeLine(toks, text.Canon(line), &initial)
		initial = true
	}
	return toks
}

// tokenizeLine appends the words of one Canon line to toks. A word is the bytes of line from
// its first rune to its last (every rune between is part of it: the runes that are not end it,
// or come before it starts), so it is sliced, not built, except for a leading '−', written '-'.
func tokenizeLine(toks []token, line string, initial *bool) []token {
	start, end := -1, 0 // the word is line[start:end]; start < 0: no word
	minus := false      // the word starts with '−', written '-'
	apos := false       // the word holds an apostrophe
	write := func(i, size int) {
		if start < 0 {
			start = i
		}
		end = i + size
	}
	flush := func() {
		if start < 0 {
			return
		}
		w := line[start:end]
		if minus {
			w = "-" + w[len("−"):]
		}
		start, minus = -1, false
		toks = appendWord(toks, w, apos, initial)
		apos = false
	}
	var prev rune
	for i, size := 0, 0; i < len(line); i += size {
		var r, next rune
		r, size = utf8.DecodeRuneInString(line[i:])
		if i+size < len(line) {
			next, _ = utf8.DecodeRuneInString(line[i+size:])
		}
		switch {
		case unicode.IsSpace(r):
			flush()
		case (r == '.' || r == ',' || r == ':') && unicode.IsDigit(prev) && unicode.IsDigit(next):
			write(i, size) // 3.5, 1,000, 10:30
		case (r == '-' || r == '−') && unicode.IsDigit(next) && !isWordRune(prev):
			flush()
			write(i, size) // -4
			minus = r == '−'
		case r == '\'':
			if start >= 0 {
				write(i, size) // kept until flush: contractions are read with it
				apos = true
			}
		case unicode.IsPunct(r) && !strings.ContainsRune(keptPunct, r):
			flush()
			if strings.ContainsRune(".!?:;", r) {
				*initial = true
			}
		default:
			write(i, size)
		}
		prev = r
	}
	flush()
	return toks
}

// appendWord appends the tokens of one word as written, w, to toks.
func appendWord(toks []token, w string, apos bool, initial *bool) []token {
	folded := text.Fold(w)
	parts := expand(folded)
	var one [1]string
	if parts == nil {
		one[0] = folded
		parts = one[:]
	}
	for i, p := range parts {
		if apos {
			p = strings.ReplaceAll(p, "'", "")
		}
		if p == "" {
			continue
		}
		t := token{norm: p, initial: *initial}
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
		*initial = false
	}
	return toks
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// Contractions and their expansions are one question: "what's" asks what "what is" asks. A
// contraction is written out, never dropped, so a negation stays a word of its own ("can't" is
// "can not", which the guards count as a negation and "can" is not). Forms whose expansion is
// ambiguous are left alone: "'d" (would or had), "ain't", and "'s" after anything but the words
// below, since "John's" is a possessive. Without an apostrophe only spellings that are no other
// word are read as contractions ("dont", "whats"; not "cant", "wont", "its", "well", "were").
var (
	// contractions are the whole words whose expansion is not their stem plus a suffix.
	contractions = map[string][]string{
		"can't": {"can", "not"}, "won't": {"will", "not"}, "shan't": {"shall", "not"},
		"let's": {"let", "us"}, "cannot": {"can", "not"},
	}
	// suffixes map a contraction's ending to its word, and the stems it may follow.
	suffixes = []struct {
		suffix, word string
		stems        map[string]bool
	}{
		{"n't", "not", setOf("do does did is are was were would should could has have had must need might dare")},
		{"'s", "is", setOf("what who where when why how it that there here he she")},
		{"'m", "am", setOf("i")},
		{"'re", "are", setOf("you we they who what where there how why")},
		{"'ve", "have", setOf("i you we they who could should would might must")},
		{"'ll", "will", setOf("i you he she it we they that who there what")},
	}
	// bare are contractions typed without their apostrophe that are no other English word.
	bare = map[string]string{
		"whats": "what's", "whos": "who's", "wheres": "where's", "thats": "that's", "theres": "there's",
		"dont": "don't", "doesnt": "doesn't", "didnt": "didn't", "isnt": "isn't", "arent": "aren't",
		"wasnt": "wasn't", "werent": "weren't", "wouldnt": "wouldn't", "shouldnt": "shouldn't",
		"couldnt": "couldn't", "hasnt": "hasn't", "havent": "haven't", "hadnt": "hadn't",
		"mustnt": "mustn't", "im": "i'm", "ive": "i've", "youre": "you're", "youve": "you've",
		"theyre": "they're", "theyve": "they've", "weve": "we've", "youll": "you'll", "theyll": "they'll",
	}
)

// whole maps each key of contractions and bare to its expansion, so that a word is looked up
// once: most words are neither. (Made in init: its values come from bySuffix, which may call
// expand, which reads it.)
var whole map[string][]string

// wholeEnds has bit b&63 of entry a set for each key of whole that starts with the byte a and
// ends with the byte b: a word whose ends are not in it is no key, without a map lookup (most
// words are none).
var wholeEnds [256]uint64

func init() {
	whole = maps.Clone(contractions)
	for b, c := range bare {
		if parts, ok := contractions[c]; ok {
			whole[b] = parts
		} else {
			whole[b] = bySuffix(c)
		}
	}
	for k := range whole {
		wholeEnds[k[0]] |= 1 << (k[len(k)-1] & 63)
	}
}

// mayBeWhole is false for a word that is no key of whole.
func mayBeWhole(w string) bool {
	return w != "" && mayBeWholeEnds(w[0], w[len(w)-1])
}

// mayBeWholeEnds is false for the ends of a word that is no key of whole.
func mayBeWholeEnds(first, last byte) bool { return wholeEnds[first]>>(last&63)&1 == 1 }

// expand writes out a folded word if it is a contraction, else returns nil.
func expand(w string) []string {
	if !mayBeWhole(w) {
		return bySuffix(w)
	}
	if parts, ok := whole[w]; ok {
		return parts
	}
	return bySuffix(w)
}

// bySuffix is expand for a word that is no key of contractions or bare.
func bySuffix(w string) []string {
	if strings.IndexByte(w, '\'') < 0 {
		return nil // every suffix has one
	}
	for _, s := range suffixes {
		if stem, ok := strings.CutSuffix(w, s.suffix); ok && s.stems[stem] {
			return []string{stem, s.word}
		}
	}
	// A misplaced apostrophe ("do'nt") is read as the word without it would be ("dont", a bare
	// form of "don't"): the apostrophe is dropped from the token either way, and Normalize's
	// output must normalize to itself.
	return expand(strings.ReplaceAll(w, "'", ""))
}
