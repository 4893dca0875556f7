package cascade

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// EmbedRequest is one embeddings call as a backend sees it: texts to turn into vectors with one
// model.
type EmbedRequest struct {
	Model string
	Input []string
	// Dimensions asks for vectors of this length where the model can shorten them; 0 is the
	// model's own length.
	Dimensions int
}

// Embeddings is what an embeddings call returned: one vector per input, in order. A cached
// Embeddings is shared between readers and must not be mutated after it is stored.
type Embeddings struct {
	Vectors      [][]float32
	PromptTokens int

	// Backend names the backend that made the vectors ("" for cheap stages).
	Backend string
	// Energy is what making them cost.
	Energy energy.Figure
	// Settle is Answer.Settle's counterpart: how to get Energy's final figure, nil when it is
	// final. The walk moves it to EmbedResult.Settle.
	Settle SettleFunc
	// Attempts are the backend calls made for them, in order, the answering one last; nil for
	// the cheap stages.
	Attempts []BackendAttempt
}

// Embedder is a Backend that can embed texts (Ollama's /api/embed, OpenAI's /v1/embeddings).
// Callers check for it by type assertion, like ModelLister. Backends fill Vectors and
// PromptTokens.
type Embedder interface {
	Embed(ctx context.Context, req EmbedRequest) (Embeddings, error)
}

// ErrNoEmbeddings means the backend a model routes to cannot embed.
var ErrNoEmbeddings = errors.New("backend does not serve embeddings")

// EmbedCall is one embeddings call as the cascade sees it. It is not safe for concurrent
// mutation.
type EmbedCall struct {
	// Tenant isolates cached vectors ("" when auth is off).
	Tenant string
	Req    EmbedRequest
	// NoCache skips the cache lookup; NoStore forbids storing (Cache-Control).
	NoCache, NoStore bool
	// ID is the request id, for logs.
	ID string
	// Tracer is Request.Tracer's counterpart: nil traces nothing.
	Tracer Tracer

	key string
}

// embedKeyPrefix keeps embedding keys apart from chat keys in a shared cache.
const embedKeyPrefix = "eoc-embed-key-v1\x00"

// Key is the hex SHA-256 over the tenant, the model, the dimensions and the texts: everything
// that changes the vectors. The encoding the client asked for does not: float and base64 share
// an entry.
func (c *EmbedCall) Key() string {
	if c.key == "" {
		h := sha256.New()
		b := append([]byte(embedKeyPrefix), strconv.Itoa(len(c.Tenant))...)
		b = append(append(b, ':'), c.Tenant...)
		body, _ := json.Marshal(struct {
			Model      string   `json:"model"`
			Input      []string `json:"input"`
			Dimensions int      `json:"dimensions"`
		}{c.Req.Model, c.Req.Input, c.Req.Dimensions})
		h.Write(b)
		h.Write(body)
		c.key = hex.EncodeToString(h.Sum(nil))
	}
	return c.key
}

// EmbedStage is a Stage that can answer embeddings calls too (the cache, the neural stage).
// ServeEmbed returns ErrMiss to pass.
type EmbedStage interface {
	ServeEmbed(ctx context.Context, call *EmbedCall) (*Embeddings, error)
}

// EmbedLearner is a stage that remembers vectors produced by later stages. It must not block and
// must not mutate e.
type EmbedLearner interface {
	LearnEmbed(call *EmbedCall, e *Embeddings)
}

// EmbedResult is the outcome of an embeddings walk.
type EmbedResult struct {
	Embeddings *Embeddings
	Stage      string
	Attempts   []Attempt
	// Settle is how to get Embeddings.Energy's final figure, nil when it is final.
	Settle SettleFunc
}

// Embed walks an embeddings call through the stages that can answer one (EmbedStage), like Walk:
// the first answer wins, and the stages before it that learn (EmbedLearner) remember it. A
// failing stage is skipped with a warning unless it is the last or ctx is done.
func (c *Cascade) Embed(ctx context.Context, call *EmbedCall, res *EmbedResult) error {
	if err := c.router.Known(call.Req.Model); err != nil {
		return err
	}
	call.Key()
	var stages []Stage
	for _, st := range c.stages {
		if _, ok := st.(EmbedStage); ok {
			stages = append(stages, st)
		}
	}
	for i, st := range stages {
		res.Stage = st.Name()
		start := time.Now()
		sctx, span := StartSpan(ctx, call.Tracer, SpanStage, st.Name())
		e, err := st.(EmbedStage).ServeEmbed(sctx, call)
		took := time.Since(start)
		res.Attempts = append(res.Attempts, Attempt{Stage: st.Name(), Duration: took, Err: err})
		if errors.Is(err, ErrMiss) {
			span.endStage(call.Req.Model, nil, err)
			continue
		}
		if e != nil && e.Energy.IsZero() {
			e.Energy = c.stageEstimate(took, e.Energy, nil)
		}
		if e != nil {
			span.End(SpanResult{Model: call.Req.Model, Backend: e.Backend, Outcome: stageOutcome(err), Err: err, Energy: e.Energy})
		} else {
			span.endStage(call.Req.Model, nil, err)
		}
		if err != nil {
			if i == len(stages)-1 || ctx.Err() != nil {
				res.Embeddings = e
				if e != nil {
					res.Settle, e.Settle = e.Settle, nil
				}
				return err
			}
			c.opts.Logger.Warn().Str("request_id", call.ID).Str("stage", st.Name()).Err(err).Msg("stage failed; skipped")
			continue
		}
		res.Embeddings = e
		res.Settle, e.Settle = e.Settle, nil
		if !call.NoStore {
			for _, prev := range stages[:i] {
				if l, ok := prev.(EmbedLearner); ok {
					l.LearnEmbed(call, e)
				}
			}
		}
		return nil
	}
	res.Stage = ""
	return ErrMiss
}
