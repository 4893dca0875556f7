package proxy

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// The memo keeps what follows created and compares the rest of the answer by identity or value:
// that holds only while cascade.Answer encodes these fields, in this order.
func TestWholeMemoFields(t *testing.T) {
	var names []string
	at := reflect.TypeFor[cascade.Answer]()
	for f := range at.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		if f.Anonymous || tag == "" {
			t.Fatalf("field %s of cascade.Answer is encoded without a name of its own", f.Name)
		}
		names = append(names, strings.Split(tag, ",")[0])
	}
	want := []string{"id", "model", "created", "system_fingerprint", "choices", "usage"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("cascade.Answer encodes %v, the whole-answer memo knows %v", names, want)
	}
}

// wholeAnswers are stored answers of every shape the body can take.
func wholeAnswers() []*cascade.Answer {
	text, other := "The capital of France is <Paris> & \u2028 é.", "Lyon"
	return []*cascade.Answer{
		{ID: "chatcmpl-1", Model: "known-1", Created: 1764900000, Complete: true,
			Choices: []cascade.Choice{{Message: cascade.AnswerMessage{Role: "assistant", Content: &text}, FinishReason: "stop"}},
			Usage:   &cascade.Usage{PromptTokens: 20, CompletionTokens: 8, TotalTokens: 28}},
		{ID: "x", Model: `m<"odel">&é` + "\u2029", Created: -5, SystemFingerprint: "fp_<1>",
			Choices: []cascade.Choice{{Message: cascade.AnswerMessage{Role: "assistant", Content: &text, ReasoningContent: "think"}, FinishReason: "length",
				Logprobs: json.RawMessage(`{"content":[]}`)}, {Index: 1, Message: cascade.AnswerMessage{Role: "assistant", Content: &other}, FinishReason: "stop"}}},
		{ID: "", Model: "", Created: 0, Choices: []cascade.Choice{{Message: cascade.AnswerMessage{Role: "assistant"}, FinishReason: "tool_calls"}}},
	}
}

// Served from the memo, a stored answer's body is encoding/json's, byte for byte, whatever its
// id and created; an answer with other choices, usage, model or fingerprint, or an id that
// encodes escaped, is encoded anew.
func TestWholeMemoBytes(t *testing.T) {
	for i, stored := range wholeAnswers() {
		var w wholeMemos
		hit := func(id string, created int64, edit func(*cascade.Answer)) {
			t.Helper()
			ans := *stored
			ans.ID, ans.Created = id, created
			if edit != nil {
				edit(&ans)
			}
			got, err := w.whole(&ans)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(completion{Object: "chat.completion", Answer: &ans})
			if !bytes.Equal(got, want) {
				t.Fatalf("answer %d (id %q, created %d):\n got %s\nwant %s", i, id, created, got, want)
			}
		}
		for j, id := range []string{"chatcmpl-a", "chatcmpl-b", "c.d_e-F9", "", `<"escaped">`, "chatcmpl-c"} {
			hit(id, int64(j)*1764900001-3, nil)
		}
		if stored.ID != "" && w.last.Load().n == 0 {
			t.Fatalf("answer %d: no memo after its repeats", i)
		}
		hit("chatcmpl-d", 7, func(a *cascade.Answer) { a.Choices = append([]cascade.Choice(nil), a.Choices...) })
		hit("chatcmpl-e", 7, func(a *cascade.Answer) { a.Choices = a.Choices[:1] })
		hit("chatcmpl-f", 7, func(a *cascade.Answer) { a.Usage = &cascade.Usage{PromptTokens: 1} })
		hit("chatcmpl-g", 7, func(a *cascade.Answer) { a.Model += "-other" })
		hit("chatcmpl-h", 7, func(a *cascade.Answer) { a.SystemFingerprint += "-other" })
		hit("chatcmpl-i", 7, func(a *cascade.Answer) { a.Choices = nil })
		hit("chatcmpl-j", 7, nil)
	}
}

// A backend's answer is not remembered: the memo is for a stage's stored answers.
func TestWholeMemoNotForBackends(t *testing.T) {
	var w wholeMemos
	ans := *wholeAnswers()[0]
	ans.Backend = "b"
	for range 3 {
		if _, err := w.whole(&ans); err != nil {
			t.Fatal(err)
		}
	}
	if m := w.last.Load(); m != seenOnce {
		t.Fatalf("memo %+v after a backend's answers", m)
	}
}
