package cascade

import "strings"

// Assembler rebuilds a whole Answer from stream chunks, so a stream can be cached, learned from
// and replayed later. The zero value is ready to use; it is not safe for concurrent use.
type Assembler struct {
	ans     Answer
	choices []*assembling
}

type assembling struct {
	content   strings.Builder
	hasText   bool
	reasoning strings.Builder
	refusal   strings.Builder
	calls     []ToolCall
	args      []strings.Builder
	finish    string
}

// Add folds one chunk into the answer.
func (a *Assembler) Add(ch *Chunk) {
	if a.ans.ID == "" {
		a.ans.ID, a.ans.Model, a.ans.Created = ch.ID, ch.Model, ch.Created
	}
	if ch.SystemFingerprint != "" {
		a.ans.SystemFingerprint = ch.SystemFingerprint
	}
	if ch.Usage != nil {
		u := *ch.Usage
		a.ans.Usage = &u
	}
	for _, c := range ch.Choices {
		for len(a.choices) <= c.Index {
			a.choices = append(a.choices, &assembling{})
		}
		s := a.choices[c.Index]
		if c.Delta.Content != nil {
			s.content.WriteString(*c.Delta.Content)
			s.hasText = true
		}
		s.reasoning.WriteString(c.Delta.ReasoningContent)
		s.refusal.WriteString(c.Delta.Refusal)
		for j, tc := range c.Delta.ToolCalls {
			idx := j
			if tc.Index != nil {
				idx = *tc.Index
			}
			for len(s.calls) <= idx {
				s.calls = append(s.calls, ToolCall{Type: "function"})
				s.args = append(s.args, strings.Builder{})
			}
			if tc.ID != "" {
				s.calls[idx].ID = tc.ID
			}
			if tc.Type != "" {
				s.calls[idx].Type = tc.Type
			}
			if tc.Function.Name != "" {
				s.calls[idx].Function.Name += tc.Function.Name
			}
			s.args[idx].WriteString(tc.Function.Arguments)
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			s.finish = *c.FinishReason
		}
	}
}

// Answer returns the assembled answer. Complete is set when every choice has a finish reason.
func (a *Assembler) Answer() *Answer {
	ans := a.ans
	ans.Choices = make([]Choice, len(a.choices))
	ans.Complete = len(a.choices) > 0
	for i, s := range a.choices {
		msg := AnswerMessage{Role: "assistant", ReasoningContent: s.reasoning.String(), Refusal: s.refusal.String()}
		if s.hasText || len(s.calls) == 0 {
			t := s.content.String()
			msg.Content = &t
		}
		for j := range s.calls {
			tc := s.calls[j]
			tc.Function.Arguments = s.args[j].String()
			msg.ToolCalls = append(msg.ToolCalls, tc)
		}
		ans.Choices[i] = Choice{Index: i, Message: msg, FinishReason: s.finish}
		if s.finish == "" {
			ans.Complete = false
		}
	}
	ans.Streamed = true
	return &ans
}
