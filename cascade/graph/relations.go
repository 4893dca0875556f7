package graph

import (
	_ "embed"
	"fmt"
	"strings"
	"sync"
)

// relationsTSV is the built-in relations table: predicate directives for common relations.
//
//go:embed relations.tsv
var relationsTSV string

// relations parses relationsTSV once: relation name, normalised (relationNorm) → naming rows. An error is
// a defect of the build (TestRelationsTable reads the table), reported by every load.
var relations = sync.OnceValues(func() (map[string][]ntLabel, error) {
	m, err := readRelations(relationsTSV)
	if err != nil {
		return nil, fmt.Errorf("built-in relations.tsv:%w", err)
	}
	return m, nil
})

// readRelations reads "@p TAB kind TAB words" lines, the directive lines of a TSV facts file.
func readRelations(src string) (map[string][]ntLabel, error) {
	m := map[string][]ntLabel{}
	for i, line := range strings.Split(src, "\n") {
		line = strings.TrimRight(line, "\r")
		if t := strings.TrimSpace(line); t == "" || t[0] == '#' {
			continue
		}
		cols := strings.Split(line, "\t")
		name, ok := strings.CutPrefix(cols[0], "@")
		if len(cols) != 3 || !ok || name == "" {
			return nil, fmt.Errorf("%d: want @relation, kind and words, tab-separated", i+1)
		}
		kind, known := tsvNames[strings.ToLower(cols[1])]
		if !known || kind == "label" {
			return nil, fmt.Errorf("%d: %q is not one of alias, verb, inverse_verb, template, template_many_subjects, template_many_objects", i+1, cols[1])
		}
		norm := relationNorm(name)
		for _, v := range splitValues(kind, cols[2]) {
			m[norm] = append(m[norm], ntLabel{text: v, kind: kind})
		}
	}
	return m, nil
}

// relationNorm is the form a predicate is looked up in the relations table by: its words,
// normalised ("official_language", "officialLanguage" and "Official language" are one).
func relationNorm(name string) string { return joinNorm(words(splitCamel(name))) }

// applyRelations gives each predicate whose name or label is a built-in relation that relation's
// words, and its templates where the facts did not set their own.
func (b *builder) applyRelations(table map[string][]ntLabel) {
	for p := range b.pdefs {
		rows := table[relationNorm(b.pdefs[p].label)]
		if rows == nil {
			rows = table[relationNorm(localName(strings.Trim(b.pdefs[p].name, "<>")))]
		}
		set := map[string]bool{
			"template":     b.pdefs[p].template != "",
			"manySubjects": b.pdefs[p].manySubjects != "",
			"manyObjects":  b.pdefs[p].manyObjects != "",
		}
		for _, r := range rows {
			if !set[r.kind] {
				b.predName(int32(p), r.kind, r.text)
			}
		}
	}
}
