package graph

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// synthetic writes n facts over n/4 entities named "Entity N" with eight predicates, so that
// every entity has several facts and every name is unique.
func synthetic(n int) string {
	var b strings.Builder
	preds := []string{"capital", "currency", "author", "painter", "director", "symbol", "mayor", "founder"}
	for _, p := range preds {
		fmt.Fprintf(&b, "@%s\ttemplate\tThe %s of {s} is {o}.\n", p, p)
	}
	ents := n / 4
	for i := range n {
		s := i % ents
		p := preds[(i/ents)%len(preds)]
		fmt.Fprintf(&b, "Entity %d\t%s\tValue %d %s\n", s, p, i, p)
	}
	return b.String()
}

func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("triples=%dk", n/1000), func(b *testing.B) {
			bld := newBuilder()
			if err := bld.readTSV(strings.NewReader(synthetic(n))); err != nil {
				b.Fatal(err)
			}
			table, err := relations()
			if err != nil {
				b.Fatal(err)
			}
			st := bld.build(table)
			if st.triples != n {
				b.Fatalf("%d triples", st.triples)
			}
			qs := []string{
				"What is the capital of Entity 17?",
				fmt.Sprintf("What is the author of Entity %d?", n/4-3),
				"Which one has Value 5 capital as its capital?",
				"What is the capital of Entity 17 and Entity 18?", // declined
			}
			for i, q := range qs {
				if _, ok := st.answer(q); ok != (i < 3) {
					b.Fatalf("%q: answered %v", q, ok)
				}
			}
			for i := 0; b.Loop(); i++ {
				st.answer(qs[i%len(qs)])
			}
		})
	}
}

// BenchmarkServeMiss is the graph stage on a request it does not answer, shaped like
// scripts/benchout's (a system message, then a user question of made-up words), over the
// shipped facts (data/facts.tsv).
func BenchmarkServeMiss(b *testing.B) {
	s, err := New(Options{Files: []string{"../../data/facts.tsv"}})
	if err != nil {
		b.Fatal(err)
	}
	sys, _ := json.Marshal("You are a helpful assistant. Be brief.")
	q, _ := json.Marshal("Please explain in two sentences how bakufi glumedo stotri vizo lapo rusate relates to gluba " +
		"fikute sobra damena tripo zolavi.")
	req := &cascade.Request{Chat: cascade.ChatRequest{Model: "m", Messages: []cascade.Message{
		{Role: "system", Content: sys}, {Role: "user", Content: q}}}}
	for b.Loop() {
		if _, err := s.Serve(context.Background(), req, nil); !errors.Is(err, cascade.ErrMiss) {
			b.Fatalf("err %v, want a miss", err)
		}
	}
}
