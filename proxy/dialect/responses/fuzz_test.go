package responses

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// FuzzDecode: any body is decoded or refused with a 4xx *dialect.Error, never a panic; what is
// accepted has a chat request that is JSON and holds a message, and renders whole and streamed.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","input":"hi"}`,
		echoBody,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"x"}]}`,
		`{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"n","schema":{}}},"stream":true}`,
		`{"model":"m","input":"x","tools":[{"type":"web_search"}]}`,
		`{"model":"m","input":"x","previous_response_id":"resp_1"}`,
		`{"model":"m","input":[[[[[]]]]]}`,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"u"}]}]}`,
		`{"model":"m","input":null,"instructions":"x"}`,
		`{"model":"m","metadata":{"a":"b"},"input":"x","tool_choice":{"type":"function","name":"f"}}`,
		`[]`, `null`, `"x"`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	d := New(Options{})
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, body []byte) {
		x, e := d.Decode(ctx, "t", body)
		if e != nil {
			if e.Status < 400 || e.Status >= 500 || e.Message == "" {
				t.Fatalf("refusal %+v", e)
			}
			if !json.Valid(d.Error(e)) {
				t.Fatalf("error body %s", d.Error(e))
			}
			return
		}
		var c cascade.ChatRequest
		if err := json.Unmarshal(x.RawChat(), &c); err != nil || len(c.Messages) == 0 || c.Model == "" {
			t.Fatalf("chat request %s: %v", x.RawChat(), err)
		}
		if _, err := x.Whole(answer("ok", "stop")); err != nil {
			t.Fatal(err)
		}
		emit := func(dialect.Event) error { return nil }
		if err := x.Encoder().Chunk(textChunks()[1], emit); err != nil {
			t.Fatal(err)
		}
		if err := x.Encoder().End(answer("ok", "stop"), dialect.Figures{}, emit); err != nil {
			t.Fatal(err)
		}
		if err := x.Done(ctx, answer("ok", "stop")); err != nil {
			t.Fatal(err)
		}
	})
}
