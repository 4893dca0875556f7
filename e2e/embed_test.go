//go:build e2e && linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	goopenai "github.com/sashabaranov/go-openai"

	"github.com/ollama/ollama/api"

	"github.com/eoc-proxy/eoc-proxy/internal/testenv/tinymodel"
)

type embedReply struct {
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func postEmbeddings(t *testing.T, body string) (http.Header, embedReply) {
	t.Helper()
	resp, err := http.Post(env.proxy.url+"/v1/embeddings", "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var r embedReply
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return resp.Header, r
}

// TestEmbeddingsRaw: /v1/embeddings through the real Ollama's /api/embed gives Ollama's own
// vectors, metered; the repeat is the cache's, with the same vectors.
func TestEmbeddingsRaw(t *testing.T) {
	texts := []string{prompt(), prompt()}
	in, _ := json.Marshal(map[string]any{"model": tinymodel.EmbedName, "input": texts})
	r1, e1 := postEmbeddings(t, string(in))
	checkEOC(t, "first", r1.Get, "neural")
	if e1.Object != "list" || len(e1.Data) != 2 || e1.Usage.PromptTokens <= 0 {
		t.Fatalf("reply %+v", e1)
	}
	direct, err := env.ollama.client().Embed(context.Background(), &api.EmbedRequest{Model: tinymodel.EmbedName, Input: texts})
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range e1.Data {
		if d.Index != i || len(d.Embedding) != tinymodel.Width || !slices.Equal(d.Embedding, direct.Embeddings[i]) {
			t.Errorf("data[%d]: index %d, %d values, equal to Ollama's own: %v", i, d.Index, len(d.Embedding), slices.Equal(d.Embedding, direct.Embeddings[i]))
		}
	}

	r2, e2 := postEmbeddings(t, string(in))
	checkEOC(t, "repeat", r2.Get, "cache")
	if r2.Get("X-EOC-Joules-Saved") != r1.Get("X-EOC-Joules") {
		t.Errorf("repeat saved %q, the first call cost %q", r2.Get("X-EOC-Joules-Saved"), r1.Get("X-EOC-Joules"))
	}
	for i := range e1.Data {
		if !slices.Equal(e1.Data[i].Embedding, e2.Data[i].Embedding) {
			t.Errorf("cached vector %d differs", i)
		}
	}
	figure("/v1/embeddings (2 texts, eoc-tiny-embed): %s J %s; repeat from the cache: %s J",
		r1.Get("X-EOC-Joules"), r1.Get("X-EOC-Energy"), r2.Get("X-EOC-Joules"))
}

// TestEmbeddingsSDKs: both Go SDKs' embeddings calls work unchanged against the proxy.
func TestEmbeddingsSDKs(t *testing.T) {
	text := prompt()
	g, err := goOpenAI(env.proxy.url).CreateEmbeddings(context.Background(), goopenai.EmbeddingRequest{
		Input: []string{text}, Model: goopenai.EmbeddingModel(tinymodel.EmbedName)})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Data) != 1 || len(g.Data[0].Embedding) != tinymodel.Width {
		t.Fatalf("go-openai: %+v", g)
	}
	checkEOC(t, "go-openai", g.Header().Get, "neural")

	var raw *http.Response
	c := openaiGo(env.proxy.url)
	o, err := c.Embeddings.New(context.Background(), oai.EmbeddingNewParams{
		Model: tinymodel.EmbedName,
		Input: oai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{text}},
	}, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Data) != 1 || len(o.Data[0].Embedding) != tinymodel.Width {
		t.Fatalf("openai-go: %+v", o.Data)
	}
	for i, v := range o.Data[0].Embedding {
		if float32(v) != g.Data[0].Embedding[i] {
			t.Fatalf("openai-go value %d = %v, go-openai %v", i, v, g.Data[0].Embedding[i])
		}
	}
	checkEOC(t, "openai-go", raw.Header.Get, "cache")

	b64, err := goOpenAI(env.proxy.url).CreateEmbeddings(context.Background(), goopenai.EmbeddingRequest{
		Input: []string{text}, Model: goopenai.EmbeddingModel(tinymodel.EmbedName), EncodingFormat: goopenai.EmbeddingEncodingFormatBase64})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b64.Data[0].Embedding, g.Data[0].Embedding) {
		t.Errorf("base64 vector differs from the float one")
	}
}

// TestKVOllamaEmbedderEnergy: a kv stage whose embedder is the real Ollama (the internal backend
// kv-embedder) answers an imported entry, and the hit's figure includes the embedding's span.
func TestKVOllamaEmbedderEnergy(t *testing.T) {
	question := prompt()
	p, err := startProxyWith("kv-embed", func(addr, dir string) string {
		return fmt.Sprintf(`listen: %s
log_level: info
cascade:
  stages: [kv, neural]
  kv: {data_dir: %q, embedder: {type: ollama, url: %q, model: %s}}
backends:
  - {name: local, type: ollama, url: %q, models: ["*"], timeout: 120s}
`, addr, filepath.Join(dir, "kv"), env.ollama.url, tinymodel.EmbedName, env.ollama.url)
	}, func(cfg string) error {
		recs := filepath.Join(filepath.Dir(cfg), "import.jsonl")
		line, _ := json.Marshal(map[string]any{"model": model, "question": question, "answer": "From the kv stage.", "joules": 2})
		if err := os.WriteFile(recs, append(line, '\n'), 0o644); err != nil {
			return err
		}
		out, err := exec.Command(env.proxyBin, "kv", "import", "-config", cfg, recs).CombinedOutput()
		if err != nil {
			return fmt.Errorf("kv import: %w\n%s", err, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	r, c := chat(t, p.url, chatBody(question, 12, false)) //nolint:bodyclose // chat closed it
	if r.StatusCode != http.StatusOK || len(c.Choices) == 0 {
		t.Fatalf("status %d: %+v", r.StatusCode, c.Error)
	}
	checkEOC(t, "kv hit", r.Header.Get, "kv")
	if got := c.Choices[0].Message.Content; got != "From the kv stage." {
		t.Errorf("content %q", got)
	}
	// The stage's own estimate, plus the embedding's span at Ollama.
	if m := r.Header.Get("X-EOC-Energy-Method"); !strings.HasPrefix(m, "stage-model+") {
		t.Errorf("kv hit method %q: the embedding's figure is missing", m)
	}
	figure("kv hit with the ollama embedder: %s J (%s, %s)", r.Header.Get("X-EOC-Joules"),
		r.Header.Get("X-EOC-Energy-Method"), r.Header.Get("X-EOC-Energy-Reason"))
}
