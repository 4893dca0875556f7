package proxy

import (
	"encoding/json"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// sameCompletion fails unless appendCompletion writes a as encoding/json marshals it, or
// declines it for its logprobs.
func sameCompletion(t *testing.T, a *cascade.Answer) {
	t.Helper()
	want, werr := json.Marshal(completion{Object: "chat.completion", Answer: a})
	got, ok := appendCompletion(nil, a)
	if !ok {
		for _, c := range a.Choices {
			if len(c.Logprobs) > 0 {
				return
			}
		}
		t.Fatalf("declined an answer without logprobs: %+v", a)
	}
	if werr != nil || string(got) != string(want) {
		t.Fatalf("appendCompletion:\n%s\nencoding/json (err %v):\n%s", got, werr, want)
	}
}

// answerOf builds an answer from fuzzed parts: every optional field present or absent, every
// string one of the texts.
func answerOf(id, model, text, other string, created int64, n int, flags uint16) *cascade.Answer {
	a := &cascade.Answer{ID: id, Model: model, Created: created, Backend: "b", Complete: true}
	if flags&1 != 0 {
		a.SystemFingerprint = other
	}
	if flags&2 != 0 {
		a.Usage = &cascade.Usage{PromptTokens: n, CompletionTokens: -n, TotalTokens: n * 3}
	}
	if flags&4 == 0 {
		msg := cascade.AnswerMessage{Role: other}
		if flags&8 != 0 {
			msg.Content = &text
		}
		if flags&16 != 0 {
			msg.ReasoningContent = text + other
		}
		if flags&32 != 0 {
			msg.Refusal = other
		}
		if flags&64 != 0 {
			idx := n
			msg.ToolCalls = []cascade.ToolCall{{ID: id, Type: "function", Function: cascade.ToolCallFunction{Name: model, Arguments: text}},
				{Index: &idx, Function: cascade.ToolCallFunction{Arguments: other}}}
		}
		a.Choices = []cascade.Choice{{Index: n, Message: msg, FinishReason: other}}
		if flags&128 != 0 {
			a.Choices = append(a.Choices, cascade.Choice{Index: n + 1, FinishReason: text})
		}
		if flags&256 != 0 {
			a.Choices[0].Logprobs = json.RawMessage(`{"content":[]}`)
		}
	} else if flags&8 != 0 {
		a.Choices = []cascade.Choice{}
	}
	return a
}

// TestAppendCompletionIsEncodingJSON: the whole answer's body is what encoding/json made of it,
// for texts with escapes, HTML, unicode, invalid UTF-8 and line separators, tool calls and the
// optional fields each way.
func TestAppendCompletionIsEncodingJSON(t *testing.T) {
	texts := []string{"", "Paris.", "a \"quoted\" \\ back\\slash", "<b>&amp;</b>", "tab\tnew\nline\rret\bback\fform\x00\x01\x1f\x7f",
		"café ☕ 😀 Ωmega", "\u2028 and \u2029", "bad \xff\xfe utf8 \xc3", "\xe2\x80", "{\"x\":[1,2]}", "'single' /slash/"}
	for i, text := range texts {
		for flags := range uint16(512) {
			other := texts[(i+int(flags))%len(texts)]
			sameCompletion(t, answerOf(texts[(i+3)%len(texts)], other, text, texts[(i+5)%len(texts)], int64(i)*1e9, i-3, flags))
		}
	}
}

func FuzzAppendCompletion(f *testing.F) {
	f.Add("chatcmpl-1", "qwen3:0.6b", "The capital is Paris.", "stop", int64(1764900000), 7, uint16(2|8))
	f.Add("x", "m<>&", "\u2028\xff\"\\\n", "tool_calls", int64(-1), -2, uint16(0xffff))
	f.Fuzz(func(t *testing.T, id, model, text, other string, created int64, n int, flags uint16) {
		sameCompletion(t, answerOf(id, model, text, other, created, n, flags))
	})
}
