// Package text is the one text normaliser the cheap stages match questions with: Unicode NFKC,
// one apostrophe and one double quote, case folding and collapsed whitespace.
package text

import (
	"strings"
	"unicode"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Apostrophes are the marks people type for an apostrophe or a single quote: ASCII ', the
// typographic ‘ ’, the modifier letter ʼ, the prime ′, the grave and acute accents ` ´ and the
// fullwidth ＇. Canon writes each as '.
const Apostrophes = "'‘’‚‛ʼʹ′`´＇"

// quotes are the double quotes Canon writes as ".
const quotes = "\"“”„‟″«»＂"

// IsApostrophe reports whether r is one of Apostrophes.
func IsApostrophe(r rune) bool { return strings.ContainsRune(Apostrophes, r) }

// Canon returns s in NFKC with every apostrophe written ' and every double quote written ", runs
// of white space as one space and no space at either end. Case is kept, so a caller can still see
// how a word was written (a capital may mark a name). Canon(Canon(s)) == Canon(s).
func Canon(s string) string {
	// Quotes first: NFKC turns the acute accent into a space and a combining mark.
	s = norm.NFKC.String(strings.Map(unquote, s))
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		switch {
		case unicode.IsSpace(r):
			space = b.Len() > 0
			continue
		case space:
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(unquote(r))
	}
	// unquote maps to ASCII and drops nothing, so the result is still NFKC.
	return b.String()
}

func unquote(r rune) rune {
	switch {
	case r < 0x80 && r != '`':
		return r
	case IsApostrophe(r):
		return '\''
	case strings.ContainsRune(quotes, r):
		return '"'
	}
	return r
}

// Fold returns s case-folded (Unicode full case folding, then lower case: x/text folds Cherokee
// to upper case, so Fold alone is not idempotent), in NFKC. Fold(Fold(s)) == Fold(s).
func Fold(s string) string {
	if isASCII(s) {
		return strings.ToLower(s) // folding ASCII is lower-casing, and ASCII is NFKC
	}
	// NFKC can make a foldable rune (ͺ is a space and a combining ypogegrammeni, which folds to
	// ι), and folding can leave a text that is not NFKC: repeat until nothing changes. Two rounds
	// settle every text the fuzz test has found; the bound keeps a pathological one finite.
	for range 8 {
		g := norm.NFKC.String(strings.ToLower(cases.Fold().String(s)))
		if g == s {
			break
		}
		s = g
	}
	return s
}

// Normalize is Canon, then Fold: the form two texts are compared in when case does not matter.
// Punctuation is kept; callers decide which marks matter. Normalize(Normalize(s)) == Normalize(s).
func Normalize(s string) string { return Canon(Fold(Canon(s))) }

// StripMarks removes combining marks after canonical decomposition ("Côte" → "Cote") and
// returns NFKC, for matching names typed without their accents.
func StripMarks(s string) string {
	d := norm.NFKD.String(s)
	var b strings.Builder
	b.Grow(len(d))
	for _, r := range d {
		if !unicode.Is(unicode.Mn, r) {
			b.WriteRune(r)
		}
	}
	return norm.NFKC.String(b.String())
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
