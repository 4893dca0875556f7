package messages

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n got: %s\nwant: %s", name, got, want)
	}
}

func decodeOK(t *testing.T, body string) dialect.Exchange {
	t.Helper()
	x, e := New().Decode(context.Background(), "tenant", []byte(body))
	if e != nil {
		t.Fatalf("Decode: %d %s (param %q)", e.Status, e.Message, e.Param)
	}
	return x
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       string // RawChat
		stream     bool
	}{
		{
			name: "string content",
			body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
			want: `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`,
		},
		{
			name: "system string, sampling, stop sequences",
			body: `{"model":"m","max_tokens":5,"system":"be brief","temperature":0.5,"top_p":0.9,"stop_sequences":["\n\n","END"],
				"messages":[{"role":"user","content":"hi"}]}`,
			want: `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"temperature":0.5,"top_p":0.9,"max_tokens":5,"stop":["\n\n","END"]}`,
		},
		{
			name: "system blocks with cache_control are joined",
			body: `{"model":"m","max_tokens":5,"system":[{"type":"text","text":"one","cache_control":{"type":"ephemeral"}},{"type":"text","text":"two"}],
				"messages":[{"role":"user","content":"hi"}]}`,
			want: `{"model":"m","messages":[{"role":"system","content":"one\ntwo"},{"role":"user","content":"hi"}],"max_tokens":5}`,
		},
		{
			name: "text blocks are joined",
			body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b","citations":null}]}]}`,
			want: `{"model":"m","messages":[{"role":"user","content":"a\nb"}],"max_tokens":5}`,
		},
		{
			name: "a tool round trip: tool_use to tool_calls, tool_result to a tool message before the text",
			body: `{"model":"m","max_tokens":50,"messages":[
				{"role":"user","content":"weather?"},
				{"role":"assistant","content":[{"type":"text","text":"checking"},{"type":"tool_use","id":"toolu_1","name":"weather","input":{"city": "Paris"}}]},
				{"role":"user","content":[{"type":"text","text":"thanks"},{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"}]}],
				"tools":[{"name":"weather","description":"the weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],
				"tool_choice":{"type":"auto"}}`,
			want: `{"model":"m","messages":[{"role":"user","content":"weather?"},` +
				`{"role":"assistant","content":"checking","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
				`{"role":"tool","content":"sunny","tool_call_id":"toolu_1"},{"role":"user","content":"thanks"}],"max_tokens":50,` +
				`"tools":[{"type":"function","function":{"name":"weather","description":"the weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],"tool_choice":"auto"}`,
		},
		{
			name: "an assistant message of tool_use alone has no content",
			body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]}]}`,
			want: `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
				`{"role":"tool","content":"","tool_call_id":"t"}],"max_tokens":5}`,
		},
		{
			name: "tool_result with blocks and is_error",
			body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","is_error":true,"content":[{"type":"text","text":"boom"}]}]}]}`,
			want: `{"model":"m","messages":[{"role":"tool","content":"Error: boom","tool_call_id":"t"}],"max_tokens":5}`,
		},
		{
			name: "tool_choice any is required",
			body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f","input_schema":{"type":"object"},"type":"custom"}],"tool_choice":{"type":"any"}}`,
			want: `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"required"}`,
		},
		{
			name: "tool_choice tool names the function",
			body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"f"}}`,
			want: `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"function":{"name":"f"},"type":"function"}}`,
		},
		{
			name: "tool_choice none",
			body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"none"}}`,
			want: `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5,"tool_choice":"none"}`,
		},
		{
			name:   "stream asks the backend for usage",
			body:   `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"x"}]}`,
			want:   `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":5}`,
			stream: true,
		},
		{
			name: "harmless fields are accepted and change nothing",
			body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"metadata":{"user_id":"u-1"},"service_tier":"auto","thinking":{"type":"disabled"},"top_k":null}`,
			want: `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":5}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := decodeOK(t, tc.body)
			if got := string(x.RawChat()); got != tc.want {
				t.Errorf("RawChat\n got: %s\nwant: %s", got, tc.want)
			}
			if x.Stream() != tc.stream {
				t.Errorf("Stream() = %v", x.Stream())
			}
			var back cascade.ChatRequest
			if err := json.Unmarshal(x.RawChat(), &back); err != nil {
				t.Fatal(err)
			}
			if x.Chat().Model != back.Model || len(x.Chat().Messages) != len(back.Messages) {
				t.Errorf("Chat() and RawChat() disagree")
			}
		})
	}
}

func TestDecodeRefuses(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"x"}]`
	for _, tc := range []struct {
		name, body, param string
		code              string
	}{
		{"not JSON", `{"model":`, "", ""},
		{"not an object", `[1]`, "", ""},
		{"empty", ``, "", ""},
		{"model missing", `{"max_tokens":5,` + msgs + `}`, "model", ""},
		{"max_tokens missing", `{"model":"m",` + msgs + `}`, "max_tokens", ""},
		{"max_tokens zero", `{"model":"m","max_tokens":0,` + msgs + `}`, "max_tokens", ""},
		{"max_tokens a string", `{"model":"m","max_tokens":"5",` + msgs + `}`, "max_tokens", ""},
		{"no messages", `{"model":"m","max_tokens":5,"messages":[]}`, "messages", ""},
		{"an unknown field", `{"model":"m","max_tokens":5,"container":"c",` + msgs + `}`, "container", ""},
		{"a field sent twice", `{"model":"m","model":"n","max_tokens":5,` + msgs + `}`, "model", ""},
		{"temperature above 1", `{"model":"m","max_tokens":5,"temperature":1.5,` + msgs + `}`, "temperature", ""},
		{"top_p above 1", `{"model":"m","max_tokens":5,"top_p":2,` + msgs + `}`, "top_p", ""},
		{"top_k", `{"model":"m","max_tokens":5,"top_k":40,` + msgs + `}`, "top_k", ""},
		{"thinking enabled", `{"model":"m","max_tokens":5,"thinking":{"type":"enabled","budget_tokens":1024},` + msgs + `}`, "thinking", ""},
		{"metadata not an object", `{"model":"m","max_tokens":5,"metadata":"x",` + msgs + `}`, "metadata", ""},
		{"service_tier not a string", `{"model":"m","max_tokens":5,"service_tier":1,` + msgs + `}`, "service_tier", ""},
		{"system role in messages", `{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"}]}`, "messages[0].role", ""},
		{"content missing", `{"model":"m","max_tokens":5,"messages":[{"role":"user"}]}`, "messages[0].content", ""},
		{"content a number", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":5}]}`, "messages[0].content", ""},
		{"a member a message has not", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x","name":"n"}]}`, "messages[0].name", ""},
		{"image block", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64"}}]}]}`, "messages[0].content[0].type", ""},
		{"document block", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]}`, "messages[0].content[0].type", ""},
		{"thinking block", `{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"}]}]}`, "messages[0].content[0].type", ""},
		{"a block without a type", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"text":"x"}]}]}`, "messages[0].content[0]", ""},
		{"a block not an object", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":["x"]}]}`, "messages[0].content[0]", ""},
		{"a text block without text", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text"}]}]}`, "messages[0].content[0].text", ""},
		{"a text block's text a number", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":1}]}]}`, "messages[0].content[0].text", ""},
		{"a member of another block type", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"x","input":{}}]}]}`, "messages[0].content[0].input", ""},
		{"citations", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"x","citations":[{}]}]}]}`, "messages[0].content[0].citations", ""},
		{"tool_use in a user message", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]}`, "messages[0].content[0].type", ""},
		{"tool_use without an id", `{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","name":"f","input":{}}]}]}`, "messages[0].content[0]", ""},
		{"tool_use input not an object", `{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":[1]}]}]}`, "messages[0].content[0].input", ""},
		{"tool_result in an assistant message", `{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"t"}]}]}`, "messages[0].content[0].type", ""},
		{"tool_result without tool_use_id", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}`, "messages[0].content[0].tool_use_id", ""},
		{"tool_result with an image", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{}}]}]}]}`, "messages[0].content[0].content[0].type", ""},
		{"system with a tool_use block", `{"model":"m","max_tokens":5,"system":[{"type":"tool_use","id":"t","name":"f","input":{}}],` + msgs + `}`, "system[0].type", ""},
		{"system a number", `{"model":"m","max_tokens":5,"system":5,` + msgs + `}`, "system", ""},
		{"a server tool", `{"model":"m","max_tokens":5,"tools":[{"type":"web_search_20250305","name":"web_search"}],` + msgs + `}`, "tools[0].type", ""},
		{"a tool without a name", `{"model":"m","max_tokens":5,"tools":[{"input_schema":{"type":"object"}}],` + msgs + `}`, "tools[0].name", ""},
		{"a tool without input_schema", `{"model":"m","max_tokens":5,"tools":[{"name":"f"}],` + msgs + `}`, "tools[0].input_schema", ""},
		{"tool_choice of an unknown type", `{"model":"m","max_tokens":5,"tool_choice":{"type":"maybe"},` + msgs + `}`, "tool_choice.type", ""},
		{"tool_choice tool without a name", `{"model":"m","max_tokens":5,"tool_choice":{"type":"tool"},` + msgs + `}`, "tool_choice.name", ""},
		{"tool_choice auto with a name", `{"model":"m","max_tokens":5,"tool_choice":{"type":"auto","name":"f"},` + msgs + `}`, "tool_choice.name", ""},
		{"disable_parallel_tool_use", `{"model":"m","max_tokens":5,"tool_choice":{"type":"auto","disable_parallel_tool_use":true},` + msgs + `}`, "tool_choice.disable_parallel_tool_use", ""},
		{"stop_sequences not strings", `{"model":"m","max_tokens":5,"stop_sequences":[1],` + msgs + `}`, "stop_sequences[0]", ""},
		{"too many stop sequences", `{"model":"m","max_tokens":5,"stop_sequences":[` + strings.Repeat(`"x",`, maxStop) + `"x"],` + msgs + `}`, "stop_sequences", "array_above_max_length"},
		{"too many tools", `{"model":"m","max_tokens":5,"tools":[` + strings.Repeat(`{},`, maxTools) + `{}],` + msgs + `}`, "tools", "array_above_max_length"},
		{"too many messages", `{"model":"m","max_tokens":5,"messages":[` + strings.Repeat(`{},`, maxMessages) + `{}]}`, "messages", "array_above_max_length"},
		{"too many blocks over all messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[` + strings.Repeat(`{},`, maxBlocks/2) + `{}]},{"role":"user","content":[` + strings.Repeat(`{},`, maxBlocks/2) + `{}]}]}`, "", "array_above_max_length"},
		{"nested too deep", `{"model":"m","max_tokens":5,"metadata":` + strings.Repeat(`{"a":`, maxDepth) + `1` + strings.Repeat(`}`, maxDepth) + `,` + msgs + `}`, "", "nesting_too_deep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, e := New().Decode(context.Background(), "", []byte(tc.body))
			if e == nil {
				t.Fatalf("accepted: %s", x.RawChat())
			}
			if e.Status != 400 || e.Type != "invalid_request_error" || e.Param != tc.param || e.Code != tc.code {
				t.Errorf("got %d %s param %q code %q: %s; want 400 param %q code %q", e.Status, e.Type, e.Param, e.Code, e.Message, tc.param, tc.code)
			}
			if tc.param != "" && !strings.HasPrefix(e.Message, tc.param) {
				t.Errorf("message %q does not name %s", e.Message, tc.param)
			}
		})
	}
}

// bodies are requests for the fuzzer's corpus and the bound tests.
var bodies = []string{
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"m","max_tokens":5,"stream":true,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"a"}]},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":[1,{"b":null}]}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r"}],"is_error":false}]}],` +
		`"tools":[{"name":"f","description":"d","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"f"},"stop_sequences":["x"],"temperature":0,"top_p":1}`,
}

func FuzzDecode(f *testing.F) {
	for _, b := range bodies {
		f.Add([]byte(b))
	}
	f.Add([]byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image"}]}],"top_k":1}`))
	f.Add([]byte(`{"model":"m","max_tokens":1e400,"messages":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		x, e := New().Decode(context.Background(), "", body)
		if e != nil {
			if e.Status != 400 || e.Message == "" {
				t.Fatalf("refusal %d %q", e.Status, e.Message)
			}
			if b := New().Error(e); !json.Valid(b) {
				t.Fatalf("error body not JSON: %s", b)
			}
			return
		}
		c := x.Chat()
		if c.Model == "" || len(c.Messages) == 0 || c.MaxTokens == nil || *c.MaxTokens < 1 {
			t.Fatalf("accepted an incomplete call: %s", x.RawChat())
		}
		var back cascade.ChatRequest
		if err := json.Unmarshal(x.RawChat(), &back); err != nil {
			t.Fatalf("RawChat is not a chat request: %v", err)
		}
		if _, _, e := New().CountTokens(body); e != nil {
			t.Fatalf("count_tokens refused what messages took: %s", e.Message)
		}
	})
}

func TestCountTokens(t *testing.T) {
	out, estimated, e := New().CountTokens([]byte(`{"model":"m","system":"12345678","messages":[{"role":"user","content":"1234"}],` +
		`"tools":[{"name":"abcd","input_schema":{"type":"object"}}]}`))
	if e != nil {
		t.Fatal(e.Message)
	}
	// system 2 + user 1 + tool name 1 + schema ({"type":"object"}, 17 characters) 5.
	if string(out) != `{"input_tokens":9}` || !estimated {
		t.Errorf("got %s, estimated %v", out, estimated)
	}
	if _, _, e := New().CountTokens([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"image"}]}]}`)); e == nil || e.Param != "messages[0].content[0].type" {
		t.Errorf("an image block was counted: %v", e)
	}
}

func TestErrorShape(t *testing.T) {
	for _, tc := range []struct {
		status int
		typ    string
	}{
		{400, "invalid_request_error"}, {401, "authentication_error"}, {402, "billing_error"}, {403, "permission_error"},
		{404, "not_found_error"}, {405, "invalid_request_error"}, {413, "request_too_large"}, {429, "rate_limit_error"},
		{499, "invalid_request_error"}, {500, "api_error"}, {502, "api_error"}, {503, "overloaded_error"}, {504, "timeout_error"},
	} {
		e := &dialect.Error{Status: tc.status, Type: "whatever", Code: "c", Param: "p", Message: "went <wrong>"}
		var got struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		b := New().Error(e)
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if got.Type != "error" || got.Error.Type != tc.typ || got.Error.Message != e.Message {
			t.Errorf("%d: %s, want error type %s", tc.status, b, tc.typ)
		}
	}
	// A budget refusal, as the edge makes it, is a rate_limit_error (the SDKs' RateLimitError).
	b := New().Error(&dialect.Error{Status: 429, Type: "insufficient_quota", Code: "joule_budget_exceeded", Message: "joule budget exceeded"})
	golden(t, "error_budget.json", b)
}

func text(s string) *string { return &s }

func answer() *cascade.Answer {
	return &cascade.Answer{ID: "chatcmpl-abc", Model: "m:latest", Created: 1700000000,
		Choices: []cascade.Choice{{Message: cascade.AnswerMessage{Role: "assistant", Content: text("Hello")}, FinishReason: "stop"}},
		Usage:   &cascade.Usage{PromptTokens: 7, CompletionTokens: 2, TotalTokens: 9}, Complete: true}
}

func toolAnswer() *cascade.Answer {
	a := answer()
	a.Choices[0] = cascade.Choice{FinishReason: "tool_calls", Message: cascade.AnswerMessage{Role: "assistant", Content: text(""),
		ToolCalls: []cascade.ToolCall{
			{ID: "call_1", Type: "function", Function: cascade.ToolCallFunction{Name: "weather", Arguments: `{"city":"Paris"}`}},
			{ID: "", Type: "function", Function: cascade.ToolCallFunction{Name: "noargs", Arguments: ""}},
		}}}
	return a
}

func TestWhole(t *testing.T) {
	x := decodeOK(t, bodies[0])
	for _, tc := range []struct {
		name string
		ans  *cascade.Answer
	}{
		{"text", answer()},
		{"tool_use", toolAnswer()},
		{"max_tokens", func() *cascade.Answer { a := answer(); a.Choices[0].FinishReason = "length"; return a }()},
		{"no usage", func() *cascade.Answer { a := answer(); a.Usage = nil; return a }()},
		{"not JSON arguments", func() *cascade.Answer {
			a := toolAnswer()
			a.Choices[0].Message.ToolCalls = a.Choices[0].Message.ToolCalls[:1]
			a.Choices[0].Message.ToolCalls[0].Function.Arguments = "{oops"
			return a
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := x.Whole(tc.ans)
			if err != nil {
				t.Fatal(err)
			}
			if tc.name == "tool_use" {
				// The id the backend gave none of is fresh each time: fix it for the golden file.
				var m messageObject
				if err := json.Unmarshal(b, &m); err != nil {
					t.Fatal(err)
				}
				if id := m.Content[1].ID; !strings.HasPrefix(id, "toolu_") || len(id) < 20 {
					t.Fatalf("tool_use id %q", id)
				}
				b = bytes.Replace(b, []byte(m.Content[1].ID), []byte("toolu_FRESH"), 1)
			}
			golden(t, "whole_"+strings.ReplaceAll(tc.name, " ", "_")+".json", b)
		})
	}
}

// events runs chunks and the end through an encoder and returns the stream as SSE text.
func events(t *testing.T, x dialect.Exchange, chunks []*cascade.Chunk, ans *cascade.Answer) []byte {
	t.Helper()
	var b bytes.Buffer
	emit := func(ev dialect.Event) error {
		if !json.Valid(ev.Data) {
			t.Errorf("event %s: data not JSON: %s", ev.Name, ev.Data)
		}
		if ev.Name != "" {
			b.WriteString("event: " + ev.Name + "\n")
		}
		b.WriteString("data: ")
		b.Write(ev.Data)
		b.WriteString("\n\n")
		return nil
	}
	en := x.Encoder()
	for _, ch := range chunks {
		if err := en.Chunk(ch, emit); err != nil {
			t.Fatal(err)
		}
	}
	fig := dialect.Figures{View: energy.View{Joules: 1.5, JoulesLow: 1, JoulesHigh: 2, Grade: "measured", Coverage: "whole", Method: "rapl"},
		Stage: "neural", Receipt: "abcdef0123456789", State: "settled"}
	if err := en.End(ans, fig, emit); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func chunk(content *string, calls []cascade.ToolCall, finish string) *cascade.Chunk {
	c := &cascade.Chunk{ID: "chatcmpl-abc", Object: "chat.completion.chunk", Created: 1700000000, Model: "m:latest",
		Choices: []cascade.ChunkChoice{{Delta: cascade.Delta{Content: content, ToolCalls: calls}}}}
	if finish != "" {
		c.Choices[0].FinishReason = &finish
	}
	return c
}

func index(i int) *int { return &i }

func TestStream(t *testing.T) {
	x := decodeOK(t, `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"12345678"}]}`)
	usage := &cascade.Chunk{ID: "chatcmpl-abc", Model: "m:latest", Choices: []cascade.ChunkChoice{}, Usage: &cascade.Usage{PromptTokens: 7, CompletionTokens: 3, TotalTokens: 10}}
	for _, tc := range []struct {
		name   string
		chunks []*cascade.Chunk
		ans    *cascade.Answer
	}{
		{"text", []*cascade.Chunk{
			{ID: "chatcmpl-abc", Model: "m:latest", Choices: []cascade.ChunkChoice{{Delta: cascade.Delta{Role: "assistant", Content: text("")}}}},
			chunk(text("Hel"), nil, ""), chunk(text("lo"), nil, ""), chunk(nil, nil, "stop"), usage,
		}, answer()},
		{"text then tool calls in fragments", []*cascade.Chunk{
			chunk(text("Let me look."), nil, ""),
			chunk(nil, []cascade.ToolCall{{Index: index(0), ID: "call_1", Type: "function", Function: cascade.ToolCallFunction{Name: "weather"}}}, ""),
			chunk(nil, []cascade.ToolCall{{Index: index(0), Function: cascade.ToolCallFunction{Arguments: `{"city":`}}}, ""),
			chunk(nil, []cascade.ToolCall{{Index: index(0), Function: cascade.ToolCallFunction{Arguments: `"Paris"}`}}}, ""),
			chunk(nil, []cascade.ToolCall{{Index: index(1), ID: "call_2", Type: "function", Function: cascade.ToolCallFunction{Name: "time", Arguments: `{}`}}}, ""),
			chunk(nil, nil, "tool_calls"), usage,
		}, toolAnswer()},
		{"a length stop with no usage anywhere", []*cascade.Chunk{chunk(text("abcdefgh"), nil, "length")}, nil},
		{"an answer with no chunks", nil, answer()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			golden(t, "stream_"+strings.ReplaceAll(tc.name, " ", "_")+".txt", events(t, x, tc.chunks, tc.ans))
		})
	}
}

// TestBoundsHold takes bodies at each bound: the refusals above are for one more.
func TestBoundsHold(t *testing.T) {
	msg := `{"role":"user","content":"x"},`
	many := `{"model":"m","max_tokens":5,"messages":[` + strings.Repeat(msg, maxMessages-1) + `{"role":"user","content":"x"}]}`
	if x := decodeOK(t, many); len(x.Chat().Messages) != maxMessages {
		t.Errorf("%d messages", len(x.Chat().Messages))
	}
	blocks := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[` + strings.Repeat(`{"type":"text","text":"x"},`, maxBlocks-1) + `{"type":"text","text":"x"}]}]}`
	decodeOK(t, blocks)
	tool := `{"name":"f","input_schema":{"type":"object"}},`
	tools := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"tools":[` + strings.Repeat(tool, maxTools-1) + strings.TrimSuffix(tool, ",") + `]}`
	if x := decodeOK(t, tools); len(x.Chat().Tools) != maxTools {
		t.Errorf("%d tools", len(x.Chat().Tools))
	}
	deep := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"metadata":` + strings.Repeat(`{"a":`, maxDepth-1) + `1` + strings.Repeat(`}`, maxDepth-1) + `}`
	decodeOK(t, deep)
}
