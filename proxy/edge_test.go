package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
)

// echoStage answers every request with a fixed text, or panics when the prompt says so.
type echoStage struct{}

func (echoStage) Name() string { return "echo" }
func (echoStage) Serve(_ context.Context, req *cascade.Request, _ cascade.Sink) (*cascade.Answer, error) {
	if req.Chat.Messages[0].Text() == "panic" {
		panic("boom")
	}
	t := "hi"
	return &cascade.Answer{ID: "x", Model: req.Chat.Model, Choices: []cascade.Choice{{Message: cascade.AnswerMessage{Role: "assistant", Content: &t}, FinishReason: "stop"}}, Complete: true}, nil
}

type nopBackend struct{}

func (nopBackend) Chat(context.Context, *cascade.Request, cascade.Sink) (*cascade.Answer, error) {
	return nil, cascade.ErrMiss
}

func newEdge(t *testing.T, maxBody int64) *httptest.Server {
	t.Helper()
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"known-*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := cascade.New(router, []cascade.Stage{echoStage{}}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	srv := httptest.NewServer(New(Options{Cascade: c, Logger: zerolog.Nop(), MaxBodyBytes: maxBody}))
	t.Cleanup(srv.Close)
	return srv
}

func TestEdgeErrors(t *testing.T) {
	srv := newEdge(t, 1024)
	big := `{"model":"known-1","messages":[{"role":"user","content":"` + strings.Repeat("x", 2000) + `"}]}`
	tests := []struct {
		name   string
		body   string
		status int
		param  string
		code   string
	}{
		{"malformed json", `{"model":`, 400, "", ""},
		{"not an object", `[1,2]`, 400, "", ""},
		{"missing model", `{"messages":[{"role":"user","content":"a"}]}`, 400, "model", ""},
		{"missing messages", `{"model":"known-1"}`, 400, "messages", ""},
		{"wrong role", `{"model":"known-1","messages":[{"role":"robot","content":"a"}]}`, 400, "messages[0].role", ""},
		{"wrong type", `{"model":"known-1","messages":[{"role":"user","content":"a"}],"temperature":"hot"}`, 400, "temperature", ""},
		{"out of range", `{"model":"known-1","messages":[{"role":"user","content":"a"}],"temperature":3}`, 400, "temperature", ""},
		{"bad content", `{"model":"known-1","messages":[{"role":"user","content":5}]}`, 400, "messages[0].content", ""},
		{"bad stop", `{"model":"known-1","messages":[{"role":"user","content":"a"}],"stop":5}`, 400, "stop", ""},
		{"unknown model", `{"model":"other","messages":[{"role":"user","content":"a"}]}`, 404, "model", "model_not_found"},
		{"too large", big, 413, "", "request_too_large"},
		{"panic", `{"model":"known-1","messages":[{"role":"user","content":"panic"}]}`, 500, "", "internal_error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			var e errorBody
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatalf("body is not OpenAI's error shape: %v", err)
			}
			if e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("empty message or type: %+v", e.Error)
			}
			if tc.param != "" && (e.Error.Param == nil || *e.Error.Param != tc.param) {
				t.Fatalf("param %v, want %q (message %q)", e.Error.Param, tc.param, e.Error.Message)
			}
			if tc.code != "" && (e.Error.Code == nil || *e.Error.Code != tc.code) {
				t.Fatalf("code %v, want %q", e.Error.Code, tc.code)
			}
			if tc.status == 500 && !strings.Contains(e.Error.Message, resp.Header.Get("X-Request-Id")) {
				t.Fatalf("500 message %q lacks the request id %q", e.Error.Message, resp.Header.Get("X-Request-Id"))
			}
		})
	}
}

func TestEdgeAnswerHeaders(t *testing.T) {
	srv := newEdge(t, 1<<20)
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		bytes.NewBufferString(`{"model":"known-1","messages":[{"role":"user","content":"a"}],"x_unknown":1}`))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := resp.Header.Get(HeaderStage); got != "echo" {
		t.Fatalf("stage %q", got)
	}
	if got := resp.Header.Get(HeaderEnergy); got != "estimated" {
		t.Fatalf("grade %q", got)
	}
	if resp.Header.Get(HeaderReason) == "" || resp.Header.Get(HeaderMethod) != "stage-model" {
		t.Fatalf("estimated figure without reason or method: %v", resp.Header)
	}
	if r := resp.Header.Get(HeaderReceipt); len(r) != 64 {
		t.Fatalf("receipt %q", r)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	f.Add(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stop":["x"],"tools":[{"type":"function","function":{"name":"f"}}]}`)
	f.Add(`{"model":"m","messages":[{"role":"tool","content":null}],"n":0}`)
	s := New(Options{Cascade: cascade.New(&routing.Router{}, nil, cascade.Options{}), Logger: zerolog.Nop(), MaxBodyBytes: 1 << 20})
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
		req := new(cascade.Request)
		x, apiErr := s.decode(httptest.NewRecorder(), r, s.dialects["/v1/chat/completions"], "", req)
		if (x == nil) == (apiErr == nil) {
			t.Fatalf("decode returned exchange=%v err=%v", x, apiErr)
		}
		if apiErr != nil && (apiErr.Status != 400 || apiErr.Message == "") {
			t.Fatalf("bad error %+v", apiErr)
		}
		if x != nil {
			_ = req.Key()
			for i := range req.Chat.Messages {
				_ = req.Chat.Messages[i].Text()
			}
		}
	})
}

// Headers past MaxHeaderBytes get OpenAI's JSON 431 from the proxy, not net/http's plain text;
// headers under it pass.
func TestLargeHeadersAreJSON431(t *testing.T) {
	srv := newEdge(t, 1<<20)
	body := `{"model":"known-1","messages":[{"role":"user","content":"a"}]}`
	for _, tc := range []struct {
		size   int
		status int
	}{{MaxHeaderBytes / 2, http.StatusOK}, {MaxHeaderBytes + 1, http.StatusRequestHeaderFieldsTooLarge}} {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Pad", strings.Repeat("p", tc.size))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Fatalf("%d bytes of headers: status %d, want %d: %s", tc.size, resp.StatusCode, tc.status, b)
		}
		if tc.status == http.StatusOK {
			continue
		}
		var e errorBody
		if err := json.Unmarshal(b, &e); err != nil || e.Error.Code == nil || *e.Error.Code != "request_header_too_large" ||
			resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("431 is not OpenAI's JSON error: %q (%v)", b, err)
		}
	}
}

// errorBody is OpenAI's error object as a client reads it.
type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// TestMountedUnderARouter: the edge mounted under a prefix in another chi router routes by what
// the outer router left of the path, as chi's mounted routers do, and still gives each request
// its id.
func TestMountedUnderARouter(t *testing.T) {
	outer := chi.NewRouter()
	outer.Mount("/api", New(Options{Logger: zerolog.Nop()}))
	w := httptest.NewRecorder()
	outer.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/api/healthz", nil))
	if w.Code != http.StatusOK || w.Header().Get("X-Request-Id") == "" {
		t.Fatalf("GET /api/healthz: status %d, request id %q: %s", w.Code, w.Header().Get("X-Request-Id"), w.Body)
	}
}
