package graph

import (
	"bytes"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/eoc-proxy/eoc-proxy/internal/text"
)

// word is one token of a question or a label: its matching form and how it was written.
type word struct {
	norm    string
	cap     bool // written with a capital first letter
	initial bool // first word of a sentence
}

// words splits s for matching: text.Canon, accents stripped (text.StripMarks), case-folded
// (text.Fold), punctuation dropped, a possessive "'s" kept as its own word ("France's" →
// "france", "'s").
func words(s string) []word {
	ws, _ := scanWords(nil, s, nil)
	return ws
}

// scanWords appends the words of s to dst (as words splits them). With a store, it first checks
// each word's matching form with st.keeps, stopping at the first word it declines and reporting
// false with nothing appended or allocated; a possessive "'s" is not checked.
func scanWords[T ~string | ~[]byte](dst []word, s T, st *store) ([]word, bool) {
	if st != nil {
		n := 0
		if _, ok := scan(nil, s, st, &n); !ok {
			return nil, false
		}
	}
	return scan(dst, s, nil, nil)
}

// scan is scanWords' pass over s: with st, it checks each word (n counts them) and appends
// nothing; without, it appends every word to dst.
func scan[T ~string | ~[]byte](dst []word, s T, st *store, n *int) ([]word, bool) {
	var curBuf [64]rune // on the stack: a question's words are mostly short
	var normBuf [64]byte
	cur := curBuf[:0]
	initial := true
	rejected := false
	flush := func() {
		if len(cur) == 0 {
			return
		}
		norm := foldWord(cur, normBuf[:0])
		if st != nil {
			*n++
			rejected = rejected || !st.keeps(norm, *n)
		} else {
			dst = append(dst, word{norm: string(norm), cap: unicode.IsUpper(cur[0]), initial: initial})
		}
		cur = cur[:0]
		initial = false
	}
	// Lines one at a time: text.Canon turns a line break into a space, and a new line starts a
	// sentence.
	for rest, more := s, true; more && !rejected; {
		var l T
		if i := index(rest, '\n'); i >= 0 {
			l, rest = rest[:i], rest[i+1:]
		} else {
			l, more = rest, false
		}
		rs := lineOf(l)
		for i, end := 0, rs.len(); i < end && !rejected; i++ {
			r := rs.at(i)
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r):
				cur = append(cur, r)
			case r == '\'':
				// "'s" closing a word is the possessive; any other apostrophe joins (d'Ivoire).
				if len(cur) > 0 && i+1 < end && (rs.at(i+1) == 's' || rs.at(i+1) == 'S') &&
					(i+2 == end || !unicode.IsLetter(rs.at(i+2)) && !unicode.IsDigit(rs.at(i+2))) {
					flush()
					if st == nil {
						dst = append(dst, word{norm: "'s"})
					}
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
		initial = true
	}
	if rejected {
		return nil, false
	}
	return dst, true
}

// keeps reports whether the n-th word of a question, of matching form norm, can be in a question
// the store answers: a word that is not glue and no word of any name or relation can be in no
// mention, so spot would decline the question.
func (st *store) keeps(norm []byte, n int) bool {
	return n <= maxWords && (glue[string(norm)] || st.vocab[string(norm)] || bytes.IndexByte(norm, ' ') >= 0)
}

// foldWord appends the matching form of the word w (text.Fold) to buf: an ASCII word's is its
// lower case, with no allocation.
func foldWord(w []rune, buf []byte) []byte {
	for _, r := range w {
		if r >= utf8.RuneSelf {
			return append(buf, text.Fold(string(w))...)
		}
	}
	for _, r := range w {
		b := byte(r)
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		buf = append(buf, b)
	}
	return buf
}

// index is strings.IndexByte or bytes.IndexByte.
func index[T ~string | ~[]byte](s T, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// runes are a line's runes as words reads them, text.StripMarks(text.Canon(line)) as far as
// words can tell: an ASCII line is already NFKC and has no marks, and Canon's one change to it
// that words can see is a backquote written as an apostrophe (the runs of white space it
// collapses and trims end a word either way, and no rule of words looks further than the next
// two runes). An ASCII line is read in place; another takes the full path.
type runes[T ~string | ~[]byte] struct {
	ascii T
	rs    []rune // the runes of a line that is not ASCII
	full  bool
}

func lineOf[T ~string | ~[]byte](line T) runes[T] {
	for i := 0; i < len(line); i++ {
		if line[i] >= utf8.RuneSelf {
			return runes[T]{rs: []rune(text.StripMarks(text.Canon(string(line)))), full: true}
		}
	}
	return runes[T]{ascii: line}
}

func (l *runes[T]) len() int {
	if l.full {
		return len(l.rs)
	}
	return len(l.ascii)
}

func (l *runes[T]) at(i int) rune {
	if l.full {
		return l.rs[i]
	}
	if r := rune(l.ascii[i]); r != '`' {
		return r
	}
	return '\''
}

func joinNorm(ws []word) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = w.norm
	}
	return strings.Join(parts, " ")
}

// glue are the words a single-hop question is made of besides its entity and its predicate. A
// question with any other word left over is not answered: that word may be a second hop, a
// qualifier ("in 1700", "before", "not") or a different question ("when", "how", "where").
var glue = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`what which who whom whose is are was were be been the a an of
		for in on to by as its their his her it they them has have had does do did please tell me us
		i you know can could would will name give say whats whos 's current currently official
		officially called known country countries nation state city town book novel play poem
		person people element planet painting picture film movie that this there one exactly now
		today again really actually hey hi hello ok okay so also im am want wondering wonder
		chemical`) {
		m[w] = true
	}
	return m
}()

func allGlue(ws []word) bool {
	for _, w := range ws {
		if !glue[w.norm] {
			return false
		}
	}
	return len(ws) > 0
}

// mention is a phrase of the question that names an entity or a predicate.
type mention struct {
	start, end int // word positions, end exclusive
	nodes      []int32
	preds      []predRef
}

// direction of a lookup: forward asks for objects of (entity, predicate), inverse for subjects.
type direction uint8

const (
	undetermined direction = iota
	forward
	inverse
)

// maxWords is the longest question answered, in words.
const maxWords = 40

// maxFacts is the most values an answer lists; more reads as a different kind of question.
const maxFacts = 5

// fact is an answer: the entity asked about, the predicate, the direction and the values.
type fact struct {
	node   int32
	pred   int32
	dir    direction
	values []int32
}

// answer finds the one fact a question asks for, or false when the question is not a single-hop
// question about one entity and one relation, or the graph does not answer it unambiguously.
func (st *store) answer(question string) (fact, bool) { return answerText(st, question) }

// answerText is answer for a question as a string or as bytes. A word that is not glue and no
// word of any name or relation declines the question before anything is matched (store.keeps).
func answerText[T ~string | ~[]byte](st *store, question T) (fact, bool) {
	var buf [16]word
	ws, ok := scanWords(buf[:0], question, st)
	if !ok {
		return fact{}, false
	}
	return st.answerWords(ws)
}

// answerWords is answer for a question already split into words.
func (st *store) answerWords(ws []word) (fact, bool) {
	if len(ws) == 0 || len(ws) > maxWords {
		return fact{}, false
	}
	ents, preds, ok := st.spot(ws)
	if !ok || len(ents) != 1 || len(preds) == 0 {
		return fact{}, false
	}
	ent := ents[0]
	// Every mention of a relation must be able to name the same predicate.
	cands := map[int32]bool{}
	for _, r := range preds[0].preds {
		cands[r.pred] = true
	}
	for _, m := range preds[1:] {
		next := map[int32]bool{}
		for _, r := range m.preds {
			if cands[r.pred] {
				next[r.pred] = true
			}
		}
		cands = next
	}
	var found []fact
	for p := range cands {
		dir, ok := directionOf(ws, ent, preds, p)
		if !ok {
			continue
		}
		for _, n := range ent.nodes {
			for _, d := range []direction{forward, inverse} {
				if dir != undetermined && d != dir {
					continue
				}
				table := st.fwd
				if d == inverse {
					table = st.inv
				}
				if vs := table[edge{n, p}]; len(vs) > 0 {
					found = append(found, fact{node: n, pred: p, dir: d, values: vs})
				}
			}
		}
	}
	if len(found) != 1 || len(found[0].values) > maxFacts {
		return fact{}, false
	}
	return found[0], true
}

// spot finds entity and predicate mentions, longest first from the left. A glue word may start
// a name ("the United States") or precede one ("the United States of America" where only
// "United States of America" is a name): the longer reach wins. It fails when a word outside
// every mention is not glue.
func (st *store) spot(ws []word) (ents, preds []mention, ok bool) {
	for i := 0; i < len(ws); {
		m, found := st.longest(ws, i)
		if glue[ws[i].norm] && i+1 < len(ws) {
			if next, ok := st.longest(ws, i+1); ok && (!found || next.end > m.end) {
				i++
				continue
			}
		}
		switch {
		case !found && !glue[ws[i].norm]:
			return nil, nil, false
		case !found:
			i++
		case m.preds != nil:
			preds = append(preds, m)
			i = m.end
		default:
			ents = append(ents, m)
			i = m.end
		}
	}
	return ents, preds, true
}

// longest is the longest mention starting at word i; a relation wins over a name of the same
// length.
func (st *store) longest(ws []word, i int) (mention, bool) {
	for l := min(st.maxPhrase, len(ws)-i); l >= 1; l-- {
		phrase := ws[i : i+l]
		norm := joinNorm(phrase)
		if refs := st.byAlias[norm]; len(refs) > 0 {
			return mention{start: i, end: i + l, preds: refs}, true
		}
		if nodes := st.byLabel[norm]; len(nodes) > 0 && st.writtenAsName(norm, phrase) {
			return mention{start: i, end: i + l, nodes: nodes}, true
		}
	}
	return mention{}, false
}

// writtenAsName reports whether a phrase may name an entity. Names that are also common words
// ("It", "Us", "He") or one or two letters (a chemical symbol) count only when written with a
// capital and not at the start of a sentence.
func (st *store) writtenAsName(norm string, phrase []word) bool {
	if !st.gated[norm] {
		return true
	}
	return phrase[0].cap && !phrase[0].initial
}

// directionOf decides which way a question reads a predicate p: from the verb mentions when there
// are any, else from the noun mentions. It reports false when mentions disagree.
func directionOf(ws []word, ent mention, preds []mention, p int32) (direction, bool) {
	var verbDirs, nounDirs []direction
	for _, m := range preds {
		for _, r := range m.preds {
			if r.pred != p {
				continue
			}
			before := m.end <= ent.start // the relation's words come before the entity
			switch r.kind {
			case verb: // subject verb object: "Hamlet was written by ?" / "? was written by Shakespeare"
				verbDirs = append(verbDirs, pick(!before, forward, inverse))
			case inverseVerb: // object verb subject: "who wrote Hamlet" / "what did Shakespeare write"
				verbDirs = append(verbDirs, pick(before, forward, inverse))
			default:
				nounDirs = append(nounDirs, nounDirection(ws, ent, m))
			}
		}
	}
	dirs := verbDirs
	if len(dirs) == 0 {
		dirs = nounDirs
	}
	dir := undetermined
	for _, d := range dirs {
		if d == undetermined {
			continue
		}
		if dir != undetermined && d != dir {
			return undetermined, false
		}
		dir = d
	}
	return dir, true
}

func pick(cond bool, a, b direction) direction {
	if cond {
		return a
	}
	return b
}

// nounDirection reads the words between a relation noun and the entity:
//
//	"capital of France", "France's capital"          → forward
//	"whose capital is Paris", "Paris is the capital" → inverse
//	"has Paris as its capital"                       → inverse
//	anything else ("France capital", "capital Paris") → undetermined: the graph decides
func nounDirection(ws []word, ent, rel mention) direction {
	if rel.end <= ent.start {
		between := ws[rel.end:ent.start]
		switch {
		case hasAny(between, "is", "are", "was", "were"):
			return inverse
		case hasAny(between, "of", "for", "in") && onlyOf(between, "of", "for", "in", "the", "a", "an"):
			return forward
		}
		return undetermined
	}
	between := ws[ent.end:rel.start]
	switch {
	case len(between) == 1 && between[0].norm == "'s":
		return forward
	case hasAny(between, "as", "is", "are", "was", "were"):
		return inverse
	}
	return undetermined
}

func hasAny(ws []word, any ...string) bool {
	return slices.ContainsFunc(ws, func(w word) bool { return slices.Contains(any, w.norm) })
}

func onlyOf(ws []word, allowed ...string) bool {
	for _, w := range ws {
		if !slices.Contains(allowed, w.norm) {
			return false
		}
	}
	return true
}
