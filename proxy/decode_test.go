package proxy

import (
	"encoding/json"
	"testing"

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
