package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

// TestKVRemoteEmbedderIsMetered: a kv stage with an ollama embedder reaches it as the internal
// backend kv-embedder (with its key), and the embedding's energy is in the figures: in a kv
// hit's, and, on a kv miss, in the neural answer's.
func TestKVRemoteEmbedderIsMetered(t *testing.T) {
	chat := fakes.NewOpenAI(t)
	emb := fakes.NewOllama(t)
	s := startStack(t, fmt.Sprintf(`
log_level: error
cascade:
  stages: [kv, neural]
  kv: {embedder: {type: ollama, url: %q, model: nomic-embed-text, api_key: k}, threshold: 0.9}
backends: [{name: up, type: openai, url: %q, models: ["fake-*"], timeout: 2s}]
`, emb.URL, chat.BaseURL()))

	resp := postChat(t, s.URL, `{"model":"fake-model","messages":[{"role":"user","content":"How do I reset my password?"}]}`, nil)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if got := resp.Header.Get("X-EOC-Stage"); got != "neural" {
		t.Fatalf("first call: stage %q", got)
	}
	// The answer is learned in the background: its embedding is the embedder's first call.
	deadline := time.Now().Add(5 * time.Second)
	for emb.Embeds() < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if emb.Embeds() != 1 {
		t.Fatalf("embedder saw %d calls, want 1 (the learned answer)", emb.Embeds())
	}
	last := emb.LastRequest()
	if last.Path != "/api/embed" || last.Header.Get("Authorization") != "Bearer k" || !strings.Contains(string(last.Body), "nomic-embed-text") {
		t.Errorf("embed call: %s %q %s", last.Path, last.Header.Get("Authorization"), last.Body)
	}
	time.Sleep(50 * time.Millisecond) // the entry is indexed right after the embedding returns

	var hitMethod string
	for time.Now().Before(deadline) {
		resp = postChat(t, s.URL, `{"model":"fake-model","messages":[{"role":"user","content":"How do I reset my password?"}]}`, nil)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.Header.Get("X-EOC-Stage") == "kv" {
			hitMethod = resp.Header.Get("X-EOC-Energy-Method")
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if hitMethod == "" {
		t.Fatal("the learned answer was never a kv hit")
	}
	checkEnergyHeaders(t, resp.Header, "kv")
	// stage-model is the stage's own estimate; the rest is the embedding's span (token-priced:
	// the fake has no process to measure).
	if !strings.HasPrefix(hitMethod, "stage-model+") {
		t.Errorf("kv hit method %q: the embedding's figure is missing", hitMethod)
	}
	if r := resp.Header.Get("X-EOC-Energy-Reason"); !strings.Contains(r, "in-process-stage;") {
		t.Errorf("kv hit reason %q: the embedding's reason is missing", r)
	}

	before := emb.Embeds()
	resp = postChat(t, s.URL, `{"model":"fake-model","messages":[{"role":"user","content":"What is the boiling point of water?"}]}`, nil)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.Header.Get("X-EOC-Stage") != "neural" || emb.Embeds() <= before {
		t.Fatalf("miss: stage %q, embeds %d -> %d", resp.Header.Get("X-EOC-Stage"), before, emb.Embeds())
	}
	// The neural figure of the fake alone is token-model; the kv stage's embedding adds its own
	// method and reason words, and its joules.
	solo := startStack(t, oneBackend("openai", chat.BaseURL(), "cascade: {stages: [neural]}"))
	r2 := postChat(t, solo.URL, `{"model":"fake-model","messages":[{"role":"user","content":"What is the boiling point of water?"}]}`, nil)
	_, _ = io.Copy(io.Discard, r2.Body)
	_ = r2.Body.Close()
	// A miss that spent an embedding is still a miss in the metrics.
	mr, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mr.Body)
	_ = mr.Body.Close()
	if !strings.Contains(string(body), "eoc_kv_learn_joules_total ") || strings.Contains(string(body), "eoc_kv_learn_joules_total 0\n") {
		t.Errorf("the background embedding is not in eoc_kv_learn_joules_total:\n%s", grep(body, "eoc_kv_learn"))
	}
	if want := `eoc_stage_duration_seconds_count{outcome="miss",stage="kv"} `; !strings.Contains(string(body), want) ||
		strings.Contains(string(body), `outcome="error",stage="kv"`) {
		t.Errorf("kv misses are not counted as misses:\n%s", grep(body, `stage="kv"`))
	}
	with, _ := strconv.ParseFloat(resp.Header.Get("X-EOC-Joules"), 64)
	without, _ := strconv.ParseFloat(r2.Header.Get("X-EOC-Joules"), 64)
	if !(with > without && without > 0) {
		t.Errorf("kv miss: %v J, without the kv stage %v J: the embedding is not billed", with, without)
	}
}

// TestEmbeddingsGoOpenAI: go-openai's CreateEmbeddings, pointed at the proxy, works unchanged,
// as floats and as base64, through an ollama and an openai backend; the repeat is the cache's.
func TestEmbeddingsGoOpenAI(t *testing.T) {
	for _, typ := range []string{"ollama", "openai"} {
		t.Run(typ, func(t *testing.T) {
			f := fakes.New(t, fakes.Dialect(typ))
			s := startStack(t, oneBackend(typ, f.BaseURL(), ""))
			c := client(s, "")
			texts := []string{"The food was delicious.", "The waiter was friendly."}
			for i, format := range []openai.EmbeddingEncodingFormat{openai.EmbeddingEncodingFormatFloat, openai.EmbeddingEncodingFormatBase64} {
				resp, err := c.CreateEmbeddings(context.Background(), openai.EmbeddingRequest{
					Input: texts, Model: openai.EmbeddingModel(fakes.DefaultModel), EncodingFormat: format})
				if err != nil {
					t.Fatalf("%s: %v", format, err)
				}
				if len(resp.Data) != 2 || resp.Usage.PromptTokens == 0 || string(resp.Model) != fakes.DefaultModel {
					t.Fatalf("%s: %+v", format, resp)
				}
				for j, d := range resp.Data {
					if d.Index != j || !slices.Equal(d.Embedding, fakes.Vector(texts[j], 0)) {
						t.Errorf("%s: data[%d] = %d %v", format, j, d.Index, d.Embedding)
					}
				}
				if i == 0 { // go-openai drops the headers of a base64 response when it decodes it
					checkEnergyHeaders(t, resp.Header(), "neural")
				}
			}
			// The same call as floats again: the cache's, with the headers.
			resp, err := c.CreateEmbeddings(context.Background(), openai.EmbeddingRequest{Input: texts, Model: openai.EmbeddingModel(fakes.DefaultModel)})
			if err != nil {
				t.Fatal(err)
			}
			checkEnergyHeaders(t, resp.Header(), "cache")
			if f.Embeds() != 1 {
				t.Errorf("upstream saw %d embeddings calls, want 1", f.Embeds())
			}
		})
	}
}
