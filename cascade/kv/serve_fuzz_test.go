package kv

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/cascade"
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
		req, ok := fuzzRequest(role, q, system, parts)
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

// fuzzRequest builds a request the way the proxy's decoder does: an optional system prompt, then
// one message with role and text, as a string or as one text part.
func fuzzRequest(role, q, system string, parts bool) (*cascade.Request, bool) {
	var content any = q
	if parts {
		content = []map[string]string{{"type": "text", "text": q}}
	}
	msgs := []map[string]any{}
	if system != "" {
		msgs = append(msgs, map[string]any{"role": "system", "content": system})
	}
	msgs = append(msgs, map[string]any{"role": role, "content": content})
	body, err := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	if err != nil {
		return nil, false
	}
	var c cascade.ChatRequest
	if json.Unmarshal(body, &c) != nil {
		return nil, false
	}
	return &cascade.Request{Chat: c, Raw: body}, true
}
