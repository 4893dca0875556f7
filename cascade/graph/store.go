package graph

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// store is one loaded graph, indexed for questions. It is read-only once built, so a Stage swaps
// whole stores on reload.
type store struct {
	labels    []string           // node → display label
	byLabel   map[string][]int32 // normalised label or alias → nodes
	gated     map[string]bool    // labels that match only when written with a capital (see spot)
	preds     []predicate
	byAlias   map[string][]predRef // normalised alias → predicates
	fwd       map[edge][]int32     // (subject, predicate) → objects
	inv       map[edge][]int32     // (object, predicate) → subjects
	vocab     map[string]bool      // every word of a label or alias in byLabel or byAlias
	maxPhrase int                  // longest label or alias, in words
	triples   int
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

// load reads and indexes files from fsys (the operating system when nil): .nt is N-Triples,
// anything else tab-separated values.
func load(fsys fs.FS, files []string) (*store, error) {
	table, err := relations()
	if err != nil {
		return nil, fmt.Errorf("graph: %w", err)
	}
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
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("graph: %s:%w", name, err)
		}
	}
	return b.build(table), nil
}
