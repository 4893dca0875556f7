package proxy

import (
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

// FuzzDecodeAgreesWithEncodingJSON checks that the request decoder (go-json-experiment/json's
// v1 package) accepts exactly what encoding/json accepts and decodes it to the same values, for
// both request types the proxy decodes.
func FuzzDecodeAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		agree[cascade.ChatRequest](t, body)
		agree[embeddingsRequest](t, body)
	})
}

func agree[T any](t *testing.T, body []byte) {
	t.Helper()
	var std, fast T
	stdErr := json.Unmarshal(body, &std)
	fastErr := jsonv1.Unmarshal(body, &fast)
	if (stdErr == nil) != (fastErr == nil) {
		t.Fatalf("%T from %q: encoding/json says %v, jsonv1 says %v", std, body, stdErr, fastErr)
	}
	if stdErr == nil && !reflect.DeepEqual(std, fast) {
		t.Fatalf("%T from %q:\nencoding/json %+v\njsonv1        %+v", std, body, std, fast)
	}
	// unmarshal itself: the same value, or the same refusal as encoding/json's.
	var got T
	if e := unmarshal(body, &got); (e == nil) != (stdErr == nil) {
		t.Fatalf("%T from %q: unmarshal says %v, encoding/json %v", std, body, e, stdErr)
	}
	if stdErr == nil && !reflect.DeepEqual(std, got) {
		t.Fatalf("%T from %q: unmarshal %+v, encoding/json %+v", std, body, got, std)
	}
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
