package graph

import (
	"strings"
	"unicode/utf8"
)

// builder collects triples and names from files, then indexes them.
type builder struct {
	nodes    map[string]int32 // node ident → id
	labels   []string
	explicit []bool              // the label came from the data, not a default
	aliases  map[string][]string // node or predicate ident → extra names
	preds    map[string]int32
	pdefs    []predicate
	palias   map[int32][]predRef
	pwords   map[int32][]string // alias words per predicate, parallel to palias
	seen     map[[3]int32]bool
	fwd, inv map[edge][]int32
	// nt collects labels of IRIs, applied to nodes and predicates at the end.
	ntLabels map[string][]ntLabel
}

type ntLabel struct {
	text string
	kind string // label | alias | verb | inverseVerb | template | manySubjects | manyObjects
}

func newBuilder() *builder {
	return &builder{
		nodes: map[string]int32{}, aliases: map[string][]string{}, preds: map[string]int32{},
		palias: map[int32][]predRef{}, pwords: map[int32][]string{}, seen: map[[3]int32]bool{},
		fwd: map[edge][]int32{}, inv: map[edge][]int32{}, ntLabels: map[string][]ntLabel{},
	}
}

func (b *builder) node(ident, label string, explicit bool) int32 {
	if id, ok := b.nodes[ident]; ok {
		if explicit && !b.explicit[id] {
			b.labels[id], b.explicit[id] = label, true
		}
		return id
	}
	id := int32(len(b.labels))
	b.nodes[ident] = id
	b.labels = append(b.labels, label)
	b.explicit = append(b.explicit, explicit)
	return id
}

func (b *builder) pred(ident, label string) int32 {
	if id, ok := b.preds[ident]; ok {
		return id
	}
	id := int32(len(b.pdefs))
	b.preds[ident] = id
	b.pdefs = append(b.pdefs, predicate{name: ident, label: label})
	b.addPredWords(id, noun, label)
	return id
}

func (b *builder) addPredWords(p int32, kind aliasKind, words string) {
	b.palias[p] = append(b.palias[p], predRef{pred: p, kind: kind})
	b.pwords[p] = append(b.pwords[p], words)
}

func (b *builder) triple(s, p, o int32) {
	k := [3]int32{s, p, o}
	if b.seen[k] {
		return
	}
	b.seen[k] = true
	b.fwd[edge{s, p}] = append(b.fwd[edge{s, p}], o)
	b.inv[edge{o, p}] = append(b.inv[edge{o, p}], s)
}

// build indexes what was read, with the built-in relations' words and templates (relations.go).
func (b *builder) build(table map[string][]ntLabel) *store {
	// Names given to IRIs in N-Triples, for nodes and predicates alike.
	for iri, ls := range b.ntLabels {
		nid, isNode := b.nodes["<"+iri+">"]
		pid, isPred := b.preds["<"+iri+">"]
		for _, l := range ls {
			switch {
			case l.kind == "label" && isNode && !b.explicit[nid]:
				b.labels[nid], b.explicit[nid] = l.text, true
			case (l.kind == "label" || l.kind == "alias") && isNode:
				b.aliases["<"+iri+">"] = append(b.aliases["<"+iri+">"], l.text)
			}
			if isPred {
				b.predName(pid, l.kind, l.text)
			}
		}
	}
	b.applyRelations(table)
	st := &store{
		labels: b.labels, byLabel: map[string][]int32{}, gated: map[string]bool{}, preds: b.pdefs,
		byAlias: map[string][]predRef{}, fwd: b.fwd, inv: b.inv, triples: len(b.seen),
	}
	index := func(name string, id int32) {
		ws := words(name)
		norm := joinNorm(ws)
		if norm == "" {
			return
		}
		if !contains(st.byLabel[norm], id) {
			st.byLabel[norm] = append(st.byLabel[norm], id)
		}
		if (allGlue(ws) || (len(ws) == 1 && utf8.RuneCountInString(ws[0].norm) <= 2)) && ws[0].cap {
			st.gated[norm] = true
		}
		st.maxPhrase = max(st.maxPhrase, len(ws))
		// "The Hobbit" is asked about as "Hobbit" too.
		if len(ws) > 1 && ws[0].norm == "the" && !allGlue(ws[1:]) {
			rest := joinNorm(ws[1:])
			if !contains(st.byLabel[rest], id) {
				st.byLabel[rest] = append(st.byLabel[rest], id)
			}
		}
	}
	for ident, id := range b.nodes {
		index(b.labels[id], id)
		for _, a := range b.aliases[ident] {
			index(a, id)
		}
	}
	for p, refs := range b.palias {
		for i, ref := range refs {
			ws := words(b.pwords[p][i])
			norm := joinNorm(ws)
			if norm == "" || containsRef(st.byAlias[norm], ref) {
				continue
			}
			st.byAlias[norm] = append(st.byAlias[norm], ref)
			st.maxPhrase = max(st.maxPhrase, len(ws))
		}
	}
	st.vocab = map[string]bool{}
	for norm := range st.byLabel {
		for w := range strings.SplitSeq(norm, " ") {
			st.vocab[w] = true
		}
	}
	for norm := range st.byAlias {
		for w := range strings.SplitSeq(norm, " ") {
			st.vocab[w] = true
		}
	}
	return st
}

// predName applies one naming row to a predicate.
func (b *builder) predName(p int32, kind, text string) {
	switch kind {
	case "label":
		b.pdefs[p].label = text
		b.addPredWords(p, noun, text)
	case "alias":
		b.addPredWords(p, noun, text)
	case "verb":
		b.addPredWords(p, verb, text)
	case "inverseVerb":
		b.addPredWords(p, inverseVerb, text)
	case "template":
		b.pdefs[p].template = text
	case "manySubjects":
		b.pdefs[p].manySubjects = text
	case "manyObjects":
		b.pdefs[p].manyObjects = text
	}
}

func contains(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func containsRef(refs []predRef, r predRef) bool {
	for _, x := range refs {
		if x == r {
			return true
		}
	}
	return false
}
