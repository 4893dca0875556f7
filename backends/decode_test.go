package backends

import (
	"encoding/json"
	"reflect"
	"testing"
)

// decodeAnswer decodes as encoding/json does, into each shape it is used for: the same value,
// or an error for both.
func FuzzDecodeAnswer(f *testing.F) {
	for _, s := range []string{
		benchOllamaAnswer,
		`{"model":"m","message":{"content":"a\u00e9\n","thinking":"t","tool_calls":[{"function":{"name":"f","arguments":{"a":[1,2.5,"x"]}}}]},"done":false}`,
		`{"error":"model not found"}`,
		`{"MODEL":"m","Done":true,"done":false}`,
		"{\"model\":\"\xff\"}",
		`{"created_at":"not a time"}`,
		`{"eval_count":1.5}`,
		`{"logprobs":[{"token":"a","logprob":-0.5,"bytes":[97],"top_logprobs":[{"token":"b","logprob":-1}]}]}`,
		`{"done":true} trailing`,
		`[1]`,
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":" hi","tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},"logprobs": {"content": []},"finish_reason":null}],"usage":null}`,
		`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok","refusal":null},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4},"timings":{"prompt_n":3,"predicted_n":1,"prompt_ms":1.5,"predicted_ms":2}}`,
		`{"error":{"message":"bad","type":"server_error"}}`,
		`{"choices":[{"index":-1,"delta":{}}],"created":1e3}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		same(t, data, func() any { return new(ollamaLine) })
		same(t, data, func() any { return new(wireAnswer) })
		same(t, data, func() any { return new(wireChunk) })
	})
}

func same(t *testing.T, data []byte, fresh func() any) {
	t.Helper()
	got, want := fresh(), fresh()
	gerr, werr := decodeAnswer(data, got), json.Unmarshal(data, want)
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("%T: decodeAnswer(%q) err %v, encoding/json err %v", got, data, gerr, werr)
	}
	if gerr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%T: decodeAnswer(%q) = %+v, encoding/json %+v", got, data, got, want)
	}
}
