package proxy

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// decodeSeeds are request bodies of every shape the handlers take, good and bad.
var decodeSeeds = []string{
	`{"model":"m","messages":[{"role":"system","content":"You are brief."},{"role":"user","content":"hi"}],"max_tokens":64}`,
	`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}],"n":3,"stop":["x"]}`,
	`{"model":"m","messages":[{"role":"user","content":null}],"temperature":0.5,"top_p":1,"seed":7,"user":"u"}`,
	`{"model":"m","messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f"}}}`,
	`{"Model":"m","MESSAGES":[{"Role":"user","Content":"case"}]}`,
	`{"model":"m","model":"n","messages":[]}`,
	`{"model":"m\ud800","messages":[{"role":"user","content":"\u00e9\n\"q\""}]}`,
	"{\"model\":\"\xff\",\"messages\":[]}",
	`{"model":1}`, `{"messages":{}}`, `{"messages":[{"role":7}]}`, `{"max_tokens":"9"}`, `{"max_tokens":1e400}`,
	`{"model":"m"} trailing`, `{"model":"m",}`, `{}`, `[]`, `null`, ``, `{"model":`, "\xff", `{"model":"m"}{"model":"n"}`,
	`{"model":"e","input":["a","b"],"encoding_format":"float","dimensions":8}`, `{"model":"e","input":[[1,2],[3]]}`,
}

// TestUnmarshalKeepsEncodingJSONErrors: a refusal names the field as encoding/json's error does.
func TestUnmarshalKeepsEncodingJSONErrors(t *testing.T) {
	for body, want := range map[string]string{
		`{"model":1}`:                    "model: expected string, got number",
		`{"model":"m","max_tokens":"9"}`: "max_tokens: expected int, got string",
		`{"model":`:                      "malformed JSON at byte 9: unexpected end of JSON input",
	} {
		var req cascade.ChatRequest
		e := unmarshal([]byte(body), &req)
		if e == nil || e.Message != want {
			t.Errorf("%s: got %v, want %q", body, e, want)
		}
	}
}

// BenchmarkDecodeRequest compares encoding/json with unmarshal on a chat request.
func BenchmarkDecodeRequest(b *testing.B) {
	body := []byte(decodeSeeds[0])
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req cascade.ChatRequest
			if err := json.Unmarshal(body, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var req cascade.ChatRequest
			if e := unmarshal(body, &req); e != nil {
				b.Fatal(e)
			}
		}
	})
}

// FuzzUnmarshal holds unmarshal equal to encoding/json: the same bodies accepted, the same value
// decoded, and a refusal in encoding/json's words.
func FuzzUnmarshal(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}],"think":false}`,
		`{"model":"m","messages":[{"role":"user","content":"a"}],"think":"high","reasoning_effort":"low","response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"object"}}}}`,
		`{"model":"m","messages":[{"role":"user","content":"a"}],"seed":1.5}`,
		`{"model":"m","messages":[{"role":"user","content":"a"}],"n":-0,"temperature":-1e-400,"unknown":{"x":[1,{}]}}`,
		`{"model":"m","messages":null,"stop":null,"tools":null}`,
		` {"model":"m"} `, `{"model":"m"}  x`, `{"model":"\u0000"}`, `{"model":"a\/b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		sameDecode(t, body, func() any { return new(cascade.ChatRequest) })
		sameDecode(t, body, func() any { return new(embeddingsRequest) })
		sameDecode(t, body, func() any { return new(thinkFields) })
		sameChatBody(t, body)
	})
}

// sameChatBody holds decodeChat's one pass equal to decoding body into a ChatRequest and into
// thinkFields apart, as encoding/json does.
func sameChatBody(t *testing.T, body []byte) {
	t.Helper()
	var want cascade.ChatRequest
	var wantThink thinkFields
	werr := json.Unmarshal(body, &want)
	_ = json.Unmarshal(body, &wantThink)
	var msgs [decodedMessages]cascade.Message
	got := chatBody{ChatRequest: &cascade.ChatRequest{Messages: msgs[:0]}}
	gerr := unmarshalChat(body, &got)
	if want.Messages == nil && len(got.Messages) == 0 {
		got.Messages = nil // the entry's empty backing, for a body without messages: validate refuses it
	}
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("chatBody on %q: err %v, encoding/json err %v", body, gerr, werr)
	} else if gerr == nil && (!reflect.DeepEqual(*got.ChatRequest, want) || !reflect.DeepEqual(got.thinkFields, wantThink)) {
		t.Fatalf("chatBody on %q = %+v %+v, encoding/json %+v %+v", body, *got.ChatRequest, got.thinkFields, want, wantThink)
	}
}

// sameDecode decodes body into fresh values with jsonv1, with unmarshal and with encoding/json:
// all three accept or refuse it together and decode the same value.
func sameDecode(t *testing.T, body []byte, fresh func() any) {
	t.Helper()
	want := fresh()
	werr := json.Unmarshal(body, want)
	fast := fresh()
	if ferr := jsonv1.Unmarshal(body, fast); (ferr == nil) != (werr == nil) {
		t.Fatalf("%T: jsonv1 on %q: err %v, encoding/json err %v", fast, body, ferr, werr)
	} else if ferr == nil && !reflect.DeepEqual(fast, want) {
		t.Fatalf("%T: jsonv1 on %q = %+v, encoding/json %+v", fast, body, fast, want)
	}
	got := fresh()
	if gerr := unmarshal(body, got); (gerr == nil) != (werr == nil) {
		t.Fatalf("%T: unmarshal(%q) err %v, encoding/json err %v", got, body, gerr, werr)
	} else if gerr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%T: unmarshal(%q) = %+v, encoding/json %+v", got, body, got, want)
	}
}

// TestChatRawValuesAreTheBodys: a decoded chat body's raw values (a message's content, stop) are
// the body's own bytes, not copies, each ending its capacity, so that an append cannot write
// into the body.
func TestChatRawValuesAreTheBodys(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi there"}],"stop":["x"]}`)
	b := chatBody{ChatRequest: new(cascade.ChatRequest)}
	if err := unmarshalChat(body, &b); err != nil {
		t.Fatal(err)
	}
	for _, v := range []struct {
		raw  json.RawMessage
		want string
	}{{b.Messages[0].Content, `"hi there"`}, {b.Stop, `["x"]`}} {
		at := bytes.Index(body, []byte(v.want))
		if string(v.raw) != v.want || &v.raw[0] != &body[at] || cap(v.raw) != len(v.raw) {
			t.Errorf("raw value %q (cap %d): want %q in place in the body", v.raw, cap(v.raw), v.want)
		}
	}
}
