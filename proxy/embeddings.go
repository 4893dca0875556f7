package proxy

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/telemetry/genai"
)

// maxEmbedInputs is OpenAI's limit on the texts of one embeddings call.
const maxEmbedInputs = 2048

// embeddingsRequest holds the fields of OpenAI's embeddings request that the proxy reads; user
// and unknown fields are ignored (they do not change the vectors).
type embeddingsRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

// embeddings serves POST /v1/embeddings: routed, admitted, metered, cached and recorded like a
// chat completion, with the same headers.
func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	lf := fields(r.Context())
	call, base64Out, apiErr := s.decodeEmbeddings(w, r)
	if apiErr != nil {
		s.refuse(w, openAIErrors{}, lf, apiErr)
		return
	}
	call.Tenant = lf.tenant
	ctx, bound := withRequestTimeout(r.Context(), s.opts.RequestTimeout, false)
	defer bound.end()
	resv, ok := s.admit(ctx, w, openAIErrors{}, lf, call.Req.Model)
	if !ok {
		return
	}
	s.metrics.callIn()
	defer s.metrics.callOut()
	var res cascade.EmbedResult
	err := s.guard(call.ID, func() error { return s.cascade.Embed(ctx, call, &res) })
	c := newCall(call.ID, call.Tenant, call.Key(), call.Req.Model, start, s.span(ctx))
	c.op = genai.Embeddings
	if e := res.Embeddings; e != nil {
		c.answer(res.Stage, res.Attempts, true, e.Energy, e.Backend, e.Attempts, res.Settle)
		c.promptTokens = e.PromptTokens // the call span's input tokens, as a chat call's
	} else {
		c.answer(res.Stage, res.Attempts, false, energy.Figure{}, "", nil, res.Settle)
	}
	// The body is rendered before the call is settled, so the record holds the status the
	// client gets, also when the vectors cannot be encoded.
	var body []byte
	if err == nil {
		body, err = embeddingsBody(call.Req.Model, res.Embeddings, base64Out)
	}
	s.settle(c, resv, err, lf)
	defer s.report(c)
	setBackendHeaders(w.Header(), c.Backend, c.Attempts, nil)
	if err != nil {
		setEnergyHeaders(w.Header(), c)
		writeError(w, c.err)
	} else {
		writeOK(w, c, body, nil)
	}
	flush(w)
}

// decodeEmbeddings reads and validates the body; every failure names the field.
func (s *Server) decodeEmbeddings(w http.ResponseWriter, r *http.Request) (*cascade.EmbedCall, bool, *APIError) {
	body, e := s.readJSON(w, r)
	if e != nil {
		return nil, false, e
	}
	if e := scanBody(body, scanEmbeddings); e != nil {
		return nil, false, e
	}
	var in embeddingsRequest
	if e := unmarshal(body, &in); e != nil {
		return nil, false, e
	}
	if in.Model == "" {
		return nil, false, badRequest("model", "model: required")
	}
	texts, e := embedInput(in.Input)
	if e != nil {
		return nil, false, e
	}
	var base64Out bool
	switch in.EncodingFormat {
	case "", "float":
	case "base64":
		base64Out = true
	default:
		return nil, false, badRequest("encoding_format", "encoding_format: %q is not one of float, base64", in.EncodingFormat)
	}
	call := &cascade.EmbedCall{Req: cascade.EmbedRequest{Model: in.Model, Input: texts}, ID: RequestID(r.Context()), Tracer: s.stages}
	if in.Dimensions != nil {
		if *in.Dimensions < 1 {
			return nil, false, badRequest("dimensions", "dimensions: must be at least 1")
		}
		call.Req.Dimensions = *in.Dimensions
	}
	call.NoCache, call.NoStore = cacheControl(r)
	return call, base64Out, nil
}

// embedInput decodes input: a string or an array of strings, none empty. Token arrays, which
// OpenAI also takes, are refused: a proxy in front of several models cannot know their tokenizer.
func embedInput(raw json.RawMessage) ([]string, *APIError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("input", "input: required")
	}
	var texts []string
	switch raw[0] {
	case '"':
		var one string
		if err := json.Unmarshal(raw, &one); err != nil {
			return nil, badRequest("input", "input: %v", err)
		}
		texts = []string{one}
	case '[':
		if err := json.Unmarshal(raw, &texts); err != nil {
			return nil, badRequest("input", "input: must be a string or an array of strings; token arrays are not supported")
		}
		if len(texts) == 0 {
			return nil, badRequest("input", "input: at least one text is required")
		}
		if len(texts) > maxEmbedInputs {
			return nil, badRequest("input", "input: %d texts, at most %d are allowed", len(texts), maxEmbedInputs)
		}
	default:
		return nil, badRequest("input", "input: must be a string or an array of strings")
	}
	for i, t := range texts {
		if t == "" {
			if len(texts) == 1 {
				return nil, badRequest("input", "input: must not be empty")
			}
			return nil, badRequest("input", "input[%d]: must not be empty", i)
		}
	}
	return texts, nil
}

// embeddingItem is one vector of the response; Embedding is []float32 or a base64 string.
type embeddingItem struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

type embeddingsUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

type embeddingsResponse struct {
	Object string          `json:"object"`
	Data   []embeddingItem `json:"data"`
	Model  string          `json:"model"`
	Usage  embeddingsUsage `json:"usage"`
}

// embeddingsBody renders vectors in OpenAI's shape; base64 is the little-endian float32 bytes.
func embeddingsBody(model string, e *cascade.Embeddings, base64Out bool) ([]byte, error) {
	out := embeddingsResponse{Object: "list", Model: model, Data: make([]embeddingItem, len(e.Vectors)),
		Usage: embeddingsUsage{PromptTokens: e.PromptTokens, TotalTokens: e.PromptTokens}}
	for i, v := range e.Vectors {
		out.Data[i] = embeddingItem{Object: "embedding", Index: i, Embedding: v}
		if base64Out {
			b := make([]byte, 4*len(v))
			for j, x := range v {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(x))
			}
			out.Data[i].Embedding = base64.StdEncoding.EncodeToString(b)
		}
	}
	return json.Marshal(out)
}
