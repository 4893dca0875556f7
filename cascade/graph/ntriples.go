package graph

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
)

// The N-Triples reader: facts, and the labels, verbs and templates that name nodes and
// predicates.

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
		sid := b.node(s.ident(), localName(s.value), false)
		pid := b.pred(p.ident(), splitCamel(localName(p.value)))
		b.triple(sid, pid, b.node(o.ident(), o.label(), o.kind == termLiteral))
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

func (t term) ident() string {
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
