package jsonx

import (
	"encoding/json"
	"testing"
)

type sample struct {
	A string          `json:"a"`
	B []int           `json:"b,omitempty"`
	C json.RawMessage `json:"c"`
	D *float64        `json:"d"`
}

// TestUnmarshalKeepsEncodingJSONErrors: a refusal is encoding/json's, word for word.
func TestUnmarshalKeepsEncodingJSONErrors(t *testing.T) {
	for _, in := range []string{`{"a":1}`, `{"b":"x"}`, `{"a":`, `[]`, `{"a":"x"} y`} {
		var s sample
		got := Unmarshal([]byte(in), &s)
		want := json.Unmarshal([]byte(in), new(sample))
		if got == nil || want == nil || got.Error() != want.Error() {
			t.Errorf("%s: got %v, want %v", in, got, want)
		}
	}
}

// TestUnmarshalDecodes: accepted input decodes as encoding/json decodes it, from the zero value.
func TestUnmarshalDecodes(t *testing.T) {
	for _, in := range []string{`{"a":"x","b":[1,2],"c":{"k":[true]},"d":1.5}`, `{"A":"case","B":[3]}`, `{"a":"x","a":"y"}`, "{\"a\":\"\xff\"}", `{}`, `null`} {
		if err := Agrees[sample]([]byte(in)); err != nil {
			t.Error(err)
		}
	}
}

func FuzzAgrees(f *testing.F) {
	for _, s := range []string{`{"a":"x","b":[1,2],"c":{"k":[true]},"d":1.5}`, `{"A":"x"}`, `{"a":"\ud800"}`, `{"d":1e400}`, `{"b":[1,"x"]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := Agrees[sample](data); err != nil {
			t.Fatal(err)
		}
	})
}
