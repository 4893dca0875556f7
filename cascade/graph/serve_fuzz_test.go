package graph

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/internal/cascadetest"
)

// FuzzServe: the stage answers any conversation (arbitrary message, role, system prompt, content
// as text or parts) with a whole answer or a miss, never a panic or another error.
func FuzzServe(f *testing.F) {
	s, err := New(Options{Files: []string{"data/facts.tsv"}, FS: os.DirFS("../..")})
	if err != nil {
		f.Fatal(err)
	}
	for _, q := range []string{"What is the capital of France?", "capital of france", "Who wrote Hamlet?", "", "?", "'s", "\x00\xff"} {
		f.Add("user", q, "", false)
		f.Add("user", q, "Answer in French.", true)
	}
	f.Add("assistant", "What is the capital of France?", "", false)
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
		if ans == nil || len(ans.Choices) != 1 || ans.Choices[0].Message.Content == nil || !ans.Complete {
			t.Fatalf("Serve(%q) = %+v", q, ans)
		}
	})
}
