package cascade

import "context"

// EmbedRequest is one embeddings call: texts to turn into vectors with one model.
type EmbedRequest struct {
	Model string
	Input []string
	// Dimensions asks for vectors of this length where the model can shorten them; 0 is the
	// model's own length.
	Dimensions int
}

// Embeddings is what an embeddings call returned: one vector per input, in order.
type Embeddings struct {
	Vectors      [][]float32
	PromptTokens int
}

// Embedder is a Backend that can embed texts (Ollama's /api/embed, OpenAI's /v1/embeddings).
// Callers check for it by type assertion, like ModelLister.
type Embedder interface {
	Embed(ctx context.Context, req EmbedRequest) (Embeddings, error)
}
