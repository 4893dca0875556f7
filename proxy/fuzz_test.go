package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
)

// textStage answers every request with one fixed text.
type textStage struct{}

func (textStage) Name() string { return "echo" }
func (textStage) Serve(_ context.Context, req *cascade.Request, _ cascade.Sink) (*cascade.Answer, error) {
	return cascade.TextAnswer(req, "hi", 1, 0), nil
}

// FuzzChatHandler: any body posted to /v1/chat/completions, streaming or not, gets a 2xx or a
// 4xx in OpenAI's error shape (a JSON object with error.message and error.type); never a 5xx
// or a panic.
func FuzzChatHandler(f *testing.F) {
	for _, s := range []string{
		`{"model":"known-1","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"known-1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"known-1","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}],"n":3,"stop":["x"]}`,
		`{"model":"other","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"known-1","messages":[{"role":"user","content":null}]}`,
		`{"model":"known-1","messages":[]}`, `{"model":"known-1"}`, `{}`, `[]`, `null`, ``, `{"model":`, "\xff",
		`{"model":"known-1","messages":[{"role":"user","content":"a"}],"max_tokens":-1,"temperature":9,"n":-1}`,
		`{"model":"known-1","messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":""}}],"tool_choice":{"type":"function"}}`,
	} {
		f.Add(s)
	}
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"known-*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		f.Fatal(err)
	}
	c := cascade.New(router, []cascade.Stage{textStage{}}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	s := New(Options{Cascade: c, Logger: zerolog.Nop(), MaxBodyBytes: 1 << 16})
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
		switch {
		case rec.Code >= 200 && rec.Code < 300:
			return
		case rec.Code >= 400 && rec.Code < 500:
			var e struct {
				Error *struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" ||
				!strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
				t.Fatalf("status %d with body %q", rec.Code, rec.Body)
			}
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
	})
}
