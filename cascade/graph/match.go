package graph

import (
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
	ws, _ := scanWords(s, nil)
	return ws
}

// scanWords is words, except that it stops and reports false at the first word whose matching
// form keep rejects (nil keeps every word). A possessive "'s" is not offered to keep.
func scanWords(s string, keep func(norm string) bool) ([]word, bool) {
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
		rs := canonRunes(line, lineBuf[:0])
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
func canonRunes(line string, buf []rune) []rune {
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
func (st *store) answer(question string) (fact, bool) {
	// A word that is not glue and no word of any name or relation can be in no mention, so spot
	// would decline the question: stop at the first one, before matching anything.
	n := 0
	ws, ok := scanWords(question, func(norm string) bool {
		n++
		return n <= maxWords && (glue[norm] || st.vocab[norm] || strings.Contains(norm, " "))
	})
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
