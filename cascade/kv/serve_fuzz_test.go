package kv

import (
	"context"
	"errors"
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
