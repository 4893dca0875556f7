package kv

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// fakeVector embeds like the built-in embedder, so the fakes behave like a real model.
func fakeVector(text string) []float32 { return embedBuiltin(text) }

func TestOllamaEmbedder(t *testing.T) {
	var auth string
	down := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/embed" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		if down {
			http.Error(w, `{"error":"model is loading"}`, http.StatusServiceUnavailable)
			return
		}
		auth = r.Header.Get("Authorization")
		var req struct {
			Model string
			Input []string
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model != "nomic-embed-text" {
			http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
			return
		}
		resp := map[string]any{"model": req.Model}
		var vs [][]float32
		for _, in := range req.Input {
			vs = append(vs, fakeVector(in))
		}
		resp["embeddings"] = vs
		_ = json.NewEncoder(w).Encode(resp)
	}))
	defer srv.Close()

	emb, err := NewOllama(srv.URL, "nomic-embed-text", "k")
	if err != nil {
		t.Fatal(err)
	}
	s := newStage(t, Options{Embedder: emb})
	teach(t, s, request("", "m", user("How do I reset my password?")), neural("link", 4))
	if ans, hit := serve(t, s, request("", "m", user("how do I reset my password"))); !hit || ans.Energy.Saved != 4 {
		t.Fatalf("hit %v", hit)
	}
	if auth != "Bearer k" {
		t.Errorf("Authorization = %q", auth)
	}
	down = true
	_, err = s.Serve(context.Background(), request("", "m", user("How do I reset my password?")), nil)
	if err == nil || errors.Is(err, cascade.ErrMiss) {
		t.Fatalf("embedder down: err = %v, want an error", err)
	}
}

func TestOpenAIEmbedder(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/embeddings" || r.Header.Get("Authorization") != "Bearer sk-test" {
			http.Error(w, `{"error":{"message":"nope"}}`, http.StatusUnauthorized)
			return
		}
		var req struct {
			Model string
			Input []string
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		var data []map[string]any
		// Out of order on purpose: the embedder must use each item's index.
		for i := len(req.Input) - 1; i >= 0; i-- {
			data = append(data, map[string]any{"object": "embedding", "index": i, "embedding": fakeVector(req.Input[i])})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "model": req.Model, "data": data})
	}))
	defer srv.Close()

	for _, url := range []string{srv.URL + "/v1", srv.URL + "/v1/"} {
		e, err := NewOpenAI(url, "text-embedding-3-small", "sk-test")
		if err != nil {
			t.Fatal(err)
		}
		vs, err := e.Embed(context.Background(), []string{"alpha beta", "gamma"})
		if err != nil {
			t.Fatal(err)
		}
		if len(vs) != 2 || dot(vs[0], fakeVector("alpha beta")) < 0.999 || dot(vs[1], fakeVector("gamma")) < 0.999 {
			t.Fatalf("%s: vectors out of order", url)
		}
	}
	bad, _ := NewOpenAI(srv.URL+"/v1", "m", "wrong")
	if _, err := bad.Embed(context.Background(), []string{"x"}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("bad key: err = %v", err)
	}
}
