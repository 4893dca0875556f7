package backends

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

// sentToOllama sends body through an Ollama backend and returns what the fake received.
func sentToOllama(t *testing.T, body string, stream bool) api.ChatRequest {
	t.Helper()
	f := fakes.NewOllama(t)
	b := newBackend(t, "ollama", f)
	var sink cascade.Sink
	if stream {
		sink = (&collector{}).sink
	}
	if _, err := b.Chat(context.Background(), chatRequest(t, body), sink); err != nil {
		t.Fatalf("Chat: %v", err)
	}
	var got api.ChatRequest
	if err := json.Unmarshal(f.LastBody(), &got); err != nil {
		t.Fatalf("fake got %s: %v", f.LastBody(), err)
	}
	if got.Stream == nil || *got.Stream != stream {
		t.Errorf("stream = %v, want %v", got.Stream, stream)
	}
	return got
}

func TestOllamaRequestMapping(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nfake")
	cases := []struct {
		name  string
		body  string
		check func(t *testing.T, got api.ChatRequest)
	}{
		{
			name: "roles and plain content",
			body: `{"model":"llama3.2","messages":[
				{"role":"developer","content":"Be brief."},
				{"role":"system","content":"Be kind."},
				{"role":"user","content":"Hi"},
				{"role":"assistant","content":"Hello!"}]}`,
			check: func(t *testing.T, got api.ChatRequest) {
				want := []api.Message{
					{Role: "system", Content: "Be brief."},
					{Role: "system", Content: "Be kind."},
					{Role: "user", Content: "Hi"},
					{Role: "assistant", Content: "Hello!"},
				}
				if got.Model != "llama3.2" || !reflect.DeepEqual(got.Messages, want) {
					t.Errorf("got %s", mustJSON(t, got))
				}
				if got.Options != nil || got.Format != nil || got.Tools != nil || got.Think != nil {
					t.Errorf("unasked fields set: %s", mustJSON(t, got))
				}
			},
		},
		{
			name: "text parts joined, data image decoded",
			body: `{"model":"llava","messages":[{"role":"user","content":[
				{"type":"text","text":"What is this?"},
				{"type":"image_url","image_url":{"url":"data:image/png;base64,` + b64(png) + `","detail":"low"}},
				{"type":"text","text":"Be short."},
				{"type":"image_url","image_url":"data:;base64,` + b64([]byte("second")) + `"}]}]}`,
			check: func(t *testing.T, got api.ChatRequest) {
				m := got.Messages[0]
				if m.Content != "What is this?\nBe short." {
					t.Errorf("content = %q", m.Content)
				}
				if len(m.Images) != 2 || string(m.Images[0]) != string(png) || string(m.Images[1]) != "second" {
					t.Errorf("images = %q", m.Images)
				}
			},
		},
		{
			name: "options",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":0.2,"top_p":0.9,"seed":42,
				"max_completion_tokens":64,"max_tokens":9,"stop":"END","presence_penalty":0.5,"frequency_penalty":-0.5}`,
			check: func(t *testing.T, got api.ChatRequest) {
				want := map[string]any{"temperature": 0.2, "top_p": 0.9, "seed": 42.0, "num_predict": 64.0,
					"stop": []any{"END"}, "presence_penalty": 0.5, "frequency_penalty": -0.5}
				if !reflect.DeepEqual(got.Options, want) {
					t.Errorf("options = %v, want %v", got.Options, want)
				}
			},
		},
		{
			name: "max_tokens and a stop list",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":9,"stop":["a","b"]}`,
			check: func(t *testing.T, got api.ChatRequest) {
				want := map[string]any{"num_predict": 9.0, "stop": []any{"a", "b"}}
				if !reflect.DeepEqual(got.Options, want) {
					t.Errorf("options = %v, want %v", got.Options, want)
				}
			},
		},
		{
			name: "json_object format",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`,
			check: func(t *testing.T, got api.ChatRequest) {
				if string(got.Format) != `"json"` {
					t.Errorf("format = %s", got.Format)
				}
			},
		},
		{
			name: "json_schema format is the schema",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema",
				"json_schema":{"name":"city","strict":true,"schema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}}}`,
			check: func(t *testing.T, got api.ChatRequest) {
				if !jsonEqual(t, string(got.Format), `{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`) {
					t.Errorf("format = %s", got.Format)
				}
			},
		},
		{
			name: "tools",
			body: `{"model":"m","messages":[{"role":"user","content":"weather?"}],"tools":[
				{"type":"function","function":{"name":"get_weather","description":"Weather now.","parameters":
					{"type":"object","properties":{"city":{"type":"string","description":"City"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"]}}},
				{"type":"function","function":{"name":"now"}}]}`,
			check: func(t *testing.T, got api.ChatRequest) {
				if len(got.Tools) != 2 {
					t.Fatalf("tools = %s", mustJSON(t, got.Tools))
				}
				w := got.Tools[0].Function
				if got.Tools[0].Type != "function" || w.Name != "get_weather" || w.Description != "Weather now." ||
					w.Parameters.Type != "object" || !reflect.DeepEqual(w.Parameters.Required, []string{"city"}) {
					t.Errorf("tool 0 = %s", mustJSON(t, got.Tools[0]))
				}
				if p, ok := w.Parameters.Properties.Get("unit"); !ok || len(p.Enum) != 2 || p.Type.String() != "string" {
					t.Errorf("unit property = %+v", p)
				}
				if n := got.Tools[1].Function; n.Name != "now" || n.Parameters.Type != "object" {
					t.Errorf("tool 1 = %s", mustJSON(t, got.Tools[1]))
				}
			},
		},
		{
			name: "tool_choice none drops the tools",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"none","tools":[{"type":"function","function":{"name":"f"}}]}`,
			check: func(t *testing.T, got api.ChatRequest) {
				if got.Tools != nil {
					t.Errorf("tools = %s", mustJSON(t, got.Tools))
				}
			},
		},
		{
			name: "assistant tool calls and tool results",
			body: `{"model":"m","messages":[
				{"role":"user","content":"Weather in Paris and Rome?"},
				{"role":"assistant","content":null,"tool_calls":[
					{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"unit\":\"c\"}"}},
					{"id":"call_b","type":"function","function":{"name":"get_time","arguments":""}}]},
				{"role":"tool","tool_call_id":"call_a","content":"18C"},
				{"role":"tool","tool_call_id":"call_b","name":"explicit_name","content":"noon"},
				{"role":"function","name":"legacy","content":"old"}]}`,
			check: func(t *testing.T, got api.ChatRequest) {
				a := got.Messages[1]
				if a.Role != "assistant" || a.Content != "" || len(a.ToolCalls) != 2 {
					t.Fatalf("assistant = %s", mustJSON(t, a))
				}
				tc := a.ToolCalls[0]
				if tc.ID != "call_a" || tc.Function.Name != "get_weather" || tc.Function.Index != 0 || tc.Function.Arguments.String() != `{"city":"Paris","unit":"c"}` {
					t.Errorf("tool call 0 = %s", mustJSON(t, tc))
				}
				if tc := a.ToolCalls[1]; tc.Function.Index != 1 || tc.Function.Arguments.String() != `{}` {
					t.Errorf("tool call 1 = %s", mustJSON(t, tc))
				}
				want := []api.Message{
					{Role: "tool", Content: "18C", ToolName: "get_weather", ToolCallID: "call_a"},
					{Role: "tool", Content: "noon", ToolName: "explicit_name", ToolCallID: "call_b"},
					{Role: "tool", Content: "old", ToolName: "legacy"},
				}
				if !reflect.DeepEqual(got.Messages[2:], want) {
					t.Errorf("tool results = %s", mustJSON(t, got.Messages[2:]))
				}
			},
		},
		{
			name: "reasoning_effort and logprobs",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"reasoning_effort":"high","logprobs":true,"top_logprobs":3}`,
			check: func(t *testing.T, got api.ChatRequest) {
				if got.Think == nil || got.Think.Value != "high" || !got.Logprobs || got.TopLogprobs != 3 {
					t.Errorf("think/logprobs = %s", mustJSON(t, got))
				}
			},
		},
		{
			name: "reasoning_effort none turns thinking off",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"reasoning_effort":"none"}`,
			check: func(t *testing.T, got api.ChatRequest) {
				if got.Think == nil || got.Think.Value != false {
					t.Errorf("think = %s", mustJSON(t, got.Think))
				}
			},
		},
	}
	for _, tc := range cases {
		for _, stream := range []bool{false, true} {
			name := tc.name
			if stream {
				name += "/stream"
			}
			t.Run(name, func(t *testing.T) {
				tc.check(t, sentToOllama(t, tc.body, stream))
			})
		}
	}
}

func TestOllamaInvalidRequests(t *testing.T) {
	cases := []struct {
		name      string
		body      string
		wantParam string
	}{
		{name: "http image url", wantParam: "messages[0].content[0].image_url",
			body: `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]}]}`},
		{name: "not base64", wantParam: "messages[0].content[0].image_url",
			body: `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,@@@"}}]}]}`},
		{name: "audio part", wantParam: "messages[0].content[0].type",
			body: `{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"","format":"wav"}}]}]}`},
		{name: "tool arguments not JSON", wantParam: "messages[0].tool_calls[0].function.arguments",
			body: `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{oops"}}]}]}`},
		{name: "n > 1", wantParam: "n", body: `{"model":"m","messages":[{"role":"user","content":"x"}],"n":2}`},
		{name: "bad reasoning_effort", wantParam: "reasoning_effort", body: `{"model":"m","messages":[{"role":"user","content":"x"}],"reasoning_effort":"max"}`},
		{name: "unknown response_format", wantParam: "response_format.type", body: `{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"grammar"}}`},
		{name: "content is a number", wantParam: "messages[0].content", body: `{"model":"m","messages":[{"role":"user","content":7}]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := fakes.NewOllama(t)
			b := newBackend(t, "ollama", f)
			var c cascade.ChatRequest
			_ = json.Unmarshal([]byte(tc.body), &c) // some bodies do not fit the parsed view; Raw is what counts
			ans, err := b.Chat(context.Background(), &cascade.Request{Chat: c, Raw: json.RawMessage(tc.body)}, nil)
			var up *cascade.UpstreamError
			if !errors.As(err, &up) || up.Status != http.StatusBadRequest || up.Type != "invalid_request_error" || up.Param != tc.wantParam {
				t.Fatalf("err = %v %+v, want a 400 on %s", err, up, tc.wantParam)
			}
			if ans != nil || f.Requests() != 0 {
				t.Errorf("answer %v, fake calls %d", ans, f.Requests())
			}
		})
	}
}

func TestToolCallRoundTrip(t *testing.T) {
	calls := []cascade.ToolCall{
		{ID: "call_1", Type: "function", Function: cascade.ToolCallFunction{Name: "get_weather", Arguments: `{"city":"Paris","unit":"c"}`}},
		{ID: "call_2", Type: "function", Function: cascade.ToolCallFunction{Name: "get_time", Arguments: `{"tz":"Europe/Paris"}`}},
	}
	body := `{"model":"m","messages":[{"role":"user","content":"Weather and time in Paris?"}],
		"tools":[{"type":"function","function":{"name":"get_weather"}},{"type":"function","function":{"name":"get_time"}}]}`
	for _, d := range dialects {
		for _, stream := range []bool{false, true} {
			name := d.typ
			if stream {
				name += "/stream"
			}
			t.Run(name, func(t *testing.T) {
				f := d.fake(t, fakes.Config{ToolCalls: calls})
				b := newBackend(t, d.typ, f)
				var c collector
				var sink cascade.Sink
				if stream {
					sink = c.sink
				}
				ans, err := b.Chat(context.Background(), chatRequest(t, body), sink)
				if err != nil {
					t.Fatal(err)
				}
				ch := ans.Choices[0]
				if ch.FinishReason != "tool_calls" || !ans.Complete {
					t.Errorf("finish = %q complete = %v", ch.FinishReason, ans.Complete)
				}
				if ch.Message.Content != nil && *ch.Message.Content != "" {
					t.Errorf("content = %q beside tool calls", *ch.Message.Content)
				}
				got := ch.Message.ToolCalls
				if len(got) != len(calls) {
					t.Fatalf("tool calls = %s", mustJSON(t, got))
				}
				for i, want := range calls {
					g := got[i]
					if g.ID != want.ID || g.Type != "function" || g.Function.Name != want.Function.Name || !jsonEqual(t, g.Function.Arguments, want.Function.Arguments) {
						t.Errorf("tool call %d = %s, want %s", i, mustJSON(t, g), mustJSON(t, want))
					}
				}
				if stream {
					seen := map[int]bool{}
					for _, ch := range c.chunks {
						for _, cc := range ch.Choices {
							for _, tc := range cc.Delta.ToolCalls {
								if tc.Index == nil {
									t.Fatalf("stream tool call without index: %s", mustJSON(t, ch))
								}
								seen[*tc.Index] = true
							}
						}
					}
					if !seen[0] || !seen[1] {
						t.Errorf("indexes seen: %v", seen)
					}
				}

				// Send the calls and their results back: the upstream gets them in its own shape.
				msgs := []map[string]any{
					{"role": "user", "content": "Weather and time in Paris?"},
					{"role": "assistant", "content": nil, "tool_calls": got},
					{"role": "tool", "tool_call_id": got[0].ID, "content": "18C"},
					{"role": "tool", "tool_call_id": got[1].ID, "content": "noon"},
				}
				next := mustJSON(t, map[string]any{"model": "m", "messages": msgs})
				if _, err := b.Chat(context.Background(), chatRequest(t, next), nil); err != nil {
					t.Fatal(err)
				}
				if d.typ != "ollama" {
					if !strings.Contains(string(f.LastBody()), `"tool_call_id":"call_1"`) {
						t.Errorf("forwarded body lost the tool results: %s", f.LastBody())
					}
					return
				}
				var sent api.ChatRequest
				if err := json.Unmarshal(f.LastBody(), &sent); err != nil {
					t.Fatal(err)
				}
				a := sent.Messages[1]
				if len(a.ToolCalls) != 2 || a.ToolCalls[0].Function.Arguments.String() != `{"city":"Paris","unit":"c"}` {
					t.Errorf("assistant sent back as %s", mustJSON(t, a))
				}
				if r := sent.Messages[2]; r.Role != "tool" || r.ToolName != "get_weather" || r.ToolCallID != "call_1" || r.Content != "18C" {
					t.Errorf("tool result sent as %s", mustJSON(t, r))
				}
			})
		}
	}
}

func TestOllamaFinishReasons(t *testing.T) {
	cases := []struct {
		name, doneReason, want string
	}{
		{"stop", "stop", "stop"},
		{"length", "length", "length"},
		{"empty is stop", "", "stop"},
	}
	for _, tc := range cases {
		for _, stream := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{true: "/stream"}[stream], func(t *testing.T) {
				f := fakes.NewOllama(t, fakes.Config{FinishReason: tc.doneReason})
				b := newBackend(t, "ollama", f)
				var sink cascade.Sink
				if stream {
					sink = (&collector{}).sink
				}
				ans, err := b.Chat(context.Background(), chatRequest(t, helloBody), sink)
				if err != nil {
					t.Fatal(err)
				}
				if got := ans.Choices[0].FinishReason; got != tc.want || !ans.Complete {
					t.Errorf("finish = %q complete = %v, want %q", got, ans.Complete, tc.want)
				}
			})
		}
	}
}

// Responses the fake does not produce: thinking, logprobs, tool calls without ids, errors.
func TestOllamaConv(t *testing.T) {
	args := api.NewToolCallFunctionArguments()
	args.Set("q", "go")
	lp := []api.Logprob{{TokenLogprob: api.TokenLogprob{Token: "Hi", Logprob: -0.5}}}
	c := &ollamaConv{backend: "o", id: "chatcmpl-x", model: "m"}
	steps := []ollamaLine{
		{Model: "m", Message: ollamaMessage{Thinking: "hmm"}},
		{Model: "m", Message: ollamaMessage{Content: "Hi"}, Logprobs: lp},
		{Model: "m", Message: ollamaMessage{ToolCalls: []api.ToolCall{{Function: api.ToolCallFunction{Name: "search", Arguments: args}}}}},
		{Model: "m", Done: true, DoneReason: "stop", Metrics: api.Metrics{PromptEvalCount: 3, EvalCount: 5}},
	}
	var chunks []*cascade.Chunk
	for i := range steps {
		d, u := c.chunks(&steps[i])
		for _, ch := range []*cascade.Chunk{d, u} {
			if ch != nil {
				c.asm.Add(ch)
				chunks = append(chunks, ch)
			}
		}
	}
	if len(chunks) != 5 {
		t.Fatalf("chunks = %s", mustJSON(t, chunks))
	}
	if d := chunks[0].Choices[0].Delta; d.Role != "assistant" || d.ReasoningContent != "hmm" || d.Content != nil {
		t.Errorf("first delta = %s", mustJSON(t, d))
	}
	if chunks[1].Choices[0].Delta.Role != "" || !jsonEqual(t, string(chunks[1].Choices[0].Logprobs), `{"content":[{"token":"Hi","logprob":-0.5}]}`) {
		t.Errorf("second chunk = %s", mustJSON(t, chunks[1]))
	}
	tc := chunks[2].Choices[0].Delta.ToolCalls[0]
	if !strings.HasPrefix(tc.ID, "call_") || len(tc.ID) != len("call_")+24 || tc.Function.Arguments != `{"q":"go"}` || *tc.Index != 0 {
		t.Errorf("tool call = %s", mustJSON(t, tc))
	}
	if fr := chunks[3].Choices[0].FinishReason; fr == nil || *fr != "tool_calls" {
		t.Errorf("finish chunk = %s", mustJSON(t, chunks[3]))
	}
	if u := chunks[4]; len(u.Choices) != 0 || *u.Usage != (cascade.Usage{PromptTokens: 3, CompletionTokens: 5, TotalTokens: 8}) {
		t.Errorf("usage chunk = %s", mustJSON(t, u))
	}
	ans := c.final(true)
	if !ans.Complete || ans.Text() != "Hi" || ans.Choices[0].Message.ReasoningContent != "hmm" || ans.Timings.PredictedN != 5 {
		t.Errorf("final = %s %+v", mustJSON(t, ans), ans.Timings)
	}
}

func TestOllamaErrorLineMidStream(t *testing.T) {
	srv := serve(t, "application/x-ndjson",
		`{"model":"m","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"Hel"},"done":false}`+"\n"+
			`{"error":"an error was encountered while running the model: out of memory"}`+"\n")
	b, _ := New(Options{Name: "o", Type: "ollama", URL: srv.URL})
	var c collector
	ans, err := b.Chat(context.Background(), chatRequest(t, helloBody), c.sink)
	var up *cascade.UpstreamError
	if !errors.As(err, &up) || !strings.Contains(up.Message, "out of memory") || up.Status != http.StatusBadGateway {
		t.Fatalf("err = %v", err)
	}
	if ans == nil || ans.Complete || ans.Text() != "Hel" {
		t.Errorf("partial answer = %+v", ans)
	}
}

func b64(b []byte) string { return base64Std(b) }

// TestOllamaLineMatchesChatResponse: ollamaLine decodes every field the conversion reads as
// api.ChatResponse does, so the answers and chunks made from either are the same.
func TestOllamaLineMatchesChatResponse(t *testing.T) {
	for _, line := range []string{
		benchOllamaAnswer,
		`{"model":"m","created_at":"2024-05-06T07:08:09.123456789+02:00","message":{"role":"ASSISTANT","content":"","thinking":"let me see","tool_calls":[{"id":"call_1","function":{"index":0,"name":"search","arguments":{"q":"go","n":3,"deep":{"a":[1,2.5,"x"]}}}},{"function":{"index":1,"name":"noargs","arguments":{}}}]},"done":true,"done_reason":"stop","prompt_eval_count":7,"eval_count":2}`,
		`{"model":"m","created_at":"2024-01-01T00:00:00Z","message":{"role":"assistant","content":"Hi \u003cthere\u003e \ud83d\ude00","images":["aGk="]},"logprobs":[{"token":"Hi","logprob":-0.25,"bytes":[72,105],"top_logprobs":[{"token":"Hi","logprob":-0.25},{"token":"Hey","logprob":-1.5}]}],"done":false}`,
		`{"model":"m","message":{"content":"x"},"done":true,"done_reason":"length","total_duration":5,"load_duration":1,"prompt_eval_duration":2,"eval_duration":3,"remote_model":"r","_debug_info":{"rendered_template":"t"}}`,
		`{"error":"model \"m\" not found"}`,
		`{}`,
	} {
		var lean ollamaLine
		var full struct {
			api.ChatResponse
			Error string `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &lean); err != nil {
			t.Fatalf("ollamaLine %s: %v", line, err)
		}
		if err := json.Unmarshal([]byte(line), &full); err != nil {
			t.Fatalf("api.ChatResponse %s: %v", line, err)
		}
		r := &full.ChatResponse
		want := ollamaLine{Model: r.Model, CreatedAt: r.CreatedAt, Done: r.Done, DoneReason: r.DoneReason, Logprobs: r.Logprobs, Metrics: r.Metrics, Error: full.Error,
			Message: ollamaMessage{Content: r.Message.Content, Thinking: r.Message.Thinking, ToolCalls: r.Message.ToolCalls}}
		if got, w := mustJSON(t, lean), mustJSON(t, want); got != w || !lean.CreatedAt.Equal(want.CreatedAt) {
			t.Errorf("%s\nollamaLine       %s\napi.ChatResponse %s", line, got, w)
		}
		if !reflect.DeepEqual(lean.Metrics, want.Metrics) || !reflect.DeepEqual(lean.Logprobs, want.Logprobs) {
			t.Errorf("%s: metrics or logprobs differ: %+v %+v", line, lean, want)
		}
	}
}
