package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
)

// TestDecodedChatsAnswersOnlyTheSameBytes: a remembered request comes back only for the same
// bytes from the same tenant, even when another body or tenant has the same hash, and a body
// over the bound is not kept.
func TestDecodedChatsAnswersOnlyTheSameBytes(t *testing.T) {
	d := newDecodedChats()
	d.hash = func(string, []byte) uint64 { return 7 } // every body collides
	a := []byte(`{"model":"m","messages":[{"role":"user","content":"a"}]}`)
	chat := cascade.ChatRequest{Model: "m", Messages: []cascade.Message{{Role: "user", Content: []byte(`"a"`)}}}
	_, h := d.get("k1", a)
	e := newDecodedChat("k1", a)
	e.req.Chat = chat
	d.put(h, e)
	if got, _ := d.get("k1", []byte(string(a))); got == nil || !reflect.DeepEqual(*got.chat, chat) || string(got.raw) != string(a) {
		t.Fatalf("the same bytes: got %+v, want %+v", got, chat)
	}
	if got, _ := d.get("k1", []byte(`{"model":"m","messages":[{"role":"user","content":"b"}]}`)); got != nil {
		t.Fatalf("other bytes with the same hash got %+v", got)
	}
	if got, _ := d.get("k2", a); got != nil {
		t.Fatalf("another tenant's same bytes got %+v", got)
	}
	big := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", decodedMaxBody) + `"}]}`)
	e = newDecodedChat("k1", big)
	e.req.Chat = chat
	d.put(h, e)
	if got, _ := d.get("k1", big); got != nil {
		t.Fatal("a body over the bound was kept")
	}
}

// captureStage answers every call and keeps the requests it saw.
type captureStage struct {
	mu   sync.Mutex
	seen []*cascade.Request
}

func (*captureStage) Name() string { return "capture" }
func (c *captureStage) Serve(_ context.Context, req *cascade.Request, _ cascade.Sink) (*cascade.Answer, error) {
	c.mu.Lock()
	c.seen = append(c.seen, req)
	c.mu.Unlock()
	t := "hi"
	return &cascade.Answer{ID: "x", Model: req.Chat.Model, Choices: []cascade.Choice{{Message: cascade.AnswerMessage{Role: "assistant", Content: &t}, FinishReason: "stop"}}, Complete: true}, nil
}

// TestRepeatedBodyTakesItsDecodedRequest: a call whose body is the same bytes as an earlier one
// gets the request decoded then, equal to what decoding it again makes; other bytes with the
// same meaning, and a body that was refused, are decoded again.
func TestRepeatedBodyTakesItsDecodedRequest(t *testing.T) {
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"known-*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stage := &captureStage{}
	c := cascade.New(router, []cascade.Stage{stage}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	s := New(Options{Cascade: c, Logger: zerolog.Nop()})
	body := `{"model":"known-1","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}],"stop":["x"],"max_tokens":9}`
	spaced := strings.Replace(body, `"messages":`, `"messages": `, 1)
	for _, b := range []string{body, body, spaced} {
		if code := serve(s, b); code != http.StatusOK {
			t.Fatalf("%s: status %d", b, code)
		}
	}
	first, again, other := stage.seen[0], stage.seen[1], stage.seen[2]
	var fresh cascade.ChatRequest
	if e := unmarshal([]byte(body), &fresh); e != nil {
		t.Fatal(e)
	}
	for _, r := range stage.seen {
		if !reflect.DeepEqual(r.Chat, fresh) {
			t.Fatalf("decoded %+v, want %+v", r.Chat, fresh)
		}
	}
	if &again.Chat.Messages[0] != &first.Chat.Messages[0] {
		t.Error("the repeated body was decoded again")
	}
	if &other.Chat.Messages[0] == &first.Chat.Messages[0] {
		t.Error("other bytes took the remembered request")
	}
	if string(again.Raw) != body || string(other.Raw) != spaced {
		t.Errorf("Raw is not the call's own body: %s, %s", again.Raw, other.Raw)
	}

	refused := `{"model":"known-1","messages":[{"role":"user","content":"hi"}],"temperature":3}`
	n := s.decoded.lru.Len()
	for range 2 {
		if code := serve(s, refused); code != http.StatusBadRequest {
			t.Fatalf("a refused body: status %d, want 400", code)
		}
	}
	if s.decoded.lru.Len() != n {
		t.Error("a refused body was remembered")
	}
}

func serve(s *Server, body string) int {
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
	return w.Code
}
