package kv

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ollama/ollama/api"
	openai "github.com/sashabaranov/go-openai"
)

// Embedder turns texts into vectors. Implementations must be safe for concurrent use.
type Embedder interface {
	// Embed returns one vector per text, in order. Vectors need not be normalised.
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	// ID names the model and its settings. Vectors from embedders with different IDs are never
	// compared: the store keeps them in different collections.
	ID() string
}

// BuiltinDim is the built-in embedder's dimension.
const BuiltinDim = 256

// Builtin is the offline embedder: hashed character trigrams, word unigrams and word bigrams of
// the Normalize form, signed feature hashing into BuiltinDim dimensions, L2-normalised. It needs
// no model and matches wording, not meaning: "reset my password" and "I forgot my login" share
// nothing. The zero value is ready and safe for concurrent use.
type Builtin struct{}

var _ Embedder = Builtin{}

// ID is "builtin-v1-256".
func (Builtin) ID() string { return fmt.Sprintf("builtin-v1-%d", BuiltinDim) }

// Embed hashes each text; it never fails.
func (Builtin) Embed(_ context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		out[i] = embedBuiltin(t)
	}
	return out, nil
}

// Feature weights: words count more than their letters, and word order a little.
const (
	weightTrigram = 1
	weightWord    = 2
	weightBigram  = 1.5
)

func embedBuiltin(s string) []float32 {
	v := make([]float32, BuiltinDim)
	bump := func(h uint64, w float32) {
		h ^= h >> 33 // fmix64: FNV's high bits mix poorly on short inputs
		h *= 0xff51afd7ed558ccd
		h ^= h >> 33
		if h>>63 == 1 {
			w = -w
		}
		v[h%BuiltinDim] += w
	}
	words := strings.Fields(Normalize(s))
	for i, w := range words {
		bump(fnvString(fnvByte(fnvOffset, 'w'), w), weightWord)
		if i > 0 {
			h := fnvString(fnvByte(fnvOffset, 'b'), words[i-1])
			bump(fnvString(fnvByte(h, ' '), w), weightBigram)
		}
	}
	r := []rune(" " + strings.Join(words, " ") + " ")
	for i := 0; i+3 <= len(r); i++ {
		h := fnvByte(fnvOffset, 't')
		for _, c := range r[i : i+3] {
			h = fnvRune(h, c)
		}
		bump(h, weightTrigram)
	}
	normalize(v)
	return v
}

// FNV-1a, inline so hashing a feature allocates nothing.
const (
	fnvOffset uint64 = 14695981039346656037
	fnvPrime  uint64 = 1099511628211
)

func fnvByte(h uint64, b byte) uint64 { return (h ^ uint64(b)) * fnvPrime }

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = fnvByte(h, s[i])
	}
	return h
}

func fnvRune(h uint64, r rune) uint64 {
	for ; r > 0; r >>= 8 {
		h = fnvByte(h, byte(r))
	}
	return h
}

// normalize scales v to unit length in place; a zero vector stays zero. It reports the length.
func normalize(v []float32) float64 {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	n := math.Sqrt(sum)
	if n == 0 {
		return 0
	}
	for i := range v {
		v[i] = float32(float64(v[i]) / n)
	}
	return n
}

// httpTimeout bounds one call to a remote embedder.
const httpTimeout = 60 * time.Second

// Ollama embeds with an Ollama server's /api/embed. It is safe for concurrent use.
type Ollama struct {
	client *api.Client
	model  string
}

var _ Embedder = (*Ollama)(nil)

// NewOllama returns an embedder for model on the Ollama server at baseURL (its root,
// http://127.0.0.1:11434). A non-empty apiKey is sent as a Bearer token.
func NewOllama(baseURL, model, apiKey string) (*Ollama, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("kv: ollama embedder url %q is not an http(s) URL", baseURL)
	}
	if model == "" {
		return nil, errors.New("kv: ollama embedder needs a model")
	}
	hc := &http.Client{Timeout: httpTimeout, Transport: bearer{key: apiKey}}
	return &Ollama{client: api.NewClient(u, hc), model: model}, nil
}

// ID is "ollama:" and the model.
func (o *Ollama) ID() string { return "ollama:" + o.model }

// Embed calls /api/embed once for all texts.
func (o *Ollama) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	resp, err := o.client.Embed(ctx, &api.EmbedRequest{Model: o.model, Input: texts})
	if err != nil {
		return nil, fmt.Errorf("ollama embed: %w", err)
	}
	if len(resp.Embeddings) != len(texts) {
		return nil, fmt.Errorf("ollama embed: %d vectors for %d texts", len(resp.Embeddings), len(texts))
	}
	return resp.Embeddings, nil
}

// bearer adds an Authorization header when a key is set.
type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.key != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.key)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// OpenAI embeds with any OpenAI-compatible POST {base}/embeddings. It is safe for concurrent use.
type OpenAI struct {
	client *openai.Client
	model  string
}

var _ Embedder = (*OpenAI)(nil)

// NewOpenAI returns an embedder for model at baseURL, the base URL as the SDKs take it with /v1
// included (https://api.openai.com/v1).
func NewOpenAI(baseURL, model, apiKey string) (*OpenAI, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("kv: openai embedder url %q is not an http(s) URL", baseURL)
	}
	if model == "" {
		return nil, errors.New("kv: openai embedder needs a model")
	}
	cfg := openai.DefaultConfig(apiKey)
	cfg.BaseURL = strings.TrimSuffix(strings.TrimSuffix(baseURL, "/"), "/embeddings")
	cfg.HTTPClient = &http.Client{Timeout: httpTimeout}
	return &OpenAI{client: openai.NewClientWithConfig(cfg), model: model}, nil
}

// ID is "openai:" and the model.
func (o *OpenAI) ID() string { return "openai:" + o.model }

// Embed sends all texts in one request.
func (o *OpenAI) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	resp, err := o.client.CreateEmbeddings(ctx, openai.EmbeddingRequest{Input: texts, Model: openai.EmbeddingModel(o.model)})
	if err != nil {
		return nil, fmt.Errorf("openai embeddings: %w", err)
	}
	out := make([][]float32, len(texts))
	for _, d := range resp.Data {
		if d.Index < 0 || d.Index >= len(out) {
			return nil, fmt.Errorf("openai embeddings: index %d out of range", d.Index)
		}
		out[d.Index] = d.Embedding
	}
	for i, v := range out {
		if len(v) == 0 {
			return nil, fmt.Errorf("openai embeddings: no vector for input %d", i)
		}
	}
	return out, nil
}
