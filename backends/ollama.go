package backends

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

var (
	_ cascade.Backend     = (*Ollama)(nil)
	_ cascade.ModelLister = (*Ollama)(nil)
	_ cascade.Pinger      = (*Ollama)(nil)
)

func init() {
	register("ollama", func(o Options) (cascade.Backend, error) { return NewOllama(o) })
}

// Ollama talks to Ollama's native API (/api/chat, /api/embed, /api/tags, /api/version), mapping OpenAI's
// request and answer shapes both ways and keeping Ollama's counts and durations in
// Answer.Timings. It is safe for concurrent use.
//
// It speaks the wire format with the types of github.com/ollama/ollama/api but not through
// api.Client: Client.Chat allocates an 8 MiB line buffer per call, drops read errors (a cut
// stream looks finished), and signs requests to ollama.com with a local key instead of sending
// the configured API key.
type Ollama struct {
	base
	chat    endpoint
	tags    endpoint
	version endpoint
	embed   endpoint
}

// NewOllama returns an Ollama backend; o.URL is Ollama's root (http://127.0.0.1:11434).
func NewOllama(o Options) (*Ollama, error) {
	b, err := newBase(o)
	if err != nil {
		return nil, err
	}
	return &Ollama{base: b, chat: b.endpoint(http.MethodPost, b.url+"/api/chat", hdrNDJSON),
		tags: b.endpoint(http.MethodGet, b.url+"/api/tags", nil), version: b.endpoint(http.MethodGet, b.url+"/api/version", nil),
		embed: b.endpoint(http.MethodPost, b.url+"/api/embed", nil)}, nil
}

// ollamaLine is one line of /api/chat: a response, or an error. It holds only the fields the
// conversion uses, in api.ChatResponse's wire shapes; fields it does not read are skipped, not
// type-checked. It is not api.ChatResponse itself, whose api.Message.UnmarshalJSON decodes the
// message a second time (BenchmarkOllamaDecode compares the two).
type ollamaLine struct {
	Model      string        `json:"model"`
	CreatedAt  time.Time     `json:"created_at"`
	Message    ollamaMessage `json:"message"`
	Done       bool          `json:"done"`
	DoneReason string        `json:"done_reason"`
	Logprobs   []api.Logprob `json:"logprobs"`
	api.Metrics
	Error string `json:"error"`
}

// ollamaMessage is the part of api.Message an answer uses.
type ollamaMessage struct {
	Content   string         `json:"content"`
	Thinking  string         `json:"thinking"`
	ToolCalls []api.ToolCall `json:"tool_calls"`
}

// Chat maps the request onto /api/chat; see cascade.Backend. With a sink it streams: the first
// chunk carries the assistant role, all chunks share one chatcmpl- id, the last carries the
// finish reason and is followed by a usage chunk. On an error mid-stream the partial answer, not
// Complete, comes back beside the error.
func (o *Ollama) Chat(ctx context.Context, req *cascade.Request, sink cascade.Sink) (*cascade.Answer, error) {
	oreq, err := toOllama(req)
	if err != nil {
		var ir *invalidRequest
		if errors.As(err, &ir) {
			return nil, &cascade.UpstreamError{Backend: o.name, Status: http.StatusBadRequest, Type: "invalid_request_error", Param: ir.param, Message: ir.msg}
		}
		return nil, &cascade.BackendError{Backend: o.name, Err: err}
	}
	stream := sink != nil
	oreq.Stream = &stream
	body, err := json.Marshal(oreq)
	if err != nil {
		return nil, &cascade.BackendError{Backend: o.name, Err: fmt.Errorf("encoding request: %w", err)}
	}
	ctx, c := o.attempt(ctx)
	defer c.stop()
	resp, err := o.do(ctx, c, &o.chat, body, stream)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	conv := &ollamaConv{backend: o.name, id: newID("chatcmpl-"), model: req.Chat.Model, asm: cascade.Assembler{MaxBytes: req.RecordBytes}}
	if !stream {
		return o.whole(ctx, resp, conv)
	}
	return o.stream(ctx, c.stop, resp.Body, conv, sink)
}

func (o *Ollama) whole(ctx context.Context, resp *http.Response, conv *ollamaConv) (*cascade.Answer, error) {
	buf, err := readBody(resp.Body, resp.ContentLength)
	defer putBuf(buf)
	if err != nil {
		return nil, o.transportError(ctx, fmt.Errorf("reading response: %w", err))
	}
	line := linePool.Get().(*ollamaLine)
	defer putLine(line)
	if err := decodeAnswer(buf.Bytes(), line); err != nil {
		return nil, &cascade.BackendError{Backend: o.name, Err: fmt.Errorf("decoding response: %w", err)}
	}
	if line.Error != "" {
		return nil, o.midStreamError(buf.Bytes())
	}
	return conv.answer(line), nil
}

// linePool holds the lines whole answers are decoded into: the answer keeps none of a line's
// memory but its strings, which the decoder allocates apart.
var linePool = sync.Pool{New: func() any { return new(ollamaLine) }}

func putLine(l *ollamaLine) {
	*l = ollamaLine{}
	linePool.Put(l)
}

func (o *Ollama) stream(ctx context.Context, cancel context.CancelFunc, body io.Reader, conv *ollamaConv, sink cascade.Sink) (*cascade.Answer, error) {
	lr := newLineReader(body)
	defer lr.release()
	emit := func(ch *cascade.Chunk) error {
		if conv.asm.Add(ch); conv.asm.Err() != nil {
			cancel() // the upstream broke the request's bounds: stop it now
			return &cascade.BackendError{Backend: o.name, Err: conv.asm.Err()}
		}
		if err := sink(ch); err != nil {
			cancel() // the client went away: stop the upstream now
			return err
		}
		return nil
	}
	var line ollamaLine // one for all lines: it escapes to the heap, and nothing keeps it
	for {
		raw, err := lr.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the stream ended before done
			}
			return conv.final(false), o.transportError(ctx, fmt.Errorf("reading stream: %w", err))
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		line = ollamaLine{}
		if err := decodeAnswer(raw, &line); err != nil {
			return conv.final(false), &cascade.BackendError{Backend: o.name, Err: fmt.Errorf("decoding stream line: %w", err)}
		}
		if line.Error != "" {
			return conv.final(false), o.midStreamError(raw)
		}
		delta, usage := conv.chunks(&line)
		if delta != nil {
			if err := emit(delta); err != nil {
				return conv.final(false), err
			}
		}
		if usage != nil {
			if err := emit(usage); err != nil {
				return conv.final(false), err
			}
		}
		if line.Done {
			break
		}
	}
	drain(lr.br, cancel)
	return conv.final(true), nil
}

// Models lists the local models (GET /api/tags).
func (o *Ollama) Models(ctx context.Context) ([]string, error) {
	var list api.ListResponse
	if err := o.getJSON(ctx, &o.tags, &list); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(list.Models))
	for _, m := range list.Models {
		name := m.Name
		if name == "" {
			name = m.Model
		}
		out = append(out, name)
	}
	return out, nil
}

// Ping checks that Ollama answers GET /api/version.
func (o *Ollama) Ping(ctx context.Context) error {
	var v struct {
		Version string `json:"version"`
	}
	return o.getJSON(ctx, &o.version, &v)
}

// ollamaConv turns Ollama's responses into OpenAI's answer and chunks. It is not safe for
// concurrent use.
type ollamaConv struct {
	backend string
	id      string
	model   string
	created int64
	started bool // the role chunk went out
	ntools  int  // tool calls so far, for stream indexes
	asm     cascade.Assembler
	usage   *cascade.Usage
	timings *cascade.Timings
}

func (c *ollamaConv) meta(r *ollamaLine) {
	if r.Model != "" {
		c.model = r.Model
	}
	if c.created == 0 {
		if r.CreatedAt.IsZero() {
			c.created = time.Now().Unix()
		} else {
			c.created = r.CreatedAt.Unix()
		}
	}
	if r.Done {
		m := &r.Metrics
		if c.usage == nil {
			f := new(figures)
			c.usage, c.timings = &f.usage, &f.timings
		}
		*c.usage = cascade.Usage{PromptTokens: m.PromptEvalCount, CompletionTokens: m.EvalCount, TotalTokens: m.PromptEvalCount + m.EvalCount}
		*c.timings = cascade.Timings{
			PromptN:    m.PromptEvalCount,
			PredictedN: m.EvalCount,
			Load:       m.LoadDuration,
			PromptEval: m.PromptEvalDuration,
			Eval:       m.EvalDuration,
			Total:      m.TotalDuration,
		}
	}
}

// figures are a stream's usage and timings, allocated together.
type figures struct {
	usage   cascade.Usage
	timings cascade.Timings
}

// wholeAnswer is what a whole answer is made of, allocated together.
type wholeAnswer struct {
	ans     cascade.Answer
	choice  [1]cascade.Choice
	usage   cascade.Usage
	timings cascade.Timings
	content string
}

// answer maps a whole (non-stream) response.
func (c *ollamaConv) answer(r *ollamaLine) *cascade.Answer {
	w := new(wholeAnswer)
	if r.Done {
		c.usage, c.timings = &w.usage, &w.timings
	}
	c.meta(r)
	calls := toolCallsOut(r.Message.ToolCalls, 0, false)
	msg := cascade.AnswerMessage{Role: "assistant", ReasoningContent: r.Message.Thinking, ToolCalls: calls}
	if r.Message.Content != "" || len(calls) == 0 {
		w.content = r.Message.Content
		msg.Content = &w.content
	}
	var reason string
	if r.Done {
		reason = finishReason(r.DoneReason, len(calls) > 0)
	}
	w.choice[0] = cascade.Choice{Index: 0, Message: msg, FinishReason: reason, Logprobs: logprobs(r.Logprobs)}
	w.ans = cascade.Answer{
		ID: c.id, Model: c.model, Created: c.created, Backend: c.backend,
		Choices:  w.choice[:],
		Usage:    c.usage,
		Timings:  c.timings,
		Complete: r.Done && reason != "",
	}
	if w.ans.Usage == nil {
		w.ans.Usage = &w.usage
	}
	return &w.ans
}

// streamChunk is what one line's chunks are made of, allocated together.
type streamChunk struct {
	delta   cascade.Chunk
	choice  [1]cascade.ChunkChoice
	content string
	reason  string
}

// chunks maps one streamed response to a delta chunk (nil when it carries nothing) and, on the
// last response, the usage chunk.
func (c *ollamaConv) chunks(r *ollamaLine) (delta, usage *cascade.Chunk) {
	c.meta(r)
	lp := logprobs(r.Logprobs)
	m := &r.Message
	if c.started && m.Content == "" && m.Thinking == "" && len(m.ToolCalls) == 0 && !r.Done && lp == nil {
		return nil, nil
	}
	sc := new(streamChunk)
	d := cascade.Delta{ReasoningContent: m.Thinking}
	if !c.started {
		d.Role = "assistant"
		c.started = true
	}
	if m.Content != "" {
		sc.content = m.Content
		d.Content = &sc.content
	}
	if n := len(m.ToolCalls); n > 0 {
		d.ToolCalls = toolCallsOut(m.ToolCalls, c.ntools, true)
		c.ntools += n
	}
	var fin *string
	if r.Done {
		sc.reason = finishReason(r.DoneReason, c.ntools > 0)
		fin = &sc.reason
	}
	sc.choice[0] = cascade.ChunkChoice{Index: 0, Delta: d, FinishReason: fin, Logprobs: lp}
	delta = c.chunk(&sc.delta, sc.choice[:])
	if r.Done {
		usage = c.chunk(new(cascade.Chunk), []cascade.ChunkChoice{})
		usage.Usage = c.usage
	}
	return delta, usage
}

func (c *ollamaConv) chunk(ch *cascade.Chunk, choices []cascade.ChunkChoice) *cascade.Chunk {
	*ch = cascade.Chunk{ID: c.id, Object: "chat.completion.chunk", Created: c.created, Model: c.model, Choices: choices}
	return ch
}

// final is the answer assembled from the chunks sent; done says the stream ended properly.
func (c *ollamaConv) final(done bool) *cascade.Answer {
	ans := c.asm.Answer()
	if ans.ID == "" {
		ans.ID, ans.Model, ans.Created = c.id, c.model, c.created
	}
	ans.Backend = c.backend
	ans.Timings = c.timings
	if ans.Usage == nil {
		ans.Usage = &cascade.Usage{}
	}
	ans.Complete = ans.Complete && done
	return ans
}

// finishReason maps Ollama's done_reason; a reply that called tools finishes with "tool_calls".
func finishReason(doneReason string, calledTools bool) string {
	switch {
	case calledTools:
		return "tool_calls"
	case doneReason == "":
		return "stop"
	}
	return doneReason // "stop", "length"
}

// toolCallsOut maps Ollama's tool calls (arguments as an object) to OpenAI's (arguments as a
// JSON string), generating call_ ids where Ollama gave none. Stream deltas carry an index.
func toolCallsOut(in []api.ToolCall, first int, indexed bool) []cascade.ToolCall {
	if len(in) == 0 {
		return nil
	}
	out := make([]cascade.ToolCall, len(in))
	for i, tc := range in {
		id := tc.ID
		if id == "" {
			id = newID("call_")
		}
		args, err := json.Marshal(tc.Function.Arguments)
		if err != nil {
			args = []byte("{}")
		}
		out[i] = cascade.ToolCall{ID: id, Type: "function", Function: cascade.ToolCallFunction{Name: tc.Function.Name, Arguments: string(args)}}
		if indexed {
			idx := first + i
			out[i].Index = &idx
		}
	}
	return out
}

// logprobs renders Ollama's logprobs as OpenAI's {"content": [...]}; the token fields match.
func logprobs(lp []api.Logprob) json.RawMessage {
	if len(lp) == 0 {
		return nil
	}
	b, err := json.Marshal(struct {
		Content []api.Logprob `json:"content"`
	}{lp})
	if err != nil {
		return nil
	}
	return b
}
