package backends

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

func TestSetStream(t *testing.T) {
	cases := []struct {
		name   string
		in     string
		stream bool
		want   string // "" means in, unchanged
		same   bool   // the very same slice comes back
	}{
		{name: "whole, no stream key", in: `{"model":"m"}`, same: true},
		{name: "whole, stream false", in: ` { "model" : "m" , "stream" : false } `, same: true},
		{name: "whole, stream true", in: `{"model":"m","stream":true}`, want: `{"model":"m","stream":false}`},
		{name: "whole, stream_options dropped", in: `{"stream_options":{"include_usage":true},"model":"m"}`, want: `{"model":"m","stream":false}`},
		{name: "stream added", in: `{"model":"m"}`, stream: true, want: `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{name: "empty object", in: `{}`, stream: true, want: `{"stream":true,"stream_options":{"include_usage":true}}`},
		{name: "empty object whole", in: ` {} `, same: true},
		{name: "already right", in: `{"stream":true,"stream_options":{"include_usage":true}}`, stream: true, same: true},
		{name: "include_usage false", in: `{"stream":true,"stream_options":{"include_usage":false,"x":[1]}}`, stream: true,
			want: `{"stream":true,"stream_options":{"include_usage":true,"x":[1]}}`},
		{name: "stream_options null", in: `{"stream":true,"stream_options":null}`, stream: true,
			want: `{"stream":true,"stream_options":{"include_usage":true}}`},
		{name: "duplicates removed", in: `{"stream":false,"a":1,"stream":true,"stream":true}`, stream: true,
			want: `{"a":1,"stream":true,"stream_options":{"include_usage":true}}`},
		{name: "escaped key", in: `{"str\u0065am":false,"a":"stream"}`, stream: true,
			want: `{"a":"stream","stream":true,"stream_options":{"include_usage":true}}`},
		{name: "tricky strings and nesting", in: `{"m":[{"c":"}\"]{"},{"stream":false}],"s":"\\","n":-1.5e3,"t":true,"z":null}`, stream: true,
			want: `{"m":[{"c":"}\"]{"},{"stream":false}],"n":-1.5e3,"s":"\\","stream":true,"stream_options":{"include_usage":true},"t":true,"z":null}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := setStream([]byte(tc.in), tc.stream)
			if err != nil {
				t.Fatal(err)
			}
			if tc.same {
				if string(got) != tc.in {
					t.Errorf("got %s, want the input back", got)
				}
				return
			}
			if string(got) != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
	for _, bad := range []string{``, ` `, `[]`, `"x"`, `null`, `{`, `{"a"}`, `{"a":1,}`, `{"a":1} x`, `{"a":"x`, `{"a":[1,2}`, `{"a":}`, ` {"a":1}}`} {
		for _, stream := range []bool{false, true} {
			if _, err := setStream([]byte(bad), stream); err == nil {
				t.Errorf("setStream(%q, %v): no error", bad, stream)
			}
		}
	}
}

// Without a rewrite, the body is passed on without a copy.
func TestSetStreamNoCopy(t *testing.T) {
	in := []byte(`{"model":"m","stream":false}`)
	out, _ := setStream(in, false)
	if &out[0] != &in[0] {
		t.Error("body copied")
	}
}

func FuzzSetStream(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"stream":true,"stream_options":{"include_usage":false,"other":1}}`,
		`{"str\u0065am":1,"stream_options":[],"x":{"stream":true}}`,
		` {"a" : "\"}" , "b":[{},[]] ,"stream_options":{"a":1},"stream_options":{"b":2}} `,
		`{}`, `[]`, `{"a":1e999}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, stream := range []bool{false, true} {
			out, err := setStream(in, stream)
			var orig map[string]any
			if !json.Valid(in) || json.Unmarshal(in, &orig) != nil || bytes.TrimSpace(in)[0] != '{' {
				continue // unspecified, but must not panic
			}
			if err != nil {
				t.Fatalf("setStream(%q, %v): %v", in, stream, err)
			}
			var got map[string]any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("setStream(%q, %v) = %q: not JSON: %v", in, stream, out, err)
			}
			if orig == nil {
				orig = map[string]any{}
			}
			want := map[string]any{}
			for k, v := range orig {
				want[k] = v
			}
			delete(want, "stream_options")
			want["stream"] = stream
			_, hadStream := orig["stream"]
			_, hadOpts := orig["stream_options"]
			if stream {
				opts, _ := orig["stream_options"].(map[string]any)
				if opts == nil {
					opts = map[string]any{}
				}
				opts["include_usage"] = true
				want["stream_options"] = opts
			} else if !hadStream && !hadOpts {
				if !bytes.Equal(in, out) {
					t.Errorf("body rewritten without need: %q -> %q", in, out)
				}
				delete(want, "stream")
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("setStream(%q, %v) = %q\ngot  %v\nwant %v", in, stream, out, got, want)
			}
		}
	})
}

// BenchmarkSetStream is the rewrite of a chat body for a call without a stream (the body passes
// unchanged) and with one (stream and stream_options added).
func BenchmarkSetStream(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"You are a helpful assistant. Be brief."},{"role":"user","content":"Please explain in two sentences how bakufi glumedo stotri vizo relates to gluba fikute sobra."}],"max_tokens":32}`)
	for _, stream := range []bool{false, true} {
		b.Run(fmt.Sprintf("stream=%v", stream), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := setStream(body, stream); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
