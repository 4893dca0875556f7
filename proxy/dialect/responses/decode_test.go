package responses

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

var epoch = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

// testDialect returns a dialect with a fixed clock and ids id1, id2, … in order.
func testDialect(store Store) *Dialect {
	n := 0
	return New(Options{Store: store, Now: func() time.Time { return epoch }, NewID: func() string { n++; return fmt.Sprintf("id%d", n) }})
}

func decode(t *testing.T, d *Dialect, body string) *exchange {
	t.Helper()
	x, e := d.Decode(context.Background(), "t1", []byte(body))
	if e != nil {
		t.Fatalf("Decode(%s): %d %s (param %q)", body, e.Status, e.Message, e.Param)
	}
	return x.(*exchange)
}

func TestDecodeFields(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       string // the chat request's JSON
	}{
		{"string input", `{"model":"m","input":"hi"}`,
			`{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"instructions first", `{"model":"m","instructions":"be brief","input":"hi"}`,
			`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`},
		{"message items with parts", `{"model":"m","input":[{"role":"developer","content":"d"},{"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},{"role":"assistant","content":[{"type":"output_text","text":"c","annotations":[]}],"id":"msg_1","status":"completed"}]}`,
			`{"model":"m","messages":[{"role":"developer","content":"d"},{"role":"user","content":"a\nb"},{"role":"assistant","content":"c"}]}`},
		{"image part", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"what"},{"type":"input_image","image_url":"data:image/png;base64,AA","detail":"low"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA","detail":"low"}}]}]}`},
		{"function call round trip", `{"model":"m","input":[{"role":"user","content":"weather?"},{"type":"function_call","call_id":"c1","name":"w","arguments":"{}"},{"type":"function_call","call_id":"c2","name":"w","arguments":"{\"a\":1}"},{"type":"function_call_output","call_id":"c1","output":"sunny"},{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"rain"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":"weather?"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"w","arguments":"{\"a\":1}"}}]},{"role":"tool","content":"sunny","tool_call_id":"c1"},{"role":"tool","content":"rain","tool_call_id":"c2"}]}`},
		{"tools and a function tool_choice", `{"model":"m","input":"x","tools":[{"type":"function","name":"w","description":"d","parameters":{"type":"object"},"strict":true}],"tool_choice":{"type":"function","name":"w"},"parallel_tool_calls":false}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"w","description":"d","parameters":{"type":"object"},"strict":true}}],"tool_choice":{"function":{"name":"w"},"type":"function"},"parallel_tool_calls":false}`},
		{"tool_choice string", `{"model":"m","input":"x","tool_choice":"required"}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`},
		{"sampling and limits", `{"model":"m","input":"x","max_output_tokens":16,"temperature":0.5,"top_p":0.9,"user":"u"}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":0.5,"top_p":0.9,"max_tokens":16,"user":"u"}`},
		{"json_schema", `{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"},"strict":true}}}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object"},"strict":true}}}`},
		{"json_object", `{"model":"m","input":"x","text":{"format":{"type":"json_object"}}}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`},
		{"text format text", `{"model":"m","input":"x","text":{"format":{"type":"text"},"verbosity":"medium"}}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}]}`},
		{"stream asks for usage", `{"model":"m","input":"x","stream":true,"stream_options":{"include_obfuscation":false}}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}`},
		{"reasoning effort", `{"model":"m","input":"x","reasoning":{"effort":"low","summary":"auto"}}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"reasoning_effort":"low"}`},
		{"harmless fields", `{"model":"m","input":"x","metadata":{"k":"v"},"store":false,"truncation":"auto","background":false,"service_tier":"auto","safety_identifier":"s","prompt_cache_key":"p","prompt_cache_retention":"24h","include":["reasoning.encrypted_content"],"top_logprobs":0,"conversation":null,"prompt":null,"context_management":[]}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}]}`},
		{"reasoning items sent back are left out", `{"model":"m","input":[{"role":"user","content":"q"},{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"hmm"}]},{"role":"assistant","content":"a"},{"role":"user","content":"q2"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"user","content":"q2"}]}`},
		{"names match case-insensitively", `{"Model":"m","INPUT":"x"}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := decode(t, testDialect(nil), tc.body)
			var got, want any
			_ = json.Unmarshal(x.RawChat(), &got)
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(want)
			if string(g) != string(w) {
				t.Errorf("chat request\n got %s\nwant %s", g, w)
			}
			// Chat is what RawChat says.
			var back cascade.ChatRequest
			if err := json.Unmarshal(x.RawChat(), &back); err != nil {
				t.Fatal(err)
			}
			b1, _ := json.Marshal(&back)
			b2, _ := json.Marshal(x.Chat())
			if string(b1) != string(b2) {
				t.Errorf("Chat() %s differs from RawChat() %s", b2, b1)
			}
		})
	}
}

func TestDecodeRefusals(t *testing.T) {
	tools := make([]string, maxTools+1)
	for i := range tools {
		tools[i] = `{"type":"function","name":"f"}`
	}
	items := strings.Repeat(`"x",`, maxItems) + `"x"`
	for _, tc := range []struct {
		name, body, param string
		status            int
	}{
		{"not JSON", `{"model":`, "", 400},
		{"not an object", `[1]`, "", 400},
		{"empty", ``, "", 400},
		{"no model", `{"input":"x"}`, "model", 400},
		{"no input", `{"model":"m"}`, "input", 400},
		{"empty input list", `{"model":"m","input":[]}`, "input", 400},
		{"input a number", `{"model":"m","input":3}`, "input", 400},
		{"model a number", `{"model":3,"input":"x"}`, "model", 400},
		{"item not an object", `{"model":"m","input":["x"]}`, "input[0]", 400},
		{"item without type or role", `{"model":"m","input":[{"content":"x"}]}`, "input[0].type", 400},
		{"bad role", `{"model":"m","input":[{"role":"tool","content":"x"}]}`, "input[0].role", 400},
		{"no content", `{"model":"m","input":[{"role":"user"}]}`, "input[0].content", 400},
		{"content a number", `{"model":"m","input":[{"role":"user","content":1}]}`, "input[0].content", 400},
		{"part without text", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text"}]}]}`, "input[0].content[0].text", 400},
		{"file part", `{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]}`, "input[0].content[0].type", 400},
		{"image by file_id", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"f"}]}]}`, "input[0].content[0].image_url", 400},
		{"item_reference", `{"model":"m","input":[{"type":"item_reference","id":"x"}]}`, "input[0].type", 400},
		{"function_call without call_id", `{"model":"m","input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, "input[0].call_id", 400},
		{"function_call without name", `{"model":"m","input":[{"type":"function_call","call_id":"c","arguments":"{}"}]}`, "input[0].name", 400},
		{"function_call without arguments", `{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f"}]}`, "input[0].arguments", 400},
		{"output without call_id", `{"model":"m","input":[{"type":"function_call_output","output":"x"}]}`, "input[0].call_id", 400},
		{"output missing", `{"model":"m","input":[{"type":"function_call_output","call_id":"c"}]}`, "input[0].output", 400},
		{"output image", `{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","image_url":"u"}]}]}`, "input[0].output[0]", 400},
		{"web_search tool", `{"model":"m","input":"x","tools":[{"type":"web_search"}]}`, "tools[0].type", 400},
		{"file_search tool", `{"model":"m","input":"x","tools":[{"type":"file_search","vector_store_ids":["v"]}]}`, "tools[0].type", 400},
		{"computer tool", `{"model":"m","input":"x","tools":[{"type":"computer_use_preview"}]}`, "tools[0].type", 400},
		{"function tool without name", `{"model":"m","input":"x","tools":[{"type":"function"}]}`, "tools[0].name", 400},
		{"tool not an object", `{"model":"m","input":"x","tools":[1]}`, "tools[0]", 400},
		{"parameters not an object", `{"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":[]}]}`, "tools[0].parameters", 400},
		{"too many tools", `{"model":"m","input":"x","tools":[` + strings.Join(tools, ",") + `]}`, "tools", 400},
		{"tool_choice bad string", `{"model":"m","input":"x","tool_choice":"any"}`, "tool_choice", 400},
		{"tool_choice built-in", `{"model":"m","input":"x","tool_choice":{"type":"web_search_preview"}}`, "tool_choice.type", 400},
		{"tool_choice allowed_tools", `{"model":"m","input":"x","tool_choice":{"type":"allowed_tools","mode":"auto","tools":[]}}`, "tool_choice.type", 400},
		{"tool_choice no name", `{"model":"m","input":"x","tool_choice":{"type":"function"}}`, "tool_choice.name", 400},
		{"temperature", `{"model":"m","input":"x","temperature":3}`, "temperature", 400},
		{"top_p", `{"model":"m","input":"x","top_p":-1}`, "top_p", 400},
		{"max_output_tokens", `{"model":"m","input":"x","max_output_tokens":0}`, "max_output_tokens", 400},
		{"max_output_tokens a string", `{"model":"m","input":"x","max_output_tokens":"9"}`, "max_output_tokens", 400},
		{"truncation", `{"model":"m","input":"x","truncation":"middle"}`, "truncation", 400},
		{"text format unknown", `{"model":"m","input":"x","text":{"format":{"type":"yaml"}}}`, "text.format.type", 400},
		{"json_schema without name", `{"model":"m","input":"x","text":{"format":{"type":"json_schema","schema":{}}}}`, "text.format.name", 400},
		{"json_schema without schema", `{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"n"}}}`, "text.format.schema", 400},
		{"verbosity", `{"model":"m","input":"x","text":{"verbosity":"low"}}`, "text.verbosity", 400},
		{"reasoning effort", `{"model":"m","input":"x","reasoning":{"effort":"max"}}`, "reasoning.effort", 400},
		{"background", `{"model":"m","input":"x","background":true}`, "background", 400},
		{"background in capitals", `{"model":"m","input":"x","BACKGROUND":true}`, "background", 400},
		{"conversation", `{"model":"m","input":"x","conversation":"conv_1"}`, "conversation", 400},
		{"prompt", `{"model":"m","input":"x","prompt":{"id":"p"}}`, "prompt", 400},
		{"include file search results", `{"model":"m","input":"x","include":["file_search_call.results"]}`, "include[0]", 400},
		{"include logprobs", `{"model":"m","input":"x","include":["message.output_text.logprobs"]}`, "include[0]", 400},
		{"top_logprobs", `{"model":"m","input":"x","top_logprobs":5}`, "top_logprobs", 400},
		{"max_tool_calls", `{"model":"m","input":"x","max_tool_calls":2}`, "max_tool_calls", 400},
		{"moderation", `{"model":"m","input":"x","moderation":{"model":"x"}}`, "moderation", 400},
		{"context_management", `{"model":"m","input":"x","context_management":[{"type":"compaction"}]}`, "context_management", 400},
		{"stream_options without stream", `{"model":"m","input":"x","stream_options":{}}`, "stream_options", 400},
		{"unknown field", `{"model":"m","input":"x","frequency_penalty":1}`, "frequency_penalty", 400},
		{"metadata value too long", `{"model":"m","input":"x","metadata":{"k":"` + strings.Repeat("v", 513) + `"}}`, "metadata", 400},
		{"metadata too many keys", `{"model":"m","input":"x","metadata":{` + metadataKeys(17) + `}}`, "metadata", 400},
		{"too many items", `{"model":"m","input":[` + items + `]}`, "input", 400},
		{"too many parts", `{"model":"m","input":[{"role":"user","content":[` + strings.Repeat(`{"type":"input_text","text":""},`, maxParts) + `{"type":"input_text","text":""}]}]}`, "input[0].content", 400},
		{"too deep", `{"model":"m","input":"x","metadata":` + strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1) + `}`, "", 400},
		{"unknown previous response", `{"model":"m","input":"x","previous_response_id":"resp_nope"}`, "previous_response_id", 404},
		{"malformed previous response", `{"model":"m","input":"x","previous_response_id":"../etc"}`, "previous_response_id", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := testDialect(nil)
			x, e := d.Decode(context.Background(), "t1", []byte(tc.body))
			if e == nil {
				t.Fatalf("accepted, chat %s", x.RawChat())
			}
			if e.Status != tc.status || e.Param != tc.param {
				t.Errorf("got %d param %q (%s), want %d param %q", e.Status, e.Param, e.Message, tc.status, tc.param)
			}
			var b errorBody
			if err := json.Unmarshal(d.Error(e), &b); err != nil || b.Error.Message == "" || b.Error.Type == "" {
				t.Errorf("error body %s: %v", d.Error(e), err)
			}
		})
	}
}

func metadataKeys(n int) string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	return strings.Join(keys, ",")
}

func TestErrorShape(t *testing.T) {
	d := testDialect(nil)
	got := string(d.Error(&dialect.Error{Status: 429, Type: "rate_limit_error", Code: "budget_exceeded", Message: "no joules left"}))
	want := `{"error":{"message":"no joules left","type":"rate_limit_error","param":null,"code":"budget_exceeded"}}`
	if got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
	got = string(d.Error(&dialect.Error{Status: 400, Param: "input", Message: "m"}))
	want = `{"error":{"message":"m","type":"invalid_request_error","param":"input","code":null}}`
	if got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
}

// A continuation's chat request is the whole conversation: the stored turns, then the new
// input; the new instructions come first and the old ones are not inherited.
func TestContinuation(t *testing.T) {
	d := testDialect(nil)
	ctx := context.Background()
	x1 := decode(t, d, `{"model":"m","instructions":"old","input":"what is 2+2?","tools":[{"type":"function","name":"calc"}]}`)
	if _, err := x1.Whole(answer("", "tool_calls", cascade.ToolCall{ID: "call_a", Type: "function", Function: cascade.ToolCallFunction{Name: "calc", Arguments: `{"e":"2+2"}`}})); err != nil {
		t.Fatal(err)
	}
	if err := x1.Done(ctx, nil); err != nil {
		t.Fatal(err)
	}
	x2 := decode(t, d, `{"model":"m","instructions":"new","previous_response_id":"`+x1.ID()+`","input":[{"type":"function_call_output","call_id":"call_a","output":"4"}]}`)
	want := `[{"role":"system","content":"new"},{"role":"user","content":"what is 2+2?"},{"role":"assistant","tool_calls":[{"id":"call_a","type":"function","function":{"name":"calc","arguments":"{\"e\":\"2+2\"}"}}]},{"role":"tool","content":"4","tool_call_id":"call_a"}]`
	if got, _ := json.Marshal(x2.Chat().Messages); string(got) != want {
		t.Errorf("messages\n got %s\nwant %s", got, want)
	}
	if _, err := x2.Whole(answer("It is 4.", "stop")); err != nil {
		t.Fatal(err)
	}
	if err := x2.Done(ctx, nil); err != nil {
		t.Fatal(err)
	}
	x3 := decode(t, d, `{"model":"m","previous_response_id":"`+x2.ID()+`","input":"and 3+3?"}`)
	if n := len(x3.Chat().Messages); n != 5 || x3.Chat().Messages[3].Text() != "It is 4." || x3.Chat().Messages[0].Role != "user" {
		got, _ := json.Marshal(x3.Chat().Messages)
		t.Errorf("third turn's messages: %s", got)
	}
	// The same continuation from another tenant finds nothing.
	if _, e := d.Decode(ctx, "t2", []byte(`{"model":"m","previous_response_id":"`+x2.ID()+`","input":"x"}`)); e == nil || e.Status != 404 {
		t.Errorf("another tenant's previous_response_id: %v", e)
	}
	// store:false keeps nothing.
	x4 := decode(t, d, `{"model":"m","input":"x","store":false}`)
	if _, err := x4.Whole(answer("y", "stop")); err != nil {
		t.Fatal(err)
	}
	if err := x4.Done(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, e := d.Retrieve(ctx, "t1", x4.ID()); e == nil || e.Status != 404 {
		t.Errorf("a response with store false was kept: %v", e)
	}
}

func TestRetrieveDelete(t *testing.T) {
	d := testDialect(nil)
	ctx := context.Background()
	x := decode(t, d, `{"model":"m","input":"hi","metadata":{"a":"b"}}`)
	whole, err := x.Whole(answer("hello", "stop"))
	if err != nil {
		t.Fatal(err)
	}
	// Stored before the body goes out: a client may continue at once.
	if _, e := d.Retrieve(ctx, "t1", x.ID()); e != nil {
		t.Fatalf("not stored by Whole: %v", e)
	}
	if err := x.Done(ctx, answer("hello", "stop")); err != nil {
		t.Fatal(err)
	}
	got, e := d.Retrieve(ctx, "t1", x.ID())
	if e != nil || string(got) != string(whole) {
		t.Fatalf("Retrieve: %v\n got %s\nwant %s", e, got, whole)
	}
	for _, tenant := range []string{"t2", ""} {
		if _, e := d.Retrieve(ctx, tenant, x.ID()); e == nil || e.Status != 404 {
			t.Errorf("tenant %q retrieved another's response: %v", tenant, e)
		}
		if _, e := d.Delete(ctx, tenant, x.ID()); e == nil || e.Status != 404 {
			t.Errorf("tenant %q deleted another's response: %v", tenant, e)
		}
	}
	del, e := d.Delete(ctx, "t1", x.ID())
	if e != nil || string(del) != `{"id":"`+x.ID()+`","object":"response","deleted":true}` {
		t.Fatalf("Delete: %v %s", e, del)
	}
	if _, e := d.Retrieve(ctx, "t1", x.ID()); e == nil || e.Status != 404 {
		t.Errorf("retrieved after delete: %v", e)
	}
	if _, e := d.Delete(ctx, "t1", x.ID()); e == nil || e.Status != 404 {
		t.Errorf("deleted twice: %v", e)
	}
	b := d.Error(notFound("", x.ID()))
	if want := `{"error":{"message":"Response with id '` + x.ID() + `' not found.","type":"invalid_request_error","param":null,"code":null}}`; string(b) != want {
		t.Errorf("404 body %s", b)
	}
}

// failing is a store that cannot answer.
type failing struct{}

func (failing) Get(context.Context, string, string) ([]byte, bool, error) {
	return nil, false, fmt.Errorf("down")
}
func (failing) Put(context.Context, string, string, []byte) error { return fmt.Errorf("down") }
func (failing) Delete(context.Context, string, string) (bool, error) {
	return false, fmt.Errorf("down")
}

// A stored value this version did not write is as good as absent.
func TestForeignRecord(t *testing.T) {
	m := NewMemory(MemoryOptions{})
	d := testDialect(m)
	ctx := context.Background()
	for _, val := range []string{`not json`, `{"v":2,"response":{}}`, `{"v":1}`, `[]`} {
		mustPut(t, m, "t1", "resp_x", val)
		if _, e := d.Retrieve(ctx, "t1", "resp_x"); e == nil || e.Status != 404 {
			t.Errorf("retrieve of %s: %v", val, e)
		}
		if _, e := d.Decode(ctx, "t1", []byte(`{"model":"m","input":"x","previous_response_id":"resp_x"}`)); e == nil || e.Status != 404 || e.Param != "previous_response_id" {
			t.Errorf("continuation of %s: %v", val, e)
		}
	}
}

func TestStoreDown(t *testing.T) {
	d := testDialect(failing{})
	ctx := context.Background()
	if _, e := d.Decode(ctx, "t", []byte(`{"model":"m","input":"x","previous_response_id":"resp_a"}`)); e == nil || e.Status != 503 {
		t.Errorf("continuation with the store down: %v", e)
	}
	if _, e := d.Retrieve(ctx, "t", "resp_a"); e == nil || e.Status != 503 {
		t.Errorf("retrieve with the store down: %v", e)
	}
	if _, e := d.Delete(ctx, "t", "resp_a"); e == nil || e.Status != 503 {
		t.Errorf("delete with the store down: %v", e)
	}
	x := decode(t, d, `{"model":"m","input":"x"}`)
	if err := x.Done(ctx, answer("y", "stop")); err == nil {
		t.Error("Done with the store down: no error")
	}
}

// answer is a whole answer with text (none when "") and tool calls.
func answer(text, finish string, calls ...cascade.ToolCall) *cascade.Answer {
	m := cascade.AnswerMessage{Role: "assistant", ToolCalls: calls}
	if text != "" || len(calls) == 0 {
		m.Content = &text
	}
	return &cascade.Answer{ID: "chatcmpl-1", Model: "m", Created: epoch.Unix(),
		Choices: []cascade.Choice{{Message: m, FinishReason: finish}},
		Usage:   &cascade.Usage{PromptTokens: 7, CompletionTokens: 3, TotalTokens: 10}}
}

// errorBody is OpenAI's error object as a client reads it.
type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}
