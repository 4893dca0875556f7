package backends

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

func embedder(t *testing.T, b cascade.Backend) cascade.Embedder {
	t.Helper()
	e, ok := b.(cascade.Embedder)
	if !ok {
		t.Fatalf("%T is not a cascade.Embedder", b)
	}
	return e
}

func TestEmbed(t *testing.T) {
	wantPath := map[string]string{"ollama": "/api/embed", "openai": "/v1/embeddings", "llamacpp": "/v1/embeddings"}
	for _, d := range dialects {
		t.Run(d.typ, func(t *testing.T) {
			f := d.fake(t)
			b := newBackend(t, d.typ, f, func(o *Options) { o.APIKey = "sk-test" })
			texts := []string{"hello", "world", "hello"}
			got, err := embedder(t, b).Embed(context.Background(), cascade.EmbedRequest{Model: "emb", Input: texts, Dimensions: 5})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Vectors) != len(texts) {
				t.Fatalf("%d vectors for %d texts", len(got.Vectors), len(texts))
			}
			for i, txt := range texts {
				if want := fakes.Vector(txt, 5); !slices.Equal(got.Vectors[i], want) {
					t.Errorf("vector %d = %v, want %v (in input order)", i, got.Vectors[i], want)
				}
			}
			if got.PromptTokens <= 0 {
				t.Errorf("PromptTokens = %d, want > 0", got.PromptTokens)
			}
			if f.Embeds() != 1 || f.Requests() != 0 {
				t.Errorf("fake saw %d embeds and %d chats, want 1 and 0", f.Embeds(), f.Requests())
			}
			last := f.LastRequest()
			if last.Path != wantPath[d.typ] {
				t.Errorf("path = %s, want %s", last.Path, wantPath[d.typ])
			}
			if h := last.Header.Get("Authorization"); h != "Bearer sk-test" {
				t.Errorf("Authorization = %q", h)
			}
			var body struct {
				Model      string   `json:"model"`
				Input      []string `json:"input"`
				Dimensions int      `json:"dimensions"`
			}
			if err := json.Unmarshal(last.Body, &body); err != nil {
				t.Fatal(err)
			}
			if body.Model != "emb" || !slices.Equal(body.Input, texts) || body.Dimensions != 5 {
				t.Errorf("upstream body = %s", last.Body)
			}
		})
	}
}

func TestEmbedErrors(t *testing.T) {
	const key = "sk-secret-key-123"
	for _, d := range dialects {
		t.Run(d.typ+"/upstream 4xx redacted", func(t *testing.T) {
			f := d.fake(t, fakes.Config{Status: 401,
				ErrorBody: `{"error":{"message":"Incorrect API key provided: ` + key + `.","type":"invalid_request_error","code":"invalid_api_key"}}`})
			b := newBackend(t, d.typ, f, func(o *Options) { o.APIKey = key })
			_, err := embedder(t, b).Embed(context.Background(), cascade.EmbedRequest{Model: "emb", Input: []string{"x"}})
			var up *cascade.UpstreamError
			if !errors.As(err, &up) {
				t.Fatalf("err = %v (%T), want *cascade.UpstreamError", err, err)
			}
			if up.Status != 401 || up.Message != "Incorrect API key provided: [redacted]." || up.Backend != "up-"+d.typ || up.Code != "invalid_api_key" {
				t.Errorf("got %+v", up)
			}
		})
		t.Run(d.typ+"/upstream 500", func(t *testing.T) {
			f := d.fake(t, fakes.Config{Status: 500})
			b := newBackend(t, d.typ, f)
			_, err := embedder(t, b).Embed(context.Background(), cascade.EmbedRequest{Model: "emb", Input: []string{"x"}})
			var up *cascade.UpstreamError
			if !errors.As(err, &up) || up.Status != 500 || up.Message != fakes.DefaultErrorMessage {
				t.Fatalf("err = %v, want an UpstreamError 500 with the fake's message", err)
			}
		})
		t.Run(d.typ+"/empty input", func(t *testing.T) {
			f := d.fake(t)
			b := newBackend(t, d.typ, f)
			_, err := embedder(t, b).Embed(context.Background(), cascade.EmbedRequest{Model: "emb"})
			var up *cascade.UpstreamError
			if !errors.As(err, &up) || up.Status != 400 || up.Param != "input" {
				t.Fatalf("err = %v, want an UpstreamError 400 on input", err)
			}
			if f.Embeds() != 0 {
				t.Errorf("an empty input reached the upstream")
			}
		})
		t.Run(d.typ+"/unreachable", func(t *testing.T) {
			b, err := New(Options{Name: "gone", Type: d.typ, URL: closedPortURL(t) + "/v1"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = embedder(t, b).Embed(context.Background(), cascade.EmbedRequest{Model: "emb", Input: []string{"x"}})
			var be *cascade.BackendError
			if !errors.As(err, &be) || be.Backend != "gone" || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("err = %v (%T), want a BackendError with ECONNREFUSED", err, err)
			}
		})
		t.Run(d.typ+"/timeout", func(t *testing.T) {
			f := d.fake(t, fakes.Config{Block: true})
			b := newBackend(t, d.typ, f, func(o *Options) { o.Timeout = 50 * time.Millisecond })
			_, err := embedder(t, b).Embed(context.Background(), cascade.EmbedRequest{Model: "emb", Input: []string{"x"}})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want DeadlineExceeded in the chain", err)
			}
			if !f.WaitCanceled(cancelSeen) {
				t.Error("the upstream did not see the call go away")
			}
		})
	}
}
