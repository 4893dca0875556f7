// Package cascade holds a call's vocabulary (Request, Answer, Chunk, Stage, Backend, one Failure per error) and walks a chat or embeddings request through the configured stages, cheapest first, attributing what the answer cost.
package cascade

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// Request is one chat completion call as the cascade sees it. The proxy fills it; stages read it.
// A Request is not safe for concurrent mutation. Chat and Raw are read-only: calls whose bodies
// are the same bytes may share what Chat's slices and pointers hold.
type Request struct {
	// Tenant isolates cache and kv entries ("" when auth is off).
	Tenant string
	// Chat is the parsed view of the known fields.
	Chat ChatRequest
	// Raw is the client's body as received, so unknown fields reach OpenAI-compatible upstreams.
	Raw json.RawMessage
	// NoCache skips lookups in memoizing stages but still lets them store (Cache-Control: no-cache).
	NoCache bool
	// NoStore forbids storing the answer (Cache-Control: no-store).
	NoStore bool
	// mayOwn: the stage being tried may take the walk's own answer (NewAnswer). Here, it takes
	// the padding after NoStore.
	mayOwn bool
	// ID is the request id, for logs.
	ID string
	// RecordBytes bounds the text a streaming backend records of the answer it streams, for the
	// learners (Assembler.MaxBytes): past it the answer is served but not recorded, and comes
	// back Oversize. The walk sets it from its learners' bounds; 0 records everything.
	RecordBytes int
	// Tracer, when set, opens a span for each stage the walk tries and each backend attempt a
	// stage makes (StartSpan); nil traces nothing.
	Tracer Tracer

	key      string
	backends BackendSink // the walk's sink, when it wants each backend attempt (Announce)
	own      *ownAnswer  // the answer NewAnswer handed out in the walk, if it did
}

// NewAnswer returns a zero Answer for a stage to fill and return from Serve. The first call in a
// walk of a stage whose answer no learner takes (one before every Learner, as the exact cache)
// gets one allocated with room for the inputs of the walk's estimate of its figure, so that the
// two take one allocation; any other call gets a plain one.
func (r *Request) NewAnswer() *Answer {
	if !r.mayOwn {
		return new(Answer)
	}
	r.mayOwn = false
	r.own = new(ownAnswer)
	return &r.own.ans
}

// Stream reports whether the client asked for a stream.
func (r *Request) Stream() bool { return r.Chat.Stream }

// IncludeUsage reports whether the client asked for the usage chunk on a stream.
func (r *Request) IncludeUsage() bool {
	return r.Chat.StreamOptions != nil && r.Chat.StreamOptions.IncludeUsage
}

// ChatRequest holds the fields of OpenAI's Chat Completions request that the proxy reads.
// Polymorphic fields stay raw. Fields not listed here survive in Request.Raw.
type ChatRequest struct {
	Model               string          `json:"model"`
	Messages            []Message       `json:"messages"`
	Stream              bool            `json:"stream,omitempty"`
	StreamOptions       *StreamOptions  `json:"stream_options,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`
	TopP                *float64        `json:"top_p,omitempty"`
	N                   *int            `json:"n,omitempty"`
	MaxTokens           *int            `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int            `json:"max_completion_tokens,omitempty"`
	Stop                json.RawMessage `json:"stop,omitempty"` // string or []string
	Seed                *int64          `json:"seed,omitempty"`
	PresencePenalty     *float64        `json:"presence_penalty,omitempty"`
	FrequencyPenalty    *float64        `json:"frequency_penalty,omitempty"`
	Logprobs            *bool           `json:"logprobs,omitempty"`
	TopLogprobs         *int            `json:"top_logprobs,omitempty"`
	Tools               []Tool          `json:"tools,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"`
	ResponseFormat      *ResponseFormat `json:"response_format,omitempty"`
	User                string          `json:"user,omitempty"`
}

// MaxOutputTokens is max_completion_tokens, else max_tokens, else 0 (no limit).
func (c *ChatRequest) MaxOutputTokens() int {
	switch {
	case c.MaxCompletionTokens != nil:
		return *c.MaxCompletionTokens
	case c.MaxTokens != nil:
		return *c.MaxTokens
	}
	return 0
}

// StopWords decodes stop, which OpenAI accepts as a string or an array of strings.
func (c *ChatRequest) StopWords() []string {
	if len(c.Stop) == 0 {
		return nil
	}
	var one string
	if json.Unmarshal(c.Stop, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(c.Stop, &many)
	return many
}

// StreamOptions is OpenAI's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Message is one chat message. Content is a string or an array of content parts, kept raw.
type Message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

// ContentPart is one element of an array-valued message content.
type ContentPart struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	ImageURL *struct {
		URL    string `json:"url"`
		Detail string `json:"detail,omitempty"`
	} `json:"image_url,omitempty"`
}

// Text returns the message's text: the string content, or its text parts joined by newlines.
func (m *Message) Text() string {
	if len(m.Content) == 0 || string(m.Content) == "null" {
		return ""
	}
	// jsontext's unquoting first, not a json.Unmarshal: several stages ask for the text, and it
	// is the faster of the two. What it refuses (not a string, invalid UTF-8, a lone surrogate)
	// goes to encoding/json as before, which replaces what is invalid.
	if s, ok := PlainString(m.Content); ok {
		return s
	}
	if b, err := jsontext.AppendUnquote(nil, m.Content); err == nil {
		return string(b)
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []ContentPart
	if json.Unmarshal(m.Content, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// PlainString returns the text of the JSON string raw when it is its own content: no escapes,
// no control bytes, valid UTF-8, which most contents are. It copies the text once, where
// unquoting copies it twice; a string it refuses needs a real decode.
func PlainString(raw []byte) (string, bool) {
	in, ok := PlainBytes(raw)
	return string(in), ok
}

// PlainBytes is PlainString without the copy: the text is raw's own bytes, which the caller must
// not modify.
func PlainBytes(raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return nil, false
	}
	in := raw[1 : len(raw)-1]
	for _, b := range in {
		if b < 0x20 || b == '"' || b == '\\' {
			return nil, false
		}
	}
	if !utf8.Valid(in) {
		return nil, false
	}
	return in, true
}

// Parts returns the content parts of an array-valued content, or nil.
func (m *Message) Parts() []ContentPart {
	if len(m.Content) == 0 || m.Content[0] != '[' {
		return nil // declared below, parts would be allocated for every string content too
	}
	var parts []ContentPart
	_ = json.Unmarshal(m.Content, &parts)
	return parts
}

// Tool is a function tool offered to the model.
type Tool struct {
	Type     string       `json:"type"`
	Function ToolFunction `json:"function"`
}

// ToolFunction describes a callable function.
type ToolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ToolCall is a call the model made. In stream deltas Index orders the fragments.
type ToolCall struct {
	Index    *int             `json:"index,omitempty"`
	ID       string           `json:"id,omitempty"`
	Type     string           `json:"type,omitempty"`
	Function ToolCallFunction `json:"function"`
}

// ToolCallFunction is the function name and its JSON-encoded arguments.
type ToolCallFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// ResponseFormat is OpenAI's response_format.
type ResponseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name,omitempty"`
		Schema json.RawMessage `json:"schema,omitempty"`
		Strict *bool           `json:"strict,omitempty"`
	} `json:"json_schema,omitempty"`
}

// Answer is a whole chat completion, however it was produced. A cached Answer is shared between
// readers and must not be mutated after it is stored.
type Answer struct {
	ID                string   `json:"id"`
	Model             string   `json:"model"`
	Created           int64    `json:"created"`
	SystemFingerprint string   `json:"system_fingerprint,omitempty"`
	Choices           []Choice `json:"choices"`
	Usage             *Usage   `json:"usage,omitempty"`

	// Backend names the backend that produced the answer ("" for cheap stages).
	Backend string `json:"-"`
	// Timings are the backend's own counters, kept for the meter.
	Timings *Timings `json:"-"`
	// Energy is what producing this answer cost.
	Energy energy.Figure `json:"-"`
	// Settle, when set, returns Energy's final figure once the counters behind its provisional
	// parts have settled (energy.Figure.Provisional), waiting at most as long as ctx; on ctx's
	// end it returns the figure it could make with ctx's error. nil when Energy is final. A stage
	// sets it; the walk moves it to Result.Settle, so that no answer a learner keeps holds one.
	Settle SettleFunc `json:"-"`
	// Spent is energy an in-process stage spent outside this process to find the answer (an
	// embedding call). The walk adds it to Energy, after the stage's own estimate, and clears it.
	Spent energy.Figure `json:"-"`
	// SpentSettle is how to get Spent's final figure, nil when it is final; the walk composes it
	// into Settle.
	SpentSettle SettleFunc `json:"-"`
	// SpentTime is how long the stage waited for what Spent measures: the walk leaves it out of
	// the stage's own wall-time estimate, so that wait is not billed twice.
	SpentTime time.Duration `json:"-"`
	// Attempts are the backend calls the neural stage made for this answer, in order, the
	// answering one last; nil for the cheap stages.
	Attempts []BackendAttempt `json:"-"`
	// Streamed is true when the chunks already went through the sink.
	Streamed bool `json:"-"`
	// Complete is true when the answer ended normally (finish_reason stop/length/tool_calls and
	// no error). Only complete answers are stored.
	Complete bool `json:"-"`
	// Oversize is true when the answer's text outgrew what its stream's recording keeps
	// (Request.RecordBytes): it was served whole, but its choices hold none of its text, and no
	// stage stores it.
	Oversize bool `json:"-"`
}

// Size is about how many bytes the answer holds: its texts, tool calls and logprobs, and a
// fixed allowance for the rest. Stages bound what they store by it.
func (a *Answer) Size() int {
	n := answerOverhead + len(a.ID) + len(a.Model) + len(a.SystemFingerprint)
	for i := range a.Choices {
		c := &a.Choices[i]
		m := &c.Message
		n += choiceOverhead + len(m.ReasoningContent) + len(m.Refusal) + len(c.Logprobs) + len(c.FinishReason)
		if m.Content != nil {
			n += len(*m.Content)
		}
		for _, tc := range m.ToolCalls {
			n += choiceOverhead + len(tc.ID) + len(tc.Type) + len(tc.Function.Name) + len(tc.Function.Arguments)
		}
	}
	return n
}

// What an Answer and each of its choices cost beyond their texts: headers, pointers, usage.
const (
	answerOverhead = 256
	choiceOverhead = 64
)

// BackendAttempt is one call of one backend within a neural call: who, how it ended, and what
// it cost.
type BackendAttempt struct {
	Backend string
	// Outcome is "ok", or the class of the failure (Failure.Outcome): "status" (Status says
	// which), "unreachable", "timeout", "canceled" or "error".
	Outcome string
	// Status is the upstream's HTTP status when it sent one (200 for "ok"), else 0.
	Status int
	Energy energy.Figure
}

// Choice is one completion choice.
type Choice struct {
	Index        int             `json:"index"`
	Message      AnswerMessage   `json:"message"`
	FinishReason string          `json:"finish_reason"`
	Logprobs     json.RawMessage `json:"logprobs,omitempty"`
}

// AnswerMessage is the assistant's message in an Answer.
type AnswerMessage struct {
	Role             string     `json:"role"`
	Content          *string    `json:"content"`
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	Refusal          string     `json:"refusal,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

// Text returns the first choice's content, or "".
func (a *Answer) Text() string {
	if len(a.Choices) == 0 || a.Choices[0].Message.Content == nil {
		return ""
	}
	return *a.Choices[0].Message.Content
}

// Usage counts tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Timings are what a local backend reports about its own work (Ollama durations, llama.cpp timings).
type Timings struct {
	PromptN    int           // tokens evaluated for the prompt
	PredictedN int           // tokens generated
	CacheN     int           // prompt tokens served from the backend's KV cache
	Load       time.Duration // model load time
	PromptEval time.Duration
	Eval       time.Duration
	Total      time.Duration
}

// Chunk is one server-sent event of a chat completion stream, in OpenAI's chunk shape.
type Chunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint,omitempty"`
	Choices           []ChunkChoice `json:"choices"`
	Usage             *Usage        `json:"usage,omitempty"`
}

// ChunkChoice is one choice's delta within a Chunk.
type ChunkChoice struct {
	Index        int             `json:"index"`
	Delta        Delta           `json:"delta"`
	FinishReason *string         `json:"finish_reason"`
	Logprobs     json.RawMessage `json:"logprobs,omitempty"`
}

// Delta is the incremental message of a ChunkChoice.
type Delta struct {
	Role             string     `json:"role,omitempty"`
	Content          *string    `json:"content,omitempty"`
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	Refusal          string     `json:"refusal,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

// Sink receives the chunks of a stream in order. An error from the sink (the client went away)
// must stop the producer.
type Sink func(*Chunk) error

// ErrMiss is returned by a stage that cannot answer a request; the walk moves on.
var ErrMiss = errors.New("cascade: stage miss")

// Stage is one step of the cascade. Serve returns ErrMiss to pass. A stage that streams writes
// its chunks to sink and returns an Answer with Streamed set; other stages return a whole Answer
// and the walk replays it.
type Stage interface {
	Name() string
	Serve(ctx context.Context, req *Request, sink Sink) (*Answer, error)
}

// Learner is a stage that remembers answers produced by later stages.
// Learn must not block the response and must not mutate ans.
type Learner interface {
	Learn(req *Request, ans *Answer)
}

// EagerLearner is a Learner with a part that must be in place before the answer goes out: the
// exact cache's entry in this process, so that a client asking again the moment it has the
// answer is answered from it, not by the backend a second time. The walk calls LearnEager when
// the answer is known, in place of Learn: it does that part (cheap, never blocking) and returns
// the rest (a remote store), or nil, for after the answer. Learn is both at once.
type EagerLearner interface {
	Learner
	LearnEager(req *Request, ans *Answer) (rest func())
}

// Backend is one upstream dialect. With a nil sink it returns a whole Answer; with a sink it
// streams every chunk there and returns the assembled Answer (Streamed set) at the end.
type Backend interface {
	Chat(ctx context.Context, req *Request, sink Sink) (*Answer, error)
}

// ModelLister is a Backend that can list its models.
type ModelLister interface {
	Models(ctx context.Context) ([]string, error)
}

// Pinger is a Backend that can tell whether it is reachable.
type Pinger interface {
	Ping(ctx context.Context) error
}
