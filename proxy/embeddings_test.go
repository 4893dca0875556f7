package proxy

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/eoc-proxy/eoc-proxy/backends"
	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/cache"
	"github.com/eoc-proxy/eoc-proxy/cascade/neural"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

// embedEdge is the edge over a cache and a neural stage in front of one fake upstream (models
// fake-*) and a backend that cannot embed (models chat-only-*), recording its ledger calls.
type embedEdge struct {
	*httptest.Server
	mu    sync.Mutex
	calls []Call
}

func (e *embedEdge) recorded() []Call {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.calls)
}

func newEmbedEdge(t *testing.T, typ string, f *fakes.Server, keys ...APIKey) *embedEdge {
	t.Helper()
	return newTracedEmbedEdge(t, typ, f, nil, keys...)
}

// newTracedEmbedEdge is newEmbedEdge with tracing through tp (nil: none).
func newTracedEmbedEdge(t *testing.T, typ string, f *fakes.Server, tp trace.TracerProvider, keys ...APIKey) *embedEdge {
	t.Helper()
	be, err := backends.New(backends.Options{Name: "up", Type: typ, URL: f.BaseURL(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	router, err := routing.New([]routing.Route{
		{Name: "up", Type: typ, Patterns: []string{"fake-*"}, Backend: be},
		{Name: "chat-only", Type: "custom", Patterns: []string{"chat-only-*"}, Backend: nopBackend{}},
	}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stages := []cascade.Stage{cache.New(100, time.Minute), neural.New(router, nil)}
	c := cascade.New(router, stages, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	e := &embedEdge{}
	e.Server = httptest.NewServer(New(Options{Cascade: c, Logger: zerolog.Nop(), Keys: keys, Registry: prometheus.NewRegistry(), Tracing: tp,
		Record: func(call Call) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.calls = append(e.calls, call)
			return nil
		}}))
	t.Cleanup(e.Close)
	return e
}

type embedResp struct {
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Object    string          `json:"object"`
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

// vectors decodes each item's embedding, floats or base64.
func (r *embedResp) vectors(t *testing.T) [][]float32 {
	t.Helper()
	out := make([][]float32, len(r.Data))
	for i, d := range r.Data {
		if d.Index != i || d.Object != "embedding" {
			t.Fatalf("data[%d]: index %d object %q", i, d.Index, d.Object)
		}
		var s string
		if json.Unmarshal(d.Embedding, &s) == nil {
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil || len(b)%4 != 0 {
				t.Fatalf("data[%d]: bad base64 %q: %v", i, s, err)
			}
			for j := 0; j < len(b); j += 4 {
				out[i] = append(out[i], math.Float32frombits(binary.LittleEndian.Uint32(b[j:])))
			}
			continue
		}
		if err := json.Unmarshal(d.Embedding, &out[i]); err != nil {
			t.Fatalf("data[%d]: %s: %v", i, d.Embedding, err)
		}
	}
	return out
}

// reply is a response read whole.
type reply struct {
	StatusCode int
	Header     http.Header
}

func postEmbed(t *testing.T, url, body string, hdr map[string]string) (reply, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/embeddings", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header}, b
}

func TestEmbeddings(t *testing.T) {
	for _, typ := range []string{"ollama", "openai", "llamacpp"} {
		t.Run(typ, func(t *testing.T) {
			f := fakes.New(t, fakes.Dialect(typ))
			e := newEmbedEdge(t, typ, f)
			cases := []struct {
				name  string
				body  string
				texts []string
				dim   int
			}{
				{"string", `{"model":"fake-embed","input":"hello world"}`, []string{"hello world"}, 0},
				{"list", `{"model":"fake-embed","input":["alpha","beta","alpha"],"dimensions":4}`, []string{"alpha", "beta", "alpha"}, 4},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					before := f.Embeds()
					resp, body := postEmbed(t, e.URL, tc.body, nil)
					if resp.StatusCode != 200 {
						t.Fatalf("status %d: %s", resp.StatusCode, body)
					}
					checkEmbedHeaders(t, resp.Header, "neural")
					var r embedResp
					if err := json.Unmarshal(body, &r); err != nil {
						t.Fatal(err)
					}
					if r.Object != "list" || r.Model != "fake-embed" || r.Usage.PromptTokens <= 0 || r.Usage.TotalTokens != r.Usage.PromptTokens {
						t.Errorf("response %s", body)
					}
					got := r.vectors(t)
					for i, txt := range tc.texts {
						if !slices.Equal(got[i], fakes.Vector(txt, tc.dim)) {
							t.Errorf("vector %d = %v, want %v", i, got[i], fakes.Vector(txt, tc.dim))
						}
					}
					if f.Embeds() != before+1 {
						t.Fatalf("upstream saw %d calls, want 1", f.Embeds()-before)
					}

					// The repeat, as floats and as base64, is the cache's: the upstream sees nothing.
					for _, format := range []string{"", "base64"} {
						b := tc.body
						if format != "" {
							b = strings.Replace(b, `{`, `{"encoding_format":"`+format+`",`, 1)
						}
						resp2, body2 := postEmbed(t, e.URL, b, nil)
						if resp2.StatusCode != 200 {
							t.Fatalf("repeat: status %d: %s", resp2.StatusCode, body2)
						}
						checkEmbedHeaders(t, resp2.Header, "cache")
						if resp2.Header.Get(HeaderJoulesSaved) != resp.Header.Get(HeaderJoules) {
							t.Errorf("repeat: saved %q, want the first call's %q", resp2.Header.Get(HeaderJoulesSaved), resp.Header.Get(HeaderJoules))
						}
						var r2 embedResp
						if err := json.Unmarshal(body2, &r2); err != nil {
							t.Fatal(err)
						}
						if !slices.EqualFunc(r2.vectors(t), got, slices.Equal) || r2.Usage != r.Usage {
							t.Errorf("repeat (%q): %s, want the same vectors and usage as %s", format, body2, body)
						}
					}
					if f.Embeds() != before+1 {
						t.Errorf("repeats reached the upstream: %d calls", f.Embeds()-before)
					}
				})
			}
			if f.Requests() != 0 {
				t.Errorf("embeddings reached the chat endpoint %d times", f.Requests())
			}
		})
	}
}

func checkEmbedHeaders(t *testing.T, h http.Header, stage string) {
	t.Helper()
	if got := h.Get(HeaderStage); got != stage {
		t.Errorf("%s = %q, want %q", HeaderStage, got, stage)
	}
	for _, k := range []string{HeaderJoules, HeaderEnergy, HeaderMethod, HeaderCoverage, HeaderReceipt} {
		if h.Get(k) == "" {
			t.Errorf("%s missing", k)
		}
	}
	if h.Get("Content-Type") != "application/json" {
		t.Errorf("Content-Type %q", h.Get("Content-Type"))
	}
}

func TestEmbeddingsCacheControlAndTenants(t *testing.T) {
	f := fakes.NewOpenAI(t)
	e := newEmbedEdge(t, "openai", f, APIKey{ID: "a", Key: "key-a"}, APIKey{ID: "b", Key: "key-b"})
	body := `{"model":"fake-embed","input":"same text"}`
	as := map[string]string{"Authorization": "Bearer key-a"}
	bs := map[string]string{"Authorization": "Bearer key-b"}
	steps := []struct {
		name  string
		hdr   map[string]string
		stage string
		calls int // upstream calls so far
	}{
		{"first for a", as, "neural", 1},
		{"repeat for a", as, "cache", 1},
		{"same text for b", bs, "neural", 2},
		{"no-cache for a", map[string]string{"Authorization": "Bearer key-a", "Cache-Control": "no-cache"}, "neural", 3},
	}
	for _, s := range steps {
		resp, b := postEmbed(t, e.URL, body, s.hdr)
		if resp.StatusCode != 200 || resp.Header.Get(HeaderStage) != s.stage || f.Embeds() != s.calls {
			t.Fatalf("%s: status %d stage %q upstream calls %d, want 200 %q %d: %s", s.name, resp.StatusCode,
				resp.Header.Get(HeaderStage), f.Embeds(), s.stage, s.calls, b)
		}
	}
	if resp, _ := postEmbed(t, e.URL, body, nil); resp.StatusCode != 401 {
		t.Errorf("without a key: status %d, want 401", resp.StatusCode)
	}
	calls := e.recorded()
	if len(calls) != len(steps) {
		t.Fatalf("%d ledger calls, want %d", len(calls), len(steps))
	}
	if calls[0].Key != calls[1].Key || calls[0].Key == calls[2].Key || calls[0].KeyID != "a" || calls[2].KeyID != "b" {
		t.Errorf("ledger keys: %+v", calls)
	}
	if calls[0].Stage != "neural" || calls[0].Backend != "up" || calls[0].Status != 200 || calls[0].Receipt == "" || calls[1].Stage != "cache" {
		t.Errorf("ledger: %+v", calls[:2])
	}
}

func TestEmbeddingsErrors(t *testing.T) {
	f := fakes.NewOpenAI(t)
	e := newEmbedEdge(t, "openai", f)
	tests := []struct {
		name   string
		body   string
		status int
		param  string
		code   string
	}{
		{"malformed json", `{"model":`, 400, "", ""},
		{"missing model", `{"input":"a"}`, 400, "model", ""},
		{"missing input", `{"model":"fake-embed"}`, 400, "input", ""},
		{"empty string", `{"model":"fake-embed","input":""}`, 400, "input", ""},
		{"empty list", `{"model":"fake-embed","input":[]}`, 400, "input", ""},
		{"empty text in list", `{"model":"fake-embed","input":["a",""]}`, 400, "input", ""},
		{"tokens", `{"model":"fake-embed","input":[1,2,3]}`, 400, "input", ""},
		{"token lists", `{"model":"fake-embed","input":[[1,2],[3]]}`, 400, "input", ""},
		{"number", `{"model":"fake-embed","input":5}`, 400, "input", ""},
		{"bad encoding", `{"model":"fake-embed","input":"a","encoding_format":"int8"}`, 400, "encoding_format", ""},
		{"bad dimensions", `{"model":"fake-embed","input":"a","dimensions":0}`, 400, "dimensions", ""},
		{"unknown model", `{"model":"other","input":"a"}`, 404, "model", "model_not_found"},
		{"backend cannot embed", `{"model":"chat-only-1","input":"a"}`, 400, "model", "embeddings_not_supported"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := postEmbed(t, e.URL, tc.body, nil)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			var eb errorBody
			if err := json.Unmarshal(body, &eb); err != nil || eb.Error.Message == "" || eb.Error.Type != "invalid_request_error" {
				t.Fatalf("not an OpenAI error: %s", body)
			}
			if tc.param != "" && (eb.Error.Param == nil || *eb.Error.Param != tc.param) {
				t.Errorf("param %v, want %q", eb.Error.Param, tc.param)
			}
			if tc.code != "" && (eb.Error.Code == nil || *eb.Error.Code != tc.code) {
				t.Errorf("code %v, want %q", eb.Error.Code, tc.code)
			}
		})
	}
	if f.Embeds() != 0 {
		t.Errorf("bad requests reached the upstream %d times", f.Embeds())
	}

	for _, tc := range []struct {
		status, want int
	}{{400, 400}, {401, 502}, {500, 502}} { // 4xx pass through, but an upstream 401 is the proxy's credentials: 502
		f.Configure(func(c *fakes.Config) { c.Status = tc.status })
		resp, body := postEmbed(t, e.URL, `{"model":"fake-embed","input":"x"}`, nil)
		if resp.StatusCode != tc.want || !strings.Contains(string(body), fakes.DefaultErrorMessage) {
			t.Errorf("upstream %d: status %d, want %d: %s", tc.status, resp.StatusCode, tc.want, body)
		}
		if resp.Header.Get(HeaderStage) != "neural" || resp.Header.Get(HeaderReceipt) == "" {
			t.Errorf("upstream %d: the failed call's figure is not in the headers", tc.status)
		}
	}
	f.Configure(func(c *fakes.Config) { c.Status = 0 })
	// A failure is not cached.
	if resp, _ := postEmbed(t, e.URL, `{"model":"fake-embed","input":"x"}`, nil); resp.StatusCode != 200 || resp.Header.Get(HeaderStage) != "neural" {
		t.Errorf("after failures: status %d stage %q, want a fresh 200 from neural", resp.StatusCode, resp.Header.Get(HeaderStage))
	}
}

// An embeddings call's span carries its input tokens, as a chat call's does (a 0 there would say
// the call read nothing), and no output tokens.
func TestEmbeddingsSpanCarriesInputTokens(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	f := fakes.New(t, fakes.Dialect("openai"))
	e := newTracedEmbedEdge(t, "openai", f, sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	rep, body := postEmbed(t, e.URL, `{"model":"fake-embed","input":["one two three","four"]}`, nil)
	var r embedResp
	if rep.StatusCode != http.StatusOK || json.Unmarshal(body, &r) != nil || r.Usage.PromptTokens <= 0 {
		t.Fatalf("embeddings: %d %s", rep.StatusCode, body)
	}
	settled(t, e.Server) // the call span ends after the response
	var call map[attribute.Key]attribute.Value
	for _, s := range exp.GetSpans().Snapshots() {
		if s.Name() == "POST /v1/embeddings" {
			call = attrs(s)
		}
	}
	if call == nil {
		t.Fatalf("no call span among %d", len(exp.GetSpans()))
	}
	if in, out := call[attrInTokens].AsInt64(), call[attrOutTokens].AsInt64(); in != int64(r.Usage.PromptTokens) || out != 0 {
		t.Fatalf("call span: input tokens %d, output %d; the answer's usage says %d in", in, out, r.Usage.PromptTokens)
	}
}
