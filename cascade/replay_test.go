package cascade

import (
	"encoding/json"
	"slices"
	"testing"
)

// Replay sends the chunks it sent when each was an allocation of its own (refReplay), and a
// chunk a sink keeps stays as it was sent while the later ones are made.
func TestReplayChunks(t *testing.T) {
	text, other := "hello", "other"
	ans := &Answer{ID: "a", Model: "m", Created: 7, SystemFingerprint: "fp", Usage: &Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3},
		Choices: []Choice{
			{Message: AnswerMessage{Role: "assistant", Content: &text, ReasoningContent: "why", ToolCalls: []ToolCall{
				{ID: "c1", Type: "function", Function: ToolCallFunction{Name: "f", Arguments: `{"x":1}`}},
				{ID: "c2", Type: "function", Function: ToolCallFunction{Name: "g", Arguments: `{}`}}}},
				FinishReason: "tool_calls", Logprobs: json.RawMessage(`{"content":[]}`)},
			{Index: 1, Message: AnswerMessage{Role: "assistant", Refusal: "no"}, FinishReason: "stop"},
			{Index: 2, Message: AnswerMessage{Role: "assistant", Content: &other}, FinishReason: "length"},
			{Index: 3, Message: AnswerMessage{Role: "assistant"}, FinishReason: "stop"},
		}}
	for _, usage := range []bool{false, true} {
		record := func(replay func(*Answer, bool, Sink) error) (sent []string, kept []*Chunk) {
			if err := replay(ans, usage, func(c *Chunk) error {
				b, err := json.Marshal(c)
				sent, kept = append(sent, string(b)), append(kept, c)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return sent, kept
		}
		want, _ := record(refReplay)
		got, kept := record(Replay)
		if !slices.Equal(got, want) {
			t.Errorf("usage %v: chunks\n%q\nwant\n%q", usage, got, want)
		}
		for i, c := range kept {
			if b, _ := json.Marshal(c); string(b) != got[i] {
				t.Errorf("usage %v: chunk %d changed after it was sent: %s, sent %s", usage, i, b, got[i])
			}
		}
	}
}

// refReplay is Replay as it was written before a choice's chunks shared an allocation: the
// reference TestReplayChunks compares with.
func refReplay(ans *Answer, includeUsage bool, sink Sink) error {
	base := func() *Chunk {
		return &Chunk{ID: ans.ID, Object: "chat.completion.chunk", Created: ans.Created, Model: ans.Model, SystemFingerprint: ans.SystemFingerprint}
	}
	for _, ch := range ans.Choices {
		role := base()
		role.Choices = []ChunkChoice{{Index: ch.Index, Delta: Delta{Role: "assistant"}}}
		if err := sink(role); err != nil {
			return err
		}
		m := ch.Message
		if m.Content != nil || m.ReasoningContent != "" || m.Refusal != "" || len(m.ToolCalls) > 0 {
			body := base()
			d := Delta{Content: m.Content, ReasoningContent: m.ReasoningContent, Refusal: m.Refusal}
			for i, tc := range m.ToolCalls {
				tc.Index = &i
				d.ToolCalls = append(d.ToolCalls, tc)
			}
			body.Choices = []ChunkChoice{{Index: ch.Index, Delta: d, Logprobs: ch.Logprobs}}
			if err := sink(body); err != nil {
				return err
			}
		}
		fin := base()
		reason := ch.FinishReason
		fin.Choices = []ChunkChoice{{Index: ch.Index, FinishReason: &reason}}
		if err := sink(fin); err != nil {
			return err
		}
	}
	if includeUsage && ans.Usage != nil {
		u := base()
		u.Choices = []ChunkChoice{}
		u.Usage = ans.Usage
		return sink(u)
	}
	return nil
}
