package kv

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/internal/cascadetest"
)

// FuzzServe: with seeds and learned answers in place, the stage answers any conversation with
// an answer or a miss, never a panic or another error.
func FuzzServe(f *testing.F) {
	seeds := writeFile(f, "faq.jsonl", `{"question":"How do I reset my password?","answer":"Use the link."}`+"\n")
	s := newStage(f, Options{SeedFiles: []string{seeds}})
	for _, q := range []string{"What is DNS?", "Explain TCP handshakes."} {
		teach(f, s, request("", "m", user(q)), neural("answer to "+q, 1))
	}
	for _, q := range []string{"How do I reset my password?", "what is dns", "What is DNS?", "", " ", "'s n't", "\x00\xff", "Explain TCP handshakes!"} {
		f.Add("user", q, "", false)
		f.Add("user", q, "Be brief.", true)
	}
	f.Add("tool", "What is DNS?", "", false)
	f.Fuzz(func(t *testing.T, role, q, system string, parts bool) {
		req, ok := cascadetest.FuzzRequest(role, q, system, parts)
		if !ok {
			return
		}
		ans, err := s.Serve(context.Background(), req, nil)
		if err != nil {
			if !errors.Is(err, cascade.ErrMiss) {
				t.Fatalf("Serve(%q): %v", q, err)
			}
			return
		}
		if ans == nil || len(ans.Choices) != 1 || ans.Choices[0].Message.Content == nil {
			t.Fatalf("Serve(%q) = %+v", q, ans)
		}
	})
}

// FuzzLearnCounts: the counts a built-in miss keeps for learning join into the vector the
// worker would embed the query to (embedQueryJoined), for any conversation.
func FuzzLearnCounts(f *testing.F) {
	s := newStage(f, Options{})
	teach(f, s, request("", "m", user("What is DNS?")), neural("Names.", 1))
	for _, q := range []string{"How do I reset my password?", "what is dns", "", " ", "'s n't", "\x00\xff", "ｆｕｌｌ width", "I can't"} {
		f.Add("user", q, "", false)
		f.Add("user", q, "Be brief.", true)
	}
	f.Fuzz(func(t *testing.T, role, q, system string, parts bool) {
		req, ok := cascadetest.FuzzRequest(role, q, system, parts)
		if !ok {
			return
		}
		if _, err := s.Serve(context.Background(), req, nil); err == nil {
			return
		}
		e, ref, ok := s.recent.peek(req.Key())
		if !ok || ref.gen == 0 {
			return
		}
		var c [2 * BuiltinDim]int32
		if !s.recent.counts(ref, &c) {
			t.Fatal("the counts just kept are gone")
		}
		got := make([]float32, 2*BuiltinDim)
		want, ok := embedQueryJoined(e.q)
		if !joinCounts(got, &c) || !ok || !slices.Equal(got, want) {
			t.Fatalf("%q: the counts kept join to another vector than the query's", q)
		}
	})
}
