package cascade

import (
	"fmt"
	"strings"
)

// MaxToolCalls bounds the tool calls one streamed choice may carry: an upstream's tool-call
// index beyond it fails the call rather than growing memory to any size it names.
const MaxToolCalls = 128

// Assembler rebuilds a whole Answer from stream chunks, so a stream can be cached, learned from
// and replayed later. The zero value is ready to use and accepts one choice; it is not safe for
// concurrent use.
//
// Indexes come from the upstream and are bounded: a choice index outside [0, Choices) or a
// tool-call index outside [0, MaxToolCalls) makes Add drop the chunk and Err report it, so the
// caller fails the call as an upstream error.
type Assembler struct {
	// Choices is the number of choices the request asked for (its n); 0 means 1.
	Choices int
	// MaxBytes bounds the text recorded (content, reasoning, refusal, tool-call arguments, all
	// choices together); 0 means no bound. Past it the text recorded so far is dropped and no
	// more is kept: the chunks still go to the client, and Answer returns an Oversize answer
	// (finish reasons, usage, no text), so a huge stream is served without being held whole.
	MaxBytes int

	ans     Answer
	choices []*assembling
	err     error
	bytes   int  // text recorded so far
	over    bool // MaxBytes was passed
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

// Add folds one chunk into the answer. After a chunk with an index out of bounds it does
// nothing; Err says why.
func (a *Assembler) Add(ch *Chunk) {
	if a.err != nil {
		return
	}
	if a.err = a.check(ch); a.err != nil {
		return
	}
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
		if a.MaxBytes > 0 && !a.over {
			a.bytes += chunkBytes(&c.Delta)
			if a.bytes > a.MaxBytes {
				a.drop()
			}
		}
		if a.over {
			if c.Delta.Content != nil {
				s.hasText = true
			}
			for j, tc := range c.Delta.ToolCalls {
				idx := j
				if tc.Index != nil {
					idx = *tc.Index
				}
				for len(s.calls) <= idx {
					s.calls = append(s.calls, ToolCall{Type: "function"})
					s.args = append(s.args, strings.Builder{})
				}
			}
			if c.FinishReason != nil && *c.FinishReason != "" {
				s.finish = *c.FinishReason
			}
			continue
		}
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

// chunkBytes is the text a delta adds to a recording.
func chunkBytes(d *Delta) int {
	n := len(d.ReasoningContent) + len(d.Refusal)
	if d.Content != nil {
		n += len(*d.Content)
	}
	for _, tc := range d.ToolCalls {
		n += len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments)
	}
	return n
}

// drop lets go of the text recorded so far, once MaxBytes is passed.
func (a *Assembler) drop() {
	a.over = true
	for _, s := range a.choices {
		s.content, s.reasoning, s.refusal = strings.Builder{}, strings.Builder{}, strings.Builder{}
		for j := range s.args {
			s.args[j] = strings.Builder{}
			s.calls[j].ID, s.calls[j].Function.Name = "", ""
		}
	}
}

// Err returns the first out-of-bounds index Add met, or nil.
func (a *Assembler) Err() error { return a.err }

// check validates a chunk's indexes before anything is grown for them.
func (a *Assembler) check(ch *Chunk) error {
	n := max(a.Choices, 1)
	for _, c := range ch.Choices {
		if c.Index < 0 || c.Index >= n {
			return fmt.Errorf("stream chunk: choice index %d is outside [0, %d)", c.Index, n)
		}
		for _, tc := range c.Delta.ToolCalls {
			if tc.Index != nil && (*tc.Index < 0 || *tc.Index >= MaxToolCalls) {
				return fmt.Errorf("stream chunk: tool call index %d is outside [0, %d)", *tc.Index, MaxToolCalls)
			}
		}
		if len(c.Delta.ToolCalls) > MaxToolCalls {
			return fmt.Errorf("stream chunk: %d tool calls, more than %d", len(c.Delta.ToolCalls), MaxToolCalls)
		}
	}
	return nil
}

// CheckAnswer applies to a whole answer the bounds Add applies to stream chunks, so that an
// upstream's answer gets one verdict whether it came whole or streamed: each choice's index in
// [0, n) (n is the request's n; 0 means 1) and named once, and each choice's tool calls at most
// MaxToolCalls.
func CheckAnswer(ans *Answer, n int) error {
	n = max(n, 1)
	if len(ans.Choices) > n {
		return fmt.Errorf("answer: %d choices, more than the %d asked", len(ans.Choices), n)
	}
	var seen map[int]bool // only for more than one choice
	if len(ans.Choices) > 1 {
		seen = make(map[int]bool, len(ans.Choices))
	}
	for _, c := range ans.Choices {
		if c.Index < 0 || c.Index >= n {
			return fmt.Errorf("answer: choice index %d is outside [0, %d)", c.Index, n)
		}
		if seen != nil {
			if seen[c.Index] {
				return fmt.Errorf("answer: choice index %d named twice", c.Index)
			}
			seen[c.Index] = true
		}
		if k := len(c.Message.ToolCalls); k > MaxToolCalls {
			return fmt.Errorf("answer: %d tool calls, more than %d", k, MaxToolCalls)
		}
	}
	return nil
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
	ans.Oversize = a.over
	return &ans
}
