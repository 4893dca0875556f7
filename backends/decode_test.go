package backends

import (
	"encoding/json"
	"reflect"
	"testing"
)

// decodeLine decodes as encoding/json does: the same line, or an error for both.
func FuzzDecodeLine(f *testing.F) {
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
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got, want ollamaLine
		gerr, werr := decodeLine(data, &got), json.Unmarshal(data, &want)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("decodeLine(%q) err %v, encoding/json err %v", data, gerr, werr)
		}
		if gerr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeLine(%q) = %+v, encoding/json %+v", data, got, want)
		}
	})
}
