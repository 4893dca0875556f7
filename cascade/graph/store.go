package graph

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// store is one loaded graph, indexed for questions. It is read-only once built, so a Stage swaps
// whole stores on reload.
type store struct {
	labels  []string           // node → display label
	byLabel map[string][]int32 // normalised label or alias → nodes
	gated   map[string]bool    // labels that match only when written with a capital (see spot)
	preds   []predicate
	byAlias map[string][]predRef // normalised alias → predicates
	fwd     map[edge][]int32     // (subject, predicate) → objects
	inv     map[edge][]int32     // (object, predicate) → subjects
	maxSpan int                  // longest label or alias, in words
	triples int
}

type edge struct{ node, pred int32 }

// predicate is a relation with the words that name it and the sentence that states it.
type predicate struct {
	name         string
	label        string
	template     string // {s}, {o} and {p}; "The {p} of {s} is {o}." when empty
	manySubjects string // template when {s} is a list
	manyObjects  string // template when {o} is a list
}

// aliasKind says how a predicate's words read in a question.
type aliasKind uint8

const (
	// noun: "the capital of France", "France's capital".
	noun aliasKind = iota
	// verb reads subject-verb-object: "Hamlet was written by Shakespeare", "Japan uses the yen".
	verb
	// inverseVerb reads object-verb-subject: "Shakespeare wrote Hamlet".
	inverseVerb
)

type predRef struct {
	pred int32
	kind aliasKind
}

// builder collects triples and names from files, then indexes them.
type builder struct {
	nodes    map[string]int32 // node key → id
	labels   []string
	explicit []bool              // the label came from the data, not a default
	aliases  map[string][]string // node or predicate key → extra names
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

func (b *builder) node(key, label string, explicit bool) int32 {
	if id, ok := b.nodes[key]; ok {
		if explicit && !b.explicit[id] {
			b.labels[id], b.explicit[id] = label, true
		}
		return id
	}
	id := int32(len(b.labels))
	b.nodes[key] = id
	b.labels = append(b.labels, label)
	b.explicit = append(b.explicit, explicit)
	return id
}

func (b *builder) pred(key, label string) int32 {
	if id, ok := b.preds[key]; ok {
		return id
	}
	id := int32(len(b.pdefs))
	b.preds[key] = id
	b.pdefs = append(b.pdefs, predicate{name: key, label: label})
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

// build indexes what was read.
func (b *builder) build() *store {
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
	st := &store{
		labels: b.labels, byLabel: map[string][]int32{}, gated: map[string]bool{}, preds: b.pdefs,
		byAlias: map[string][]predRef{}, fwd: b.fwd, inv: b.inv, triples: len(b.seen),
	}
	index := func(name string, id int32) {
		ws := words(name)
		key := joinNorm(ws)
		if key == "" {
			return
		}
		if !contains(st.byLabel[key], id) {
			st.byLabel[key] = append(st.byLabel[key], id)
		}
		if (allGlue(ws) || (len(ws) == 1 && utf8.RuneCountInString(ws[0].norm) <= 2)) && ws[0].cap {
			st.gated[key] = true
		}
		st.maxSpan = max(st.maxSpan, len(ws))
		// "The Hobbit" is asked about as "Hobbit" too.
		if len(ws) > 1 && ws[0].norm == "the" && !allGlue(ws[1:]) {
			rest := joinNorm(ws[1:])
			if !contains(st.byLabel[rest], id) {
				st.byLabel[rest] = append(st.byLabel[rest], id)
			}
		}
	}
	for key, id := range b.nodes {
		index(b.labels[id], id)
		for _, a := range b.aliases[key] {
			index(a, id)
		}
	}
	for p, refs := range b.palias {
		for i, ref := range refs {
			ws := words(b.pwords[p][i])
			key := joinNorm(ws)
			if key == "" || containsRef(st.byAlias[key], ref) {
				continue
			}
			st.byAlias[key] = append(st.byAlias[key], ref)
			st.maxSpan = max(st.maxSpan, len(ws))
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

// load reads and indexes files from fsys (the operating system when nil): .nt is N-Triples,
// anything else tab-separated values.
func load(fsys fs.FS, files []string) (*store, error) {
	b := newBuilder()
	for _, name := range files {
		f, err := open(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("graph: %w", err)
		}
		if strings.EqualFold(filepath.Ext(name), ".nt") {
			err = b.readNT(f)
		} else {
			err = b.readTSV(f)
		}
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("graph: %s:%w", name, err)
		}
	}
	return b.build(), nil
}

// TSV directives: the predicate column's special values.
var tsvNames = map[string]string{
	"label": "label", "rdfs:label": "label", "preflabel": "label", "skos:preflabel": "label",
	"alias": "alias", "altlabel": "alias", "skos:altlabel": "alias",
	"verb": "verb", "inverse_verb": "inverseVerb", "template": "template",
	"template_many_subjects": "manySubjects", "template_many_objects": "manyObjects",
}

// readTSV reads "subject TAB predicate TAB object [TAB subject aliases]" lines; # starts a
// comment line. A subject "@name" describes the predicate name (see data/facts.tsv).
func (b *builder) readTSV(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(text) == "" || strings.HasPrefix(strings.TrimSpace(text), "#") {
			continue
		}
		cols := strings.Split(text, "\t")
		for i := range cols {
			cols[i] = strings.TrimSpace(cols[i])
		}
		if len(cols) < 3 || len(cols) > 4 || cols[0] == "" || cols[1] == "" || cols[2] == "" {
			return fmt.Errorf("%d: want subject, predicate, object and optional aliases, tab-separated", line)
		}
		s, p, o := cols[0], cols[1], cols[2]
		kind, special := tsvNames[strings.ToLower(p)]
		if name, ok := strings.CutPrefix(s, "@"); ok {
			if !special {
				return fmt.Errorf("%d: %q describes predicate %q but %q is not one of label, alias, verb, inverse_verb, template, template_many_subjects, template_many_objects", line, s, name, p)
			}
			pid := b.pred(name, strings.ReplaceAll(name, "_", " "))
			for _, v := range splitValues(kind, o) {
				b.predName(pid, kind, v)
			}
			continue
		}
		sid := b.node(s, s, true)
		if len(cols) == 4 {
			for _, a := range strings.Split(cols[3], "|") {
				if a = strings.TrimSpace(a); a != "" {
					b.aliases[s] = append(b.aliases[s], a)
				}
			}
		}
		if special {
			if kind != "label" && kind != "alias" {
				return fmt.Errorf("%d: %q applies to predicates: write the subject as @name", line, p)
			}
			for _, a := range strings.Split(o, "|") {
				if a = strings.TrimSpace(a); a != "" {
					b.aliases[s] = append(b.aliases[s], a)
				}
			}
			continue
		}
		pid := b.pred(p, strings.ReplaceAll(p, "_", " "))
		b.triple(sid, pid, b.node(o, o, true))
	}
	return sc.Err()
}

// splitValues splits "a|b" for name lists; templates are kept whole.
func splitValues(kind, v string) []string {
	if strings.HasPrefix(kind, "template") || kind == "manySubjects" || kind == "manyObjects" {
		return []string{v}
	}
	var out []string
	for _, x := range strings.Split(v, "|") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// IRIs of the predicates that name things in N-Triples.
const eocNS = "https://eoc-proxy.dev/ns/graph#"

var ntNames = map[string]string{
	"http://www.w3.org/2000/01/rdf-schema#label":    "label",
	"http://www.w3.org/2004/02/skos/core#prefLabel": "label",
	"http://www.w3.org/2004/02/skos/core#altLabel":  "alias",
	eocNS + "verb":                 "verb",
	eocNS + "inverseVerb":          "inverseVerb",
	eocNS + "template":             "template",
	eocNS + "templateManySubjects": "manySubjects",
	eocNS + "templateManyObjects":  "manyObjects",
}

// readNT reads N-Triples. Labels (rdfs:label, skos:prefLabel, skos:altLabel) in English or with
// no language name nodes and predicates; other languages are skipped.
func (b *builder) readNT(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue
		}
		terms, err := ntTerms(text)
		if err != nil {
			return fmt.Errorf("%d: %w", line, err)
		}
		s, p, o := terms[0], terms[1], terms[2]
		if s.kind == termLiteral || p.kind != termIRI {
			return fmt.Errorf("%d: subject must be an IRI or blank node and predicate an IRI", line)
		}
		if kind, ok := ntNames[p.value]; ok {
			if o.kind != termLiteral {
				return fmt.Errorf("%d: a name must be a literal", line)
			}
			if o.lang != "" && !strings.HasPrefix(strings.ToLower(o.lang), "en") {
				continue
			}
			if s.kind == termIRI {
				b.ntLabels[s.value] = append(b.ntLabels[s.value], ntLabel{text: o.value, kind: kind})
			}
			continue
		}
		sid := b.node(s.key(), localName(s.value), false)
		pid := b.pred(p.key(), splitCamel(localName(p.value)))
		b.triple(sid, pid, b.node(o.key(), o.label(), o.kind == termLiteral))
	}
	return sc.Err()
}

type termKind uint8

const (
	termIRI termKind = iota
	termBlank
	termLiteral
)

type term struct {
	kind  termKind
	value string
	lang  string
}

func (t term) key() string {
	switch t.kind {
	case termIRI:
		return "<" + t.value + ">"
	case termBlank:
		return "_:" + t.value
	}
	return "\"" + t.value
}

func (t term) label() string {
	if t.kind == termLiteral {
		return t.value
	}
	return localName(t.value)
}

// ntTerms parses "s p o ." into three terms.
func ntTerms(line string) ([3]term, error) {
	var out [3]term
	rest := line
	for i := range out {
		rest = strings.TrimLeft(rest, " \t")
		if rest == "" {
			return out, errors.New("fewer than three terms")
		}
		var err error
		out[i], rest, err = ntTerm(rest)
		if err != nil {
			return out, err
		}
	}
	if rest = strings.TrimSpace(rest); rest != "." && !strings.HasPrefix(rest, ". #") && !strings.HasPrefix(rest, ".#") {
		return out, fmt.Errorf("want \".\" after the object, got %q", rest)
	}
	return out, nil
}

func ntTerm(s string) (term, string, error) {
	switch {
	case s[0] == '<':
		end := strings.IndexByte(s, '>')
		if end < 0 {
			return term{}, "", errors.New("unterminated IRI")
		}
		return term{kind: termIRI, value: s[1:end]}, s[end+1:], nil
	case strings.HasPrefix(s, "_:"):
		end := strings.IndexAny(s, " \t")
		if end < 0 {
			return term{}, "", errors.New("blank node without a following term")
		}
		return term{kind: termBlank, value: s[2:end]}, s[end:], nil
	case s[0] == '"':
		var v strings.Builder
		i := 1
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] != '\\' {
				v.WriteByte(s[i])
				continue
			}
			if i+1 >= len(s) {
				return term{}, "", errors.New("unterminated escape")
			}
			i++
			switch s[i] {
			case 't':
				v.WriteByte('\t')
			case 'n':
				v.WriteByte('\n')
			case 'r':
				v.WriteByte('\r')
			case 'b':
				v.WriteByte('\b')
			case 'f':
				v.WriteByte('\f')
			case '"', '\'', '\\':
				v.WriteByte(s[i])
			case 'u', 'U':
				n := 4
				if s[i] == 'U' {
					n = 8
				}
				if i+n >= len(s) {
					return term{}, "", errors.New("short \\u escape")
				}
				r, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32)
				if err != nil {
					return term{}, "", fmt.Errorf("bad \\u escape: %w", err)
				}
				v.WriteRune(rune(r))
				i += n
			default:
				return term{}, "", fmt.Errorf("unknown escape \\%c", s[i])
			}
		}
		if i >= len(s) {
			return term{}, "", errors.New("unterminated literal")
		}
		t := term{kind: termLiteral, value: v.String()}
		rest := s[i+1:]
		switch {
		case strings.HasPrefix(rest, "@"):
			end := strings.IndexAny(rest, " \t.")
			if end < 0 {
				end = len(rest)
			}
			t.lang, rest = rest[1:end], rest[end:]
		case strings.HasPrefix(rest, "^^<"):
			end := strings.IndexByte(rest, '>')
			if end < 0 {
				return term{}, "", errors.New("unterminated datatype IRI")
			}
			rest = rest[end+1:]
		}
		return t, rest, nil
	}
	return term{}, "", fmt.Errorf("unexpected %q", s[:min(len(s), 10)])
}

// localName is the last segment of an IRI: after #, else after the last /.
func localName(iri string) string {
	if i := strings.LastIndexAny(iri, "#/"); i >= 0 && i+1 < len(iri) {
		return iri[i+1:]
	}
	return iri
}

// splitCamel turns "capitalCity" and "official_language" into words.
func splitCamel(s string) string {
	var b strings.Builder
	prevLower := false
	for _, r := range s {
		switch {
		case r == '_' || r == '-':
			b.WriteByte(' ')
			prevLower = false
			continue
		case unicode.IsUpper(r) && prevLower:
			b.WriteByte(' ')
		}
		b.WriteRune(unicode.ToLower(r))
		prevLower = unicode.IsLower(r) || unicode.IsDigit(r)
	}
	return b.String()
}
