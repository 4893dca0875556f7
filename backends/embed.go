package backends

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/ollama/ollama/api"
	openai "github.com/sashabaranov/go-openai"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

var (
	_ cascade.Embedder = (*Ollama)(nil)
	_ cascade.Embedder = (*OpenAI)(nil)
	_ cascade.Embedder = (*LlamaCpp)(nil)
)

// Embed calls Ollama's /api/embed once for all texts.
func (o *Ollama) Embed(ctx context.Context, req cascade.EmbedRequest) (cascade.Embeddings, error) {
	if err := o.checkEmbed(req); err != nil {
		return cascade.Embeddings{}, err
	}
	var resp api.EmbedResponse
	in := api.EmbedRequest{Model: req.Model, Input: req.Input, Dimensions: req.Dimensions}
	if err := o.postJSON(ctx, &o.embed, &in, &resp); err != nil {
		return cascade.Embeddings{}, err
	}
	if len(resp.Embeddings) != len(req.Input) {
		return cascade.Embeddings{}, &cascade.BackendError{Backend: o.name,
			Err: fmt.Errorf("embed: %d vectors for %d texts", len(resp.Embeddings), len(req.Input))}
	}
	return cascade.Embeddings{Vectors: resp.Embeddings, PromptTokens: resp.PromptEvalCount}, nil
}

// Embed calls the OpenAI-compatible POST {URL}/embeddings once for all texts, asking for floats.
// llama-server answers the same shape.
func (o *OpenAI) Embed(ctx context.Context, req cascade.EmbedRequest) (cascade.Embeddings, error) {
	if err := o.checkEmbed(req); err != nil {
		return cascade.Embeddings{}, err
	}
	var resp openai.EmbeddingResponse
	in := openai.EmbeddingRequest{Input: req.Input, Model: openai.EmbeddingModel(req.Model),
		EncodingFormat: openai.EmbeddingEncodingFormatFloat, Dimensions: req.Dimensions}
	if err := o.postJSON(ctx, &o.embed, &in, &resp); err != nil {
		return cascade.Embeddings{}, err
	}
	out := make([][]float32, len(req.Input))
	for _, d := range resp.Data {
		if d.Index < 0 || d.Index >= len(out) {
			return cascade.Embeddings{}, &cascade.BackendError{Backend: o.name, Err: fmt.Errorf("embeddings: index %d out of range", d.Index)}
		}
		out[d.Index] = d.Embedding
	}
	for i, v := range out {
		if len(v) == 0 {
			return cascade.Embeddings{}, &cascade.BackendError{Backend: o.name, Err: fmt.Errorf("embeddings: no vector for input %d", i)}
		}
	}
	return cascade.Embeddings{Vectors: out, PromptTokens: resp.Usage.PromptTokens}, nil
}

// checkEmbed refuses a request no upstream could answer, as the upstream would: a 400.
func (b *base) checkEmbed(req cascade.EmbedRequest) error {
	switch {
	case len(req.Input) == 0:
		return &cascade.UpstreamError{Backend: b.name, Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "input",
			Message: "input: at least one text is required"}
	case req.Dimensions < 0:
		return &cascade.UpstreamError{Backend: b.name, Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "dimensions",
			Message: "dimensions: must be positive"}
	}
	return nil
}

// postJSON POSTs in as JSON to ep and decodes the whole reply into out, with the backend's
// timeout, auth and error mapping.
func (b *base) postJSON(ctx context.Context, ep *endpoint, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return &cascade.BackendError{Backend: b.name, Err: fmt.Errorf("encoding request: %w", err)}
	}
	return b.callJSON(ctx, ep, body, out)
}
