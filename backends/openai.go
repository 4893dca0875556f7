package backends

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

var (
	_ cascade.Backend     = (*OpenAI)(nil)
	_ cascade.ModelLister = (*OpenAI)(nil)
	_ cascade.Pinger      = (*OpenAI)(nil)
)

func init() {
	register("openai", func(o Options) (cascade.Backend, error) { return NewOpenAI(o) })
}

// OpenAI talks to an OpenAI-compatible Chat Completions API. It forwards the client's own body,
// so fields it does not know survive, and only sets stream and stream_options.include_usage.
// It is safe for concurrent use.
type OpenAI struct {
	base
	chat   endpoint
	models endpoint
	embed  endpoint
	// timings keeps llama-server's timings object (set by LlamaCpp).
	timings bool
}

// NewOpenAI returns an OpenAI backend; o.URL is the base URL with /v1.
func NewOpenAI(o Options) (*OpenAI, error) {
	b, err := newBase(o)
	if err != nil {
		return nil, err
	}
	return &OpenAI{base: b, chat: b.endpoint(http.MethodPost, b.url+"/chat/completions", hdrSSE),
		models: b.endpoint(http.MethodGet, b.url+"/models", nil), embed: b.endpoint(http.MethodPost, b.url+"/embeddings", nil)}, nil
}

// llamaTimings is llama-server's timings object (result_timings::to_json in tools/server).
type llamaTimings struct {
	CacheN      int     `json:"cache_n"`
	PromptN     int     `json:"prompt_n"`
	PromptMS    float64 `json:"prompt_ms"`
	PredictedN  int     `json:"predicted_n"`
	PredictedMS float64 `json:"predicted_ms"`
}

func (t *llamaTimings) timings() *cascade.Timings {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	return &cascade.Timings{
		PromptN:    t.PromptN,
		PredictedN: t.PredictedN,
		CacheN:     t.CacheN,
		PromptEval: ms(t.PromptMS),
		Eval:       ms(t.PredictedMS),
		Total:      ms(t.PromptMS + t.PredictedMS),
	}
}

// wireAnswer is a whole completion as it arrives.
type wireAnswer struct {
	cascade.Answer
	Timings *llamaTimings `json:"timings"`
}

// wireChunk is one stream event as it arrives: a chunk, llama.cpp's timings, or an error.
type wireChunk struct {
	cascade.Chunk
	Timings *llamaTimings   `json:"timings"`
	Error   json.RawMessage `json:"error"`
}

// Chat sends the request upstream; see cascade.Backend. With a sink it streams, pushing every
// chunk (the usage chunk included, split off when the upstream attaches usage to a choice
// chunk) and returning the assembled answer. On an error mid-stream the partial answer, not
// Complete, comes back beside the error.
func (o *OpenAI) Chat(ctx context.Context, req *cascade.Request, sink cascade.Sink) (*cascade.Answer, error) {
	raw := []byte(req.Raw)
	if len(raw) == 0 {
		var err error
		if raw, err = json.Marshal(&req.Chat); err != nil {
			return nil, &cascade.BackendError{Backend: o.name, Err: fmt.Errorf("encoding request: %w", err)}
		}
	}
	body, err := setStream(raw, sink != nil)
	if err != nil {
		return nil, &cascade.UpstreamError{Backend: o.name, Status: http.StatusBadRequest, Type: "invalid_request_error", Message: err.Error()}
	}
	ctx, c := o.attempt(ctx)
	defer c.stop()
	resp, err := o.do(ctx, c, &o.chat, body, sink != nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	n := 0
	if req.Chat.N != nil {
		n = *req.Chat.N
	}
	if sink == nil {
		return o.whole(ctx, resp, n)
	}
	if isJSON(resp.Header.Get("Content-Type")) {
		// The upstream answered whole although asked to stream: replay it.
		ans, err := o.whole(ctx, resp, n)
		if err != nil {
			return ans, err
		}
		if err := cascade.Replay(ans, *ans.Usage != (cascade.Usage{}), sink); err != nil {
			return ans, err
		}
		ans.Streamed = true
		return ans, nil
	}
	return o.stream(ctx, c.stop, resp.Body, req.Chat.N, req.RecordBytes, sink)
}

func isJSON(ct string) bool {
	return len(ct) >= len("application/json") && strings.EqualFold(ct[:len("application/json")], "application/json")
}

// whole reads a non-stream completion for a request that asked for n choices. An answer that
// breaks the bounds a stream's chunks are held to (cascade.CheckAnswer) is a backend error, as
// it is streamed.
func (o *OpenAI) whole(ctx context.Context, resp *http.Response, n int) (*cascade.Answer, error) {
	buf, err := readBody(resp.Body, resp.ContentLength)
	defer putBuf(buf)
	if err != nil {
		return nil, o.transportError(ctx, fmt.Errorf("reading response: %w", err))
	}
	var w wireAnswer
	if err := decodeAnswer(buf.Bytes(), &w); err != nil {
		return nil, &cascade.BackendError{Backend: o.name, Err: fmt.Errorf("decoding response: %w", err)}
	}
	ans := &w.Answer
	if err := cascade.CheckAnswer(ans, n); err != nil {
		return nil, &cascade.BackendError{Backend: o.name, Err: err}
	}
	ans.Backend = o.name
	if ans.Usage == nil {
		ans.Usage = &cascade.Usage{}
	}
	if o.timings && w.Timings != nil {
		ans.Timings = w.Timings.timings()
	}
	ans.Complete = complete(ans)
	return ans, nil
}

// stream reads SSE until [DONE], pushing each chunk to sink.
func (o *OpenAI) stream(ctx context.Context, cancel context.CancelFunc, body io.Reader, n *int, maxBytes int, sink cascade.Sink) (*cascade.Answer, error) {
	sr := newSSEReader(body)
	defer sr.release()
	asm := cascade.Assembler{MaxBytes: maxBytes}
	if n != nil {
		asm.Choices = *n
	}
	var timings *llamaTimings
	finish := func(done bool) *cascade.Answer {
		ans := asm.Answer()
		ans.Backend = o.name
		if ans.Usage == nil {
			ans.Usage = &cascade.Usage{}
		}
		if o.timings && timings != nil {
			ans.Timings = timings.timings()
		}
		ans.Complete = ans.Complete && done
		return ans
	}
	emit := func(ch *cascade.Chunk) error {
		if asm.Add(ch); asm.Err() != nil {
			cancel() // the upstream broke the request's bounds: stop it now
			return &cascade.BackendError{Backend: o.name, Err: asm.Err()}
		}
		if err := sink(ch); err != nil {
			cancel() // the client went away: stop the upstream now
			return err
		}
		return nil
	}
	for {
		ev, err := sr.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the stream ended without [DONE]
			}
			return finish(false), o.transportError(ctx, fmt.Errorf("reading stream: %w", err))
		}
		if ev.Err {
			return finish(false), o.midStreamError(ev.Data)
		}
		data := bytes.TrimSpace(ev.Data)
		if len(data) == 0 {
			continue
		}
		if isDone(data) {
			break
		}
		w := new(wireChunk)
		if err := decodeAnswer(data, w); err != nil {
			return finish(false), &cascade.BackendError{Backend: o.name, Err: fmt.Errorf("decoding stream chunk: %w", err)}
		}
		if len(w.Error) > 0 && string(w.Error) != "null" {
			return finish(false), o.midStreamError(data)
		}
		if w.Timings != nil {
			timings = w.Timings
		}
		ch := &w.Chunk
		if ch.Usage != nil && len(ch.Choices) > 0 {
			// Usage rides on a choice chunk: send it on as its own usage chunk, as OpenAI does.
			u := &cascade.Chunk{ID: ch.ID, Object: ch.Object, Created: ch.Created, Model: ch.Model,
				SystemFingerprint: ch.SystemFingerprint, Choices: []cascade.ChunkChoice{}, Usage: ch.Usage}
			ch.Usage = nil
			if err := emit(ch); err != nil {
				return finish(false), err
			}
			ch = u
		}
		if err := emit(ch); err != nil {
			return finish(false), err
		}
	}
	drain(sr.lines.br, cancel)
	return finish(true), nil
}

// Models lists the upstream's models (GET {URL}/models).
func (o *OpenAI) Models(ctx context.Context) ([]string, error) {
	var list openai.ModelsList
	if err := o.getJSON(ctx, &o.models, &list); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(list.Models))
	for _, m := range list.Models {
		out = append(out, m.ID)
	}
	return out, nil
}

// Ping checks that the upstream answers GET {URL}/models.
func (o *OpenAI) Ping(ctx context.Context) error {
	return o.getJSON(ctx, &o.models, nil)
}
