package graph

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// The TSV reader: one fact or one predicate directive a line.

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
