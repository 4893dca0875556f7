package fakes

import (
	"encoding/json"
	"hash/fnv"
	"math"
	"net/http"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// DefaultEmbedDim is the length of the fakes' vectors when the request asks for no dimensions.
const DefaultEmbedDim = 8

// Vector is the fakes' embedding of text: dim values from an FNV hash of the text and each
// index, L2-normalised. The same text always gets the same vector.
func Vector(text string, dim int) []float32 {
	if dim <= 0 {
		dim = DefaultEmbedDim
	}
	v := make([]float32, dim)
	var sum float64
	for i := range v {
		h := fnv.New64a()
		_, _ = h.Write([]byte(text))
		_, _ = h.Write([]byte{0, byte(i), byte(i >> 8)})
		x := float64(h.Sum64()%2001)/1000 - 1 // in [-1, 1]
		v[i] = float32(x)
		sum += x * x
	}
	if n := math.Sqrt(sum); n > 0 {
		for i := range v {
			v[i] = float32(float64(v[i]) / n)
		}
	}
	return v
}

// embedIn is what the fakes read of an embeddings request, in either dialect.
type embedIn struct {
	Model      string          `json:"model"`
	Input      json.RawMessage `json:"input"`
	Dimensions int             `json:"dimensions"`
}

// texts decodes input as a string or a list of strings; ok is false for anything else.
func (in *embedIn) texts() ([]string, bool) {
	var one string
	if json.Unmarshal(in.Input, &one) == nil {
		return []string{one}, true
	}
	var many []string
	if json.Unmarshal(in.Input, &many) == nil {
		return many, true
	}
	return nil, false
}

// beginEmbed records an embeddings call and decodes it; it reports false when the call is over.
func (s *Server) beginEmbed(w http.ResponseWriter, r *http.Request) (embedIn, []string, bool) {
	s.embeds.Add(1)
	body, cfg, err := s.record(r)
	if err != nil {
		return embedIn{}, nil, false
	}
	var in embedIn
	if err := json.Unmarshal(body, &in); err != nil {
		s.writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return embedIn{}, nil, false
	}
	texts, ok := in.texts()
	if !ok {
		s.writeError(w, http.StatusBadRequest, "input must be a string or an array of strings")
		return embedIn{}, nil, false
	}
	if !s.prelude(w, r, &cfg) {
		return embedIn{}, nil, false
	}
	if in.Model == "" {
		in.Model = cfg.Models[0]
	}
	return in, texts, true
}

func promptTokens(texts []string) int {
	n := 0
	for _, t := range texts {
		n += cascade.EstimateTokens(t)
	}
	return n
}

// ollamaEmbed serves /api/embed.
func (s *Server) ollamaEmbed(w http.ResponseWriter, r *http.Request) {
	in, texts, ok := s.beginEmbed(w, r)
	if !ok {
		return
	}
	out := struct {
		Model           string      `json:"model"`
		Embeddings      [][]float32 `json:"embeddings"`
		TotalDuration   int64       `json:"total_duration"`
		PromptEvalCount int         `json:"prompt_eval_count"`
	}{Model: in.Model, Embeddings: make([][]float32, len(texts)), TotalDuration: 1e6, PromptEvalCount: promptTokens(texts)}
	for i, t := range texts {
		out.Embeddings[i] = Vector(t, in.Dimensions)
	}
	writeJSONBody(w, out)
}

// openaiEmbed serves /v1/embeddings (floats only; the backends ask for floats).
func (s *Server) openaiEmbed(w http.ResponseWriter, r *http.Request) {
	in, texts, ok := s.beginEmbed(w, r)
	if !ok {
		return
	}
	type item struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	}
	out := struct {
		Object string         `json:"object"`
		Data   []item         `json:"data"`
		Model  string         `json:"model"`
		Usage  map[string]int `json:"usage"`
	}{Object: "list", Model: in.Model}
	// Listed in reverse, as a server may: the index, not the order, says which input it is.
	for i := len(texts) - 1; i >= 0; i-- {
		out.Data = append(out.Data, item{Object: "embedding", Index: i, Embedding: Vector(texts[i], in.Dimensions)})
	}
	n := promptTokens(texts)
	out.Usage = map[string]int{"prompt_tokens": n, "total_tokens": n}
	writeJSONBody(w, out)
}

func writeJSONBody(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
