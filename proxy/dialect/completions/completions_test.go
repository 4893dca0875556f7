package completions

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
		name, body, want string
		stream           bool
	}{
		{"a string prompt, max_tokens 16 by default", `{"model":"m","prompt":"Say this is a test"}`,
			`{"model":"m","messages":[{"role":"user","content":"Say this is a test"}],"max_tokens":16}`, false},
		{"a list of one string", `{"model":"m","prompt":["once"],"max_tokens":3}`,
			`{"model":"m","messages":[{"role":"user","content":"once"}],"max_tokens":3}`, false},
		{"every sampling field", `{"model":"m","prompt":"p","max_tokens":8,"temperature":0.2,"top_p":0.5,"stop":["\n","."],"n":1,"best_of":1,` +
			`"presence_penalty":0.1,"frequency_penalty":-0.1,"seed":7,"user":"u","echo":false,"suffix":null,"logprobs":null,"logit_bias":{}}`,
			`{"model":"m","messages":[{"role":"user","content":"p"}],"temperature":0.2,"top_p":0.5,"max_tokens":8,"stop":["\n","."],"seed":7,` +
				`"presence_penalty":0.1,"frequency_penalty":-0.1,"user":"u"}`, false},
		{"stop as a string", `{"model":"m","prompt":"p","stop":"END"}`,
			`{"model":"m","messages":[{"role":"user","content":"p"}],"max_tokens":16,"stop":["END"]}`, false},
		{"stream asks the backend for usage", `{"model":"m","prompt":"p","stream":true}`,
			`{"model":"m","messages":[{"role":"user","content":"p"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":16}`, true},
		{"stream_options with stream", `{"model":"m","prompt":"p","stream":true,"stream_options":{"include_usage":true}}`,
			`{"model":"m","messages":[{"role":"user","content":"p"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":16}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := decodeOK(t, tc.body)
			if got := string(x.RawChat()); got != tc.want {
				t.Errorf("RawChat\n got: %s\nwant: %s", got, tc.want)
			}
			if x.Stream() != tc.stream {
				t.Errorf("Stream() = %v", x.Stream())
			}
		})
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, body, param, code string
	}{
		{"not JSON", `{"model"`, "", ""},
		{"not an object", `"x"`, "", ""},
		{"model missing", `{"prompt":"p"}`, "model", ""},
		{"prompt missing", `{"model":"m"}`, "prompt", ""},
		{"prompt null", `{"model":"m","prompt":null}`, "prompt", ""},
		{"prompt a number", `{"model":"m","prompt":5}`, "prompt", ""},
		{"an empty list", `{"model":"m","prompt":[]}`, "prompt", ""},
		{"several prompts", `{"model":"m","prompt":["a","b"]}`, "prompt", ""},
		{"a token array", `{"model":"m","prompt":[1,2,3]}`, "prompt", ""},
		{"token arrays", `{"model":"m","prompt":[[1,2],[3]]}`, "prompt", ""},
		{"a list holding an object", `{"model":"m","prompt":[{}]}`, "prompt", ""},
		{"suffix", `{"model":"m","prompt":"p","suffix":"end"}`, "suffix", ""},
		{"echo", `{"model":"m","prompt":"p","echo":true}`, "echo", ""},
		{"logprobs", `{"model":"m","prompt":"p","logprobs":0}`, "logprobs", ""},
		{"logit_bias", `{"model":"m","prompt":"p","logit_bias":{"50256":-100}}`, "logit_bias", ""},
		{"n above 1", `{"model":"m","prompt":"p","n":2}`, "n", ""},
		{"best_of above 1", `{"model":"m","prompt":"p","best_of":3}`, "best_of", ""},
		{"max_tokens zero", `{"model":"m","prompt":"p","max_tokens":0}`, "max_tokens", ""},
		{"max_tokens a string", `{"model":"m","prompt":"p","max_tokens":"8"}`, "max_tokens", ""},
		{"temperature above 2", `{"model":"m","prompt":"p","temperature":2.5}`, "temperature", ""},
		{"top_p above 1", `{"model":"m","prompt":"p","top_p":1.5}`, "top_p", ""},
		{"presence_penalty out of range", `{"model":"m","prompt":"p","presence_penalty":3}`, "presence_penalty", ""},
		{"frequency_penalty out of range", `{"model":"m","prompt":"p","frequency_penalty":-3}`, "frequency_penalty", ""},
		{"stop a number", `{"model":"m","prompt":"p","stop":1}`, "stop", ""},
		{"stop holding a number", `{"model":"m","prompt":"p","stop":["a",1]}`, "stop", ""},
		{"too many stop sequences", `{"model":"m","prompt":"p","stop":[` + strings.Repeat(`"x",`, maxStop) + `"x"]}`, "stop", "array_above_max_length"},
		{"stream_options without stream", `{"model":"m","prompt":"p","stream_options":{"include_usage":true}}`, "stream_options", ""},
		{"an unknown field", `{"model":"m","prompt":"p","response_format":{"type":"json_object"}}`, "response_format", ""},
		{"an unknown member of stream_options", `{"model":"m","prompt":"p","stream":true,"stream_options":{"x":1}}`, "stream_options.x", ""},
		{"a field sent twice", `{"model":"m","prompt":"p","prompt":"q"}`, "prompt", ""},
		{"nested too deep", `{"model":"m","prompt":"p","logit_bias":` + strings.Repeat(`{"a":`, maxDepth) + `1` + strings.Repeat(`}`, maxDepth) + `}`, "", "nesting_too_deep"},
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

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"model":"m","prompt":"p","stop":["a"],"stream":true,"stream_options":{"include_usage":true},"max_tokens":4}`))
	f.Add([]byte(`{"model":"m","prompt":["p"],"logit_bias":{},"suffix":""}`))
	f.Add([]byte(`{"model":"m","prompt":[[1,2]]}`))
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
		if c.Model == "" || len(c.Messages) != 1 || c.MaxTokens == nil || *c.MaxTokens < 1 {
			t.Fatalf("accepted an incomplete call: %s", x.RawChat())
		}
		var back cascade.ChatRequest
		if err := json.Unmarshal(x.RawChat(), &back); err != nil {
			t.Fatalf("RawChat is not a chat request: %v", err)
		}
	})
}

func TestError(t *testing.T) {
	golden(t, "error_param.json", New().Error(&dialect.Error{Status: 400, Type: "invalid_request_error", Param: "suffix", Message: "suffix: not supported"}))
	golden(t, "error_budget.json", New().Error(&dialect.Error{Status: 429, Type: "insufficient_quota", Code: "joule_budget_exceeded", Message: "joule budget exceeded"}))
}

func text(s string) *string { return &s }

func answer() *cascade.Answer {
	return &cascade.Answer{ID: "chatcmpl-abc", Model: "m:latest", Created: 1700000000,
		Choices: []cascade.Choice{{Message: cascade.AnswerMessage{Role: "assistant", Content: text("This is a test.")}, FinishReason: "stop"}},
		Usage:   &cascade.Usage{PromptTokens: 5, CompletionTokens: 5, TotalTokens: 10}, Complete: true}
}

func TestWhole(t *testing.T) {
	x := decodeOK(t, `{"model":"m","prompt":"Say this is a test"}`)
	for _, tc := range []struct {
		name string
		ans  *cascade.Answer
	}{
		{"text", answer()},
		{"length", func() *cascade.Answer { a := answer(); a.Choices[0].FinishReason = "length"; return a }()},
		{"no usage", func() *cascade.Answer { a := answer(); a.Usage = nil; return a }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := x.Whole(tc.ans)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "whole_"+strings.ReplaceAll(tc.name, " ", "_")+".json", b)
		})
	}
}

func events(t *testing.T, x dialect.Exchange, chunks []*cascade.Chunk, ans *cascade.Answer) []byte {
	t.Helper()
	var b bytes.Buffer
	emit := func(ev dialect.Event) error {
		if ev.Name != "" {
			t.Errorf("a named event %q", ev.Name)
		}
		if string(ev.Data) != "[DONE]" && !json.Valid(ev.Data) {
			t.Errorf("data not JSON: %s", ev.Data)
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
		Stage: "neural", Receipt: "abcdef0123456789"}
	if err := en.End(ans, fig, emit); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func chunk(content *string, finish string) *cascade.Chunk {
	c := &cascade.Chunk{ID: "chatcmpl-abc", Object: "chat.completion.chunk", Created: 1700000000, Model: "m:latest",
		Choices: []cascade.ChunkChoice{{Delta: cascade.Delta{Content: content}}}}
	if finish != "" {
		c.Choices[0].FinishReason = &finish
	}
	return c
}

func TestStream(t *testing.T) {
	usage := &cascade.Chunk{ID: "chatcmpl-abc", Created: 1700000000, Model: "m:latest", Choices: []cascade.ChunkChoice{},
		Usage: &cascade.Usage{PromptTokens: 5, CompletionTokens: 2, TotalTokens: 7}}
	chunks := []*cascade.Chunk{
		{ID: "chatcmpl-abc", Created: 1700000000, Model: "m:latest", Choices: []cascade.ChunkChoice{{Delta: cascade.Delta{Role: "assistant", Content: text("")}}}},
		chunk(text("This"), ""), chunk(text(" is"), ""), chunk(nil, "stop"), usage,
	}
	for _, tc := range []struct {
		name, body string
		ans        *cascade.Answer
		chunks     []*cascade.Chunk
	}{
		{"an answer with no chunks", `{"model":"m","prompt":"p","stream":true,"stream_options":{"include_usage":true}}`, answer(), []*cascade.Chunk{}},
		{"plain", `{"model":"m","prompt":"p","stream":true}`, answer(), nil},
		{"with usage", `{"model":"m","prompt":"p","stream":true,"stream_options":{"include_usage":true}}`, answer(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := chunks
			if tc.chunks != nil {
				cs = tc.chunks
			}
			golden(t, "stream_"+strings.ReplaceAll(tc.name, " ", "_")+".txt", events(t, decodeOK(t, tc.body), cs, tc.ans))
		})
	}
}
