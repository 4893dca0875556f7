package kv

import (
	"strings"
	"unicode"

	"github.com/eoc-proxy/eoc-proxy/internal/text"
)

// Normalize returns the key form of s: text.Canon (NFKC, one apostrophe, one space), case-folded,
// contractions written out ("what's" → "what is", "can't" → "can not"), punctuation dropped.
// Marks inside numbers ("3.5", "1,000", "10:30", "-4") are kept, so different numbers never share
// a key; symbols that change meaning ("C++", "C#", "5%", "$") are kept too. Seeded questions are
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

// expand writes out a folded word if it is a contraction, else returns nil.
func expand(w string) []string {
	if c, ok := bare[w]; ok {
		w = c
	}
	if parts, ok := contractions[w]; ok {
		return parts
	}
	for _, s := range suffixes {
		if stem, ok := strings.CutSuffix(w, s.suffix); ok && s.stems[stem] {
			return []string{stem, s.word}
		}
	}
	return nil
}
