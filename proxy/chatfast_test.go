package proxy

import (
	"reflect"
	"testing"

	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// sameCommon holds decodeChatCommon equal to jsonv1 on body: a body it takes, jsonv1 takes and
// decodes to the same request, whose stop validStop takes (validate skips it); a body it leaves,
// it leaves as it found it.
func sameCommon(t *testing.T, body []byte) bool {
	t.Helper()
	var msgs, wantMsgs [decodedMessages]cascade.Message
	got := chatBody{ChatRequest: &cascade.ChatRequest{Messages: msgs[:0]}}
	if !decodeChatCommon(body, &got) {
		if !reflect.DeepEqual(*got.ChatRequest, cascade.ChatRequest{Messages: msgs[:0]}) || !reflect.DeepEqual(got.thinkFields, thinkFields{}) ||
			!reflect.DeepEqual(msgs, [decodedMessages]cascade.Message{}) {
			t.Fatalf("decodeChatCommon left %q decoded in part: %+v %+v", body, *got.ChatRequest, got.thinkFields)
		}
		return false
	}
	if !validStop(got.Stop) {
		t.Fatalf("decodeChatCommon took %q, whose stop validStop refuses", body)
	}
	want := chatBody{ChatRequest: &cascade.ChatRequest{Messages: wantMsgs[:0]}}
	if err := jsonv1.Unmarshal(body, &want); err != nil {
		t.Fatalf("decodeChatCommon took %q, which jsonv1 refuses: %v", body, err)
	}
	if !reflect.DeepEqual(*got.ChatRequest, *want.ChatRequest) || !reflect.DeepEqual(got.thinkFields, want.thinkFields) {
		t.Fatalf("decodeChatCommon(%q) = %+v %+v, jsonv1 %+v %+v", body, *got.ChatRequest, got.thinkFields, *want.ChatRequest, want.thinkFields)
	}
	return true
}

// TestDecodeChatCommon: the bodies clients send take the short way, and decode as jsonv1
// decodes them; the others are left to jsonv1.
func TestDecodeChatCommon(t *testing.T) {
	for _, body := range []string{
		`{"model":"qwen3:0.6b","messages":[{"role":"system","content":"You are a helpful assistant. Be brief."},{"role":"user","content":"Please explain."}],"max_tokens":64}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"m","stream_options":{ "include_usage" : false },"stream":false}`, `{"model":"m","stream_options":{}}`,
		" {\n \"model\" : \"m\" ,\t\"messages\" : [ { \"role\" : \"user\" , \"content\" : \"a \\\"b\\\" \\u00e9 \\n ü\" } ] } \n",
		`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}`,
		`{"model":"m","messages":[{"role":"tool","content":"1","tool_call_id":"c1","name":"f"}],"temperature":0.7,"top_p":1,"n":2,"seed":-42}`,
		`{"model":"m","messages":[],"stop":["a","\n"],"user":"u","max_completion_tokens":9,"presence_penalty":-0.5e1,"frequency_penalty":0}`,
		`{"model":"m","messages":[{}],"stop":"x","think":"high","reasoning_effort":"low"}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"think":false,"stop":[]}`,
		`{}`,
	} {
		if !sameCommon(t, []byte(body)) {
			t.Errorf("%s: left to jsonv1", body)
		}
	}
	for _, body := range []string{
		`{"Model":"m"}`, `{"model":"m","model":"n"}`, `{"model":"m\u0041"}`, `{"model":"é"}`, `{"model":null}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":"a","content":"b"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"\ud83d\ude00"}]}`,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
		`{"model":"m","messages":[{"role":"user","content":null}]}`,
		`{"model":"m","tools":[]}`, `{"model":"m","max_tokens":1.0}`, `{"model":"m","max_tokens":1e400}`, `{"model":"m","temperature":1e400}`,
		`{"model":"m","max_tokens":12345678901}`, `{"model":"m","stream":1}`, `{"model":"m","think":{}}`, `{"model":"m","stop":[1]}`,
		`{"stream_options":{"include_usage":true,"include_usage":false}}`, `{"stream_options":{"Include_Usage":true}}`,
		`{"stream_options":{"include_usage":true,}}`, `{"stream_options":null}`, `{"stream_options":{"x":1}}`,
		`{"model":"m",}`, `{"model":"m"} x`, `{"model":"m"}{}`, `{"model":"m"`, `{"model":"m","messages":[{"role":"user"},]}`,
		`{"model":"m","stop":["a",]}`, `{"model":"m","messages":[{"role":"user","name":"a"},{"role":"user","name":"b"},{"role":"user","name":"c"}],"x":1}`, `[]`, `null`, ``, `{"model":01}`, `{"model":"m","n":-}`, `{"model":"m","messages":[{"role":"user","content":"a\x01"}]}`,
	} {
		if sameCommon(t, []byte(body)) {
			t.Errorf("%s: taken, not left to jsonv1", body)
		}
	}
}

// FuzzDecodeChatCommon holds decodeChatCommon equal to jsonv1 on what it takes.
func FuzzDecodeChatCommon(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"model":"m","messages":[{"role":"tool","content":"1","tool_call_id":"c1","name":"f"}],"temperature":0.7,"top_p":1,"n":2,"seed":-42,"stop":["a"],"think":true}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		sameCommon(t, body)
	})
}
