package responses

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it under -update.
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
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it)\n got %s\nwant %s", name, got, want)
	}
}

func indent(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	out.WriteByte('\n')
	return out.Bytes()
}

const echoBody = `{"model":"m","instructions":"be brief","input":"hi","max_output_tokens":64,"temperature":0.2,"top_p":0.9,
	"tools":[{"type":"function","name":"weather","description":"the weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}],
	"tool_choice":"auto","parallel_tool_calls":true,"metadata":{"k":"v"},"user":"u","store":true}`

func TestWhole(t *testing.T) {
	call := cascade.ToolCall{ID: "call_x", Type: "function", Function: cascade.ToolCallFunction{Name: "weather", Arguments: `{"city":"Paris"}`}}
	for _, tc := range []struct {
		name, body string
		ans        *cascade.Answer
	}{
		{"whole_text.json", echoBody, answer("Hello there.", "stop")},
		{"whole_tool.json", `{"model":"m","input":"weather in Paris?","tools":[{"type":"function","name":"weather","strict":false}],"tool_choice":{"type":"function","name":"weather"}}`, answer("", "tool_calls", call)},
		{"whole_length.json", `{"model":"m","input":"count","max_output_tokens":3,"text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"}}}}`, answer("1 2 3", "length")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := decode(t, testDialect(nil), tc.body)
			b, err := x.Whole(tc.ans)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, indent(t, b))
		})
	}
}

// sseText is a stream's events as they go on the wire.
func sseText(evs []dialect.Event) []byte {
	var b bytes.Buffer
	for _, e := range evs {
		b.WriteString("event: " + e.Name + "\ndata: ")
		b.Write(e.Data)
		b.WriteString("\n\n")
	}
	return b.Bytes()
}

func str(s string) *string { return &s }
func idx(i int) *int       { return &i }

func textChunks() []*cascade.Chunk {
	mk := func(d *string, finish *string) *cascade.Chunk {
		return &cascade.Chunk{ID: "c", Object: "chat.completion.chunk", Model: "m",
			Choices: []cascade.ChunkChoice{{Delta: cascade.Delta{Content: d}, FinishReason: finish}}}
	}
	return []*cascade.Chunk{
		{Model: "m", Choices: []cascade.ChunkChoice{{Delta: cascade.Delta{Role: "assistant", Content: str("")}}}},
		mk(str("Hello"), nil), mk(str(" there."), nil), mk(nil, str("stop")),
		{Model: "m", Choices: []cascade.ChunkChoice{}, Usage: &cascade.Usage{PromptTokens: 7, CompletionTokens: 3, TotalTokens: 10}},
	}
}

func reasoningChunks() []*cascade.Chunk {
	think := func(d string) *cascade.Chunk {
		return &cascade.Chunk{Model: "m", Choices: []cascade.ChunkChoice{{Delta: cascade.Delta{ReasoningContent: d}}}}
	}
	text := textChunks()
	return append([]*cascade.Chunk{think("The user greets; "), think("greet back.")}, text[1:]...)
}

func toolChunks() []*cascade.Chunk {
	tc := func(i int, id, name, args string) *cascade.Chunk {
		return &cascade.Chunk{Model: "m", Choices: []cascade.ChunkChoice{{Delta: cascade.Delta{ToolCalls: []cascade.ToolCall{
			{Index: idx(i), ID: id, Type: "function", Function: cascade.ToolCallFunction{Name: name, Arguments: args}}}}}}}
	}
	return []*cascade.Chunk{
		tc(0, "call_x", "weather", ""), tc(0, "", "", `{"city":`), tc(1, "call_y", "weather", `{"city":"Oslo"}`), tc(0, "", "", `"Paris"}`),
		{Model: "m", Choices: []cascade.ChunkChoice{{FinishReason: str("tool_calls")}}},
	}
}

var testFigures = dialect.Figures{View: energy.View{Joules: 1.5, JoulesLow: 1, JoulesHigh: 2, Grade: "estimated", Method: "m", Coverage: "whole"},
	Stage: "neural", Receipt: "abc123", State: "settled"}

// stream runs chunks through x's encoder and returns the events.
func stream(t *testing.T, x *exchange, chunks []*cascade.Chunk, ans *cascade.Answer) []dialect.Event {
	t.Helper()
	var evs []dialect.Event
	emit := func(e dialect.Event) error { evs = append(evs, e); return nil }
	enc := x.Encoder()
	for _, ch := range chunks {
		if err := enc.Chunk(ch, emit); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.End(ans, testFigures, emit); err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		var head struct {
			Type string `json:"type"`
			Seq  *int   `json:"sequence_number"`
		}
		if err := json.Unmarshal(e.Data, &head); err != nil || head.Type != e.Name || head.Seq == nil || *head.Seq != i {
			t.Errorf("event %d %s: type %q sequence %v (%v)", i, e.Name, head.Type, head.Seq, err)
		}
	}
	return evs
}

func TestStream(t *testing.T) {
	call := func(id, args string) cascade.ToolCall {
		return cascade.ToolCall{ID: id, Type: "function", Function: cascade.ToolCallFunction{Name: "weather", Arguments: args}}
	}
	for _, tc := range []struct {
		name, body string
		chunks     []*cascade.Chunk
		ans        *cascade.Answer // as the walk recorded it
	}{
		{"stream_text.sse", `{"model":"m","input":"hi","stream":true}`, textChunks(), answer("Hello there.", "stop")},
		{"stream_tool.sse", `{"model":"m","input":"weather?","stream":true,"tools":[{"type":"function","name":"weather"}]}`, toolChunks(),
			answer("", "tool_calls", call("call_x", `{"city":"Paris"}`), call("call_y", `{"city":"Oslo"}`))},
		{"stream_empty.sse", `{"model":"m","input":"hi","stream":true}`, nil, &cascade.Answer{Model: "m", Choices: []cascade.Choice{{FinishReason: "length"}}}},
		{"stream_reasoning.sse", `{"model":"m","input":"hi","stream":true,"reasoning":{"effort":"low"}}`, reasoningChunks(), reasoned("The user greets; greet back.", "Hello there.")},
		{"stream_reasoning_only.sse", `{"model":"m","input":"hi","stream":true}`, reasoningChunks()[:2], reasoned("The user greets; greet back.", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := testDialect(nil)
			x := decode(t, d, tc.body)
			evs := stream(t, x, tc.chunks, tc.ans)
			golden(t, tc.name, sseText(evs))

			// The last event's response is what a whole answer would have been, plus the figures.
			var last struct {
				Response json.RawMessage `json:"response"`
			}
			_ = json.Unmarshal(evs[len(evs)-1].Data, &last)
			var fromStream map[string]any
			_ = json.Unmarshal(last.Response, &fromStream)
			if eoc, _ := fromStream["eoc"].(map[string]any); eoc == nil || eoc["joules"] != 1.5 || eoc["receipt"] != "abc123" {
				t.Errorf("the last event's eoc: %v", fromStream["eoc"])
			}
			delete(fromStream, "eoc")
			x2 := decode(t, testDialect(nil), tc.body)
			w, _ := x2.Whole(tc.ans)
			var whole map[string]any
			_ = json.Unmarshal(w, &whole)
			g, _ := json.Marshal(fromStream)
			ww, _ := json.Marshal(whole)
			if !bytes.Equal(g, ww) {
				t.Errorf("stream's response differs from the whole one\nstream %s\nwhole  %s", g, ww)
			}

			// End stored what the client got, without the figures, before the last event.
			got, e := d.Retrieve(context.Background(), "t1", x.ID())
			if e != nil {
				t.Fatal(e)
			}
			if !bytes.Equal(got, w) {
				t.Errorf("stored %s\nwant %s", got, w)
			}
			if err := x.Done(context.Background(), tc.ans); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSDKReadsStream feeds the golden streams (and two whole answers) to openai-node's own stream helper
// (ResponseStream, behind client.responses.stream and finalResponse()), the version e2e/node
// pins: it throws on an event it does not know or one out of place. It needs node and
// `npm ci --prefix e2e/node` (or EOC_E2E_NODE_MODULES), and skips without them.
func TestSDKReadsStream(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH")
	}
	modules := os.Getenv("EOC_E2E_NODE_MODULES")
	if modules == "" {
		modules, _ = filepath.Abs(filepath.Join("..", "..", "..", "e2e", "node", "node_modules"))
	}
	if _, err := os.Stat(filepath.Join(modules, "openai", "lib", "responses", "ResponseStream.js")); err != nil {
		t.Skip("no openai SDK in e2e/node/node_modules (npm ci --prefix e2e/node)")
	}
	for _, tc := range []struct {
		file, text, status string
		outputs            int
	}{
		{"stream_text.sse", "Hello there.", "completed", 1},
		{"stream_tool.sse", "", "completed", 2},
		{"stream_empty.sse", "", "incomplete", 1},
		{"stream_reasoning.sse", "Hello there.", "completed", 2},
		{"stream_reasoning_only.sse", "", "completed", 2},
		{"whole_text.json", "Hello there.", "completed", 1},
		{"whole_tool.json", "", "completed", 1},
	} {
		t.Run(tc.file, func(t *testing.T) {
			out, err := exec.Command(node, filepath.Join("testdata", "sdkstream.cjs"), filepath.Join("testdata", tc.file), modules).CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var got struct {
				Final struct {
					OutputText string           `json:"output_text"`
					Status     string           `json:"status"`
					Output     []map[string]any `json:"output"`
					Usage      *usage           `json:"usage"`
					EOC        *dialect.Figures `json:"eoc"`
				} `json:"final"`
				Deltas []string `json:"deltas"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			f := got.Final
			if f.OutputText != tc.text || f.Status != tc.status || len(f.Output) != tc.outputs || f.Usage == nil && tc.file != "stream_empty.sse" {
				t.Errorf("finalResponse() %s", out)
			}
			if strings.HasSuffix(tc.file, ".sse") && (f.EOC == nil || f.EOC.Receipt != testFigures.Receipt) {
				t.Errorf("finalResponse().eoc %+v", f.EOC)
			}
			if tc.text != "" && strings.HasSuffix(tc.file, ".sse") && (len(got.Deltas) == 0 || got.Deltas[len(got.Deltas)-1] != tc.text) {
				t.Errorf("delta snapshots %q", got.Deltas)
			}
		})
	}
}

// reasoned is a whole answer with reasoning and text.
func reasoned(reasoning, text string) *cascade.Answer {
	a := answer(text, "stop")
	a.Choices[0].Message.ReasoningContent = reasoning
	return a
}
