package kv

import (
	"maps"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The false-hit guards: what a text commits to (its negations, polar words, numbers and names),
// compared before a similarity hit is served. See Stage.Serve.

// negations are the words that turn a statement around. Contractions lose their apostrophe in
// tokenize ("can't" is "cant").
var negations = setOf(`not no never none nothing nobody nowhere neither nor cannot without
	cant dont doesnt didnt isnt arent wasnt werent wont wouldnt shouldnt couldnt hasnt havent
	hadnt mustnt neednt aint shant mightnt`)

// polarPairs are words whose opposite is another word, not a negation. A text's polar words must
// match the other text's exactly, so "enable" never meets "disable" (nor "enable" nothing).
var polarPairs = `enable disable allow deny disallow permit forbid prohibit accept reject decline
	add remove delete create destroy include exclude increase decrease raise lower grow shrink
	maximum minimum max min more less fewer most least higher lower above below over under
	before after start stop begin end open close on off up down true false yes
	win lose buy sell push pull upload download import export encrypt decrypt encode decode
	compress decompress lock unlock install uninstall connect disconnect subscribe unsubscribe
	activate deactivate login logout signin signout mount unmount show hide public private
	left right north south east west first last early late fast slow hot cold big small large
	long short old new young good bad best worst better worse positive negative plus minus
	input output inbound outbound incoming outgoing send receive forward backward
	ascending descending asc desc increment decrement expand collapse attach detach approve
	pass fail success failure valid invalid legal illegal safe unsafe always sometimes rarely
	everyone everybody all any some every inside outside internal external sync async upper
	join leave arrive depart enter exit agree disagree like dislike love hate same different
	equal unequal odd even male female man woman men women boy girl dark light black white
	day night today tomorrow yesterday past future previous next cheap expensive full empty`

// numberWords map spelled-out numbers to digits, so "three" and "3" are one number.
var numberWords = map[string]string{
	"zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
	"seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12",
	"thirteen": "13", "fourteen": "14", "fifteen": "15", "sixteen": "16", "seventeen": "17",
	"eighteen": "18", "nineteen": "19", "twenty": "20", "thirty": "30", "forty": "40",
	"fifty": "50", "sixty": "60", "seventy": "70", "eighty": "80", "ninety": "90",
	"hundred": "100", "thousand": "1000", "million": "1e6", "billion": "1e9", "trillion": "1e12",
	"dozen": "12", "half": "0.5", "once": "x1", "twice": "x2", "thrice": "x3", "double": "x2",
	"triple": "x3", "single": "x1", "first": "1st", "second": "2nd", "third": "3rd",
	"fourth": "4th", "fifth": "5th", "sixth": "6th", "seventh": "7th", "eighth": "8th",
	"ninth": "9th", "tenth": "10th",
}

// commonInitial are words that start sentences without being names, so a capital letter on them
// says nothing.
var commonInitial = setOf(`what which who whom whose where when why how is are was were be
	do does did can could would should will shall may might must have has had the a an i my we
	our you your it its this that these those there here hi hello hey thanks thank please and or
	but if in on at for of to from with by about as so yes no ok okay let tell show give explain
	describe list write make find help name compare define summarize summarise translate create
	get set use im ive id whats hows whos wheres whens whys thats theres lets youre its`)

// inflected maps each form of a polar word (enabled, enabling, stopped) to its stem.
var inflected = func() map[string]string {
	m := map[string]string{}
	for _, w := range strings.Fields(polarPairs) {
		stem := strings.TrimSuffix(w, "e")
		last := w[len(w)-1:]
		for _, f := range []string{w, w + "s", w + "d", w + "ed", w + "es", w + "ing", stem + "ing",
			stem + "ed", w + "r", w + "er", w + last + "ing", w + last + "ed"} {
			if _, taken := m[f]; !taken {
				m[f] = w
			}
		}
	}
	return m
}()

// negPrefixes turn a word into its opposite (unlock, disallow, nonzero, impossible).
var negPrefixes = []string{"un", "dis", "non", "in", "im", "il", "ir", "de", "anti"}

func setOf(words string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(words) {
		m[w] = true
	}
	return m
}

// signature is what a text commits to: the words and marks that flip or pin down its meaning.
type signature struct {
	words    map[string]bool
	negs     int
	polar    map[string]int
	numbers  map[string]int
	entities []string
}

func sign(s string) signature {
	toks := tokenize(s)
	sig := signature{words: make(map[string]bool, len(toks)), polar: map[string]int{}, numbers: map[string]int{}}
	for _, t := range toks {
		w := t.norm
		sig.words[w] = true
		if negations[w] {
			sig.negs++
		}
		if p, ok := inflected[w]; ok {
			sig.polar[p]++
		}
		if n, ok := numberWords[w]; ok {
			sig.numbers[n]++
		}
		digits, letters := false, false
		for _, r := range w {
			if unicode.IsDigit(r) {
				digits = true
			} else if unicode.IsLetter(r) {
				letters = true
			}
		}
		switch {
		case digits && !letters:
			sig.numbers[w]++
		case digits && letters, t.inner, t.cap && (!t.initial || !commonInitial[w]):
			sig.entities = append(sig.entities, w) // 2fa, gpt4, NASA, iPhone, Paris
		}
	}
	return sig
}

// conflict reports whether two texts that look alike say different things: a negation, a polar
// word, a number or a name that one has and the other lacks. A conflict rejects a similarity hit
// whatever the cosine says.
func conflict(a, b signature) bool {
	if a.negs != b.negs || !maps.Equal(a.polar, b.polar) || !maps.Equal(a.numbers, b.numbers) {
		return true
	}
	for _, e := range a.entities {
		if !b.words[e] {
			return true
		}
	}
	for _, e := range b.entities {
		if !a.words[e] {
			return true
		}
	}
	return prefixFlip(a.words, b.words) || prefixFlip(b.words, a.words)
}

// prefixFlip reports a word of a, missing from b, that is a word of b with a negating prefix
// (a says "unlock" where b says "lock").
func prefixFlip(a, b map[string]bool) bool {
	for w := range a {
		if b[w] {
			continue
		}
		for _, p := range negPrefixes {
			if rest, ok := strings.CutPrefix(w, p); ok && utf8.RuneCountInString(rest) >= 3 && b[rest] {
				return true
			}
		}
	}
	return false
}
