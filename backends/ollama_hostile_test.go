package backends

import (
	"errors"
	"testing"
)

// Values Ollama cannot be given are refused as the client's error (400), naming the field,
// rather than dropped or passed on.
func TestOllamaRefusesInvalidValues(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"a"}]`
	for _, tc := range []struct{ name, body, param string }{
		{"negative top_logprobs", `{"model":"m",` + msgs + `,"logprobs":true,"top_logprobs":-1}`, "top_logprobs"},
		{"top_logprobs too large", `{"model":"m",` + msgs + `,"logprobs":true,"top_logprobs":21}`, "top_logprobs"},
		{"think maybe", `{"model":"m",` + msgs + `,"think":"maybe"}`, "think"},
		{"think number", `{"model":"m",` + msgs + `,"think":1}`, "think"},
		{"schema a string", `{"model":"m",` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":"object"}}}`, "response_format.json_schema.schema"},
		{"schema an array", `{"model":"m",` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":[1]}}}`, "response_format.json_schema.schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := toOllama(chatRequest(t, tc.body))
			var ir *invalidRequest
			if !errors.As(err, &ir) || ir.param != tc.param {
				t.Fatalf("err = %v, want an invalid %s", err, tc.param)
			}
		})
	}
	for _, tc := range []struct {
		name, body string
		think      any
	}{
		{"think true", `{"model":"m",` + msgs + `,"think":true}`, true},
		{"think high", `{"model":"m",` + msgs + `,"think":"high"}`, "high"},
		{"reasoning_effort wins", `{"model":"m",` + msgs + `,"think":true,"reasoning_effort":"none"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := toOllama(chatRequest(t, tc.body))
			if err != nil || out.Think == nil || out.Think.Value != tc.think {
				t.Fatalf("think %+v, err %v; want %v", out, err, tc.think)
			}
		})
	}
	out, err := toOllama(chatRequest(t, `{"model":"m",`+msgs+`,"top_logprobs":3,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}}}`))
	if err != nil || out.TopLogprobs != 3 || string(out.Format) != `{"type":"object"}` {
		t.Fatalf("valid values: %+v, %v", out, err)
	}
}
