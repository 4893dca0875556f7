package cascade

import (
	"encoding/json"
	"testing"
)

func TestKeyChangesWithEveryAnswerField(t *testing.T) {
	base := `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"}]}`
	baseKey := (&Request{Raw: json.RawMessage(base)}).Key()
	changed := []struct {
		name, body, tenant string
	}{
		{"tenant", base, "team-b"},
		{"model", `{"model":"m2","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"}]}`, ""},
		{"history", `{"model":"m","messages":[{"role":"system","content":"s2"},{"role":"user","content":"q"}]}`, ""},
		{"content parts", `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"q"}]}]}`, ""},
		{"temperature", `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"}],"temperature":0.5}`, ""},
		{"top_p", `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"}],"top_p":0.5}`, ""},
		{"seed", `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"}],"seed":7}`, ""},
		{"max_tokens", `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"}],"max_tokens":7}`, ""},
		{"tools", `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"f"}}]}`, ""},
		{"unknown field", `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"}],"x_vendor":true}`, ""},
	}
	for _, tc := range changed {
		t.Run(tc.name, func(t *testing.T) {
			if k := (&Request{Raw: json.RawMessage(tc.body), Tenant: tc.tenant}).Key(); k == baseKey {
				t.Fatalf("key did not change")
			}
		})
	}
	same := []struct{ name, body string }{
		{"whitespace and order", `{ "messages":[{"content":"s","role":"system"},{"role":"user","content":"q"}], "model":"m" }`},
		{"stream", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":"s"},{"role":"user","content":"q"}]}`},
		{"user", `{"model":"m","user":"u1","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"}]}`},
	}
	for _, tc := range same {
		t.Run(tc.name, func(t *testing.T) {
			if k := (&Request{Raw: json.RawMessage(tc.body)}).Key(); k != baseKey {
				t.Fatalf("key changed")
			}
		})
	}
	if a, b := (&Request{Raw: json.RawMessage(`{"temperature":1.0}`)}).Key(), (&Request{Raw: json.RawMessage(`{"temperature":1}`)}).Key(); a != b {
		t.Fatal("1.0 and 1 differ")
	}
}

func TestAssemblerRoundTripsReplay(t *testing.T) {
	text := "hello"
	idx := 0
	ans := &Answer{ID: "a", Model: "m", Choices: []Choice{{Message: AnswerMessage{Role: "assistant", Content: &text,
		ToolCalls: []ToolCall{{Index: &idx, ID: "c1", Type: "function", Function: ToolCallFunction{Name: "f", Arguments: `{"x":1}`}}}}, FinishReason: "tool_calls"}},
		Usage: &Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}}
	var asm Assembler
	var n int
	if err := Replay(ans, true, func(c *Chunk) error { n++; asm.Add(c); return nil }); err != nil {
		t.Fatal(err)
	}
	got := asm.Answer()
	if n != 4 || !got.Complete || got.Text() != "hello" || got.Usage.TotalTokens != 3 || got.Choices[0].FinishReason != "tool_calls" ||
		got.Choices[0].Message.ToolCalls[0].Function.Arguments != `{"x":1}` {
		t.Fatalf("chunks %d, got %+v", n, got)
	}
	var partial Assembler
	partial.Add(&Chunk{Choices: []ChunkChoice{{Delta: Delta{Content: &text}}}})
	if partial.Answer().Complete {
		t.Fatal("an answer without a finish reason is complete")
	}
}
