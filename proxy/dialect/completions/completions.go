// Package completions is OpenAI's legacy completions API (POST /v1/completions) as a dialect: it decodes a prompt into the cascade's chat request, one user message, and renders text_completion objects, chunks and OpenAI's errors.
//
// The prompt reaches the model as a user message of a chat, not as raw text to continue: the
// backends speak chat. What the chat path cannot honour is refused with a 400 naming the field:
// a list of several prompts, token arrays, suffix, echo, logprobs, best_of above 1, n above 1
// and logit_bias.
package completions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// Bounds on a body: nesting anywhere, and stop sequences (the chat edge's, proxy/bodyscan.go).
const (
	maxDepth = dialect.MaxDepth
	maxStop  = dialect.MaxStop
)

// defaultMaxTokens is the legacy API's max_tokens when a call leaves it out.
const defaultMaxTokens = 16

// Dialect is the legacy completions API. The zero value is ready to use; it keeps no state and
// is safe for concurrent use.
type Dialect struct{}

var _ dialect.Dialect = Dialect{}

// New returns the completions dialect.
func New() Dialect { return Dialect{} }

// request is the body of POST /v1/completions; members it does not list are refused.
type request struct {
	Model            string         `json:"model"`
	Prompt           jsontext.Value `json:"prompt"`
	Suffix           jsontext.Value `json:"suffix"`
	MaxTokens        *int           `json:"max_tokens"`
	Stop             jsontext.Value `json:"stop"`
	Temperature      *float64       `json:"temperature"`
	TopP             *float64       `json:"top_p"`
	N                *int           `json:"n"`
	BestOf           *int           `json:"best_of"`
	Stream           bool           `json:"stream"`
	StreamOptions    *streamOptions `json:"stream_options"`
	Logprobs         jsontext.Value `json:"logprobs"`
	Echo             bool           `json:"echo"`
	PresencePenalty  *float64       `json:"presence_penalty"`
	FrequencyPenalty *float64       `json:"frequency_penalty"`
	Seed             *int64         `json:"seed"`
	LogitBias        jsontext.Value `json:"logit_bias"`
	User             string         `json:"user"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Decode validates a POST /v1/completions body; tenant and ctx are not used.
func (Dialect) Decode(_ context.Context, _ string, body []byte) (dialect.Exchange, *dialect.Error) {
	if e := scanDepth(body); e != nil {
		return nil, e
	}
	var r request
	if err := jsonv2.Unmarshal(body, &r, jsonv2.RejectUnknownMembers(true)); err != nil {
		return nil, jsonError(err)
	}
	prompt, e := promptOf(r.Prompt)
	if e != nil {
		return nil, e
	}
	stop, e := stopOf(r.Stop)
	if e != nil {
		return nil, e
	}
	switch {
	case r.Model == "":
		return nil, badRequest("model", "model: required")
	case present(r.Suffix) && string(r.Suffix) != `""`:
		return nil, badRequest("suffix", "suffix: not supported by this proxy (its backends complete no insertions); leave it out")
	case r.Echo:
		return nil, badRequest("echo", "echo: true is not supported by this proxy; leave it out or send false")
	case present(r.Logprobs):
		return nil, badRequest("logprobs", "logprobs: not supported on /v1/completions by this proxy; leave it out")
	case present(r.LogitBias) && !emptyObject(r.LogitBias):
		return nil, badRequest("logit_bias", "logit_bias: not supported by this proxy; leave it out")
	case r.N != nil && *r.N != 1:
		return nil, badRequest("n", "n: only 1 is supported")
	case r.BestOf != nil && *r.BestOf != 1:
		return nil, badRequest("best_of", "best_of: only 1 is supported")
	case r.MaxTokens != nil && *r.MaxTokens < 1:
		return nil, badRequest("max_tokens", "max_tokens: must be at least 1")
	case r.Temperature != nil && (*r.Temperature < 0 || *r.Temperature > 2):
		return nil, badRequest("temperature", "temperature: %v is not in [0, 2]", *r.Temperature)
	case r.TopP != nil && (*r.TopP < 0 || *r.TopP > 1):
		return nil, badRequest("top_p", "top_p: %v is not in [0, 1]", *r.TopP)
	case r.PresencePenalty != nil && (*r.PresencePenalty < -2 || *r.PresencePenalty > 2):
		return nil, badRequest("presence_penalty", "presence_penalty: %v is not in [-2, 2]", *r.PresencePenalty)
	case r.FrequencyPenalty != nil && (*r.FrequencyPenalty < -2 || *r.FrequencyPenalty > 2):
		return nil, badRequest("frequency_penalty", "frequency_penalty: %v is not in [-2, 2]", *r.FrequencyPenalty)
	case r.StreamOptions != nil && !r.Stream:
		return nil, badRequest("stream_options", "stream_options: only allowed when stream is true")
	}
	maxTokens := defaultMaxTokens
	if r.MaxTokens != nil {
		maxTokens = *r.MaxTokens
	}
	c := cascade.ChatRequest{Model: r.Model, Messages: []cascade.Message{{Role: "user", Content: jsonString(prompt)}},
		MaxTokens: &maxTokens, Temperature: r.Temperature, TopP: r.TopP, Seed: r.Seed,
		PresencePenalty: r.PresencePenalty, FrequencyPenalty: r.FrequencyPenalty, User: r.User}
	if len(stop) > 0 {
		c.Stop, _ = json.Marshal(stop)
	}
	x := &exchange{usage: r.StreamOptions != nil && r.StreamOptions.IncludeUsage, promptTokens: cascade.EstimateTokens(prompt)}
	if r.Stream {
		c.Stream = true
		c.StreamOptions = &cascade.StreamOptions{IncludeUsage: true} // for the end's usage figures
	}
	x.chat = c
	raw, err := json.Marshal(&x.chat)
	if err != nil {
		return nil, &dialect.Error{Status: 500, Type: "server_error", Code: "internal_error", Message: "internal error encoding the request"}
	}
	x.raw = raw
	return x, nil
}

// promptOf reads prompt: a string, or a list of exactly one string. Several prompts would be
// several answers in one call, which the chat path does not make; token arrays need the
// model's tokenizer.
func promptOf(v jsontext.Value) (string, *dialect.Error) {
	if !present(v) {
		return "", badRequest("prompt", "prompt: required")
	}
	var s string
	switch v.Kind() {
	case '"':
		if jsonv2.Unmarshal(v, &s) != nil {
			return "", badRequest("prompt", "prompt: not a valid string")
		}
		return s, nil
	case '[':
	default:
		return "", badRequest("prompt", "prompt: must be a string or a list of one string")
	}
	d := jsontext.NewDecoder(bytes.NewReader(v))
	if _, err := d.ReadToken(); err != nil {
		return "", badRequest("prompt", "prompt: must be a string or a list of one string")
	}
	switch d.PeekKind() {
	case ']':
		return "", badRequest("prompt", "prompt: an empty list")
	case '"':
	case '0', '[':
		return "", badRequest("prompt", "prompt: token arrays are not supported by this proxy; send the text")
	default:
		return "", badRequest("prompt", "prompt: must be a string or a list of one string")
	}
	first, err := d.ReadValue()
	if err != nil || jsonv2.Unmarshal(first, &s) != nil {
		return "", badRequest("prompt", "prompt: not a valid string")
	}
	if d.PeekKind() != ']' {
		return "", badRequest("prompt", "prompt: a list of several prompts is not supported by this proxy; send one per call")
	}
	return s, nil
}

// stopOf reads stop: null, a string, or a list of at most maxStop strings.
func stopOf(v jsontext.Value) ([]string, *dialect.Error) {
	if !present(v) {
		return nil, nil
	}
	var s string
	if v.Kind() == '"' {
		if jsonv2.Unmarshal(v, &s) != nil {
			return nil, badRequest("stop", "stop: not a valid string")
		}
		return []string{s}, nil
	}
	if v.Kind() != '[' {
		return nil, badRequest("stop", "stop: must be a string or an array of strings")
	}
	d := jsontext.NewDecoder(bytes.NewReader(v))
	_, _ = d.ReadToken()
	var out []string
	for d.PeekKind() != ']' {
		if len(out) == maxStop {
			return nil, &dialect.Error{Status: 400, Type: "invalid_request_error", Code: "array_above_max_length", Param: "stop",
				Message: fmt.Sprintf("stop: more than %d stop sequences", maxStop)}
		}
		e, err := d.ReadValue()
		if err != nil || e.Kind() != '"' || jsonv2.Unmarshal(e, &s) != nil {
			return nil, badRequest("stop", "stop: must be a string or an array of strings")
		}
		out = append(out, s)
	}
	return out, nil
}

// scanDepth refuses a body nested deeper than maxDepth, building no values.
func scanDepth(body []byte) *dialect.Error {
	if bytes.Count(body, []byte{'{'})+bytes.Count(body, []byte{'['}) <= maxDepth {
		return nil
	}
	d := jsontext.NewDecoder(bytes.NewReader(body), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	for {
		tok, err := d.ReadToken()
		if err != nil {
			return nil // the end, or not JSON: the decode says which
		}
		if k := tok.Kind(); (k == '{' || k == '[') && d.StackDepth() > maxDepth {
			return &dialect.Error{Status: 400, Type: "invalid_request_error", Code: "nesting_too_deep",
				Message: fmt.Sprintf("request body: arrays and objects nested more than %d deep", maxDepth)}
		}
	}
}

// exchange is one decoded completions call.
type exchange struct {
	chat         cascade.ChatRequest
	raw          []byte
	usage        bool // the client asked for the usage chunk
	promptTokens int
}

func (x *exchange) Chat() *cascade.ChatRequest                  { return &x.chat }
func (x *exchange) RawChat() []byte                             { return x.raw }
func (x *exchange) Stream() bool                                { return x.chat.Stream }
func (x *exchange) Done(context.Context, *cascade.Answer) error { return nil }

func (x *exchange) Encoder() dialect.Encoder {
	return &encoder{x: x}
}

// completion is a text_completion object, whole or a chunk of a stream.
type completion struct {
	ID      string           `json:"id"`
	Object  string           `json:"object"`
	Created int64            `json:"created"`
	Model   string           `json:"model"`
	Choices []choice         `json:"choices"`
	Usage   *cascade.Usage   `json:"usage,omitempty"`
	EOC     *dialect.Figures `json:"eoc,omitempty"`
}

type choice struct {
	Text         string    `json:"text"`
	Index        int       `json:"index"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

// Whole renders a whole answer as a text_completion.
func (x *exchange) Whole(ans *cascade.Answer) ([]byte, error) {
	c := completion{ID: completionID(ans.ID), Object: "text_completion", Created: created(ans.Created),
		Model: modelOf(ans.Model, x.chat.Model), Choices: []choice{}}
	finish := "stop"
	if len(ans.Choices) > 0 {
		finish = finishReason(ans.Choices[0].FinishReason)
	}
	c.Choices = append(c.Choices, choice{Text: ans.Text(), FinishReason: &finish})
	c.Usage = ans.Usage
	if c.Usage == nil {
		p, o := x.promptTokens, cascade.EstimateTokens(ans.Text())
		c.Usage = &cascade.Usage{PromptTokens: p, CompletionTokens: o, TotalTokens: p + o}
	}
	return json.Marshal(&c)
}

// encoder turns chat chunks into text_completion chunks, then the usage chunk when asked, the
// eoc chunk and [DONE]. It serves one stream; it is not safe for concurrent use.
type encoder struct {
	x        *exchange
	id       string
	model    string
	created  int64
	usage    *cascade.Usage
	usageOut bool
}

var _ dialect.Encoder = (*encoder)(nil)

func (en *encoder) head(id, model string, at int64) {
	if en.id == "" {
		en.id, en.model, en.created = completionID(id), modelOf(model, en.x.chat.Model), created(at)
	}
}

// Chunk emits one chunk per chat chunk with text or a finish reason, and the usage chunk when
// the client asked for it.
func (en *encoder) Chunk(ch *cascade.Chunk, emit dialect.Emit) error {
	en.head(ch.ID, ch.Model, ch.Created)
	if ch.Usage != nil {
		u := *ch.Usage
		en.usage = &u
	}
	out := completion{ID: en.id, Object: "text_completion", Created: en.created, Model: en.model, Choices: []choice{}}
	for i := range ch.Choices {
		c := &ch.Choices[i]
		if c.Index != 0 {
			continue
		}
		text := ""
		if c.Delta.Content != nil {
			text = *c.Delta.Content
		}
		var finish *string
		if c.FinishReason != nil && *c.FinishReason != "" {
			f := finishReason(*c.FinishReason)
			finish = &f
		}
		if text != "" || finish != nil {
			out.Choices = append(out.Choices, choice{Text: text, FinishReason: finish})
		}
	}
	if len(out.Choices) > 0 {
		if err := send(emit, &out); err != nil {
			return err
		}
	}
	if ch.Usage != nil && en.x.usage && !en.usageOut {
		return en.sendUsage(ch.Usage, emit)
	}
	return nil
}

func (en *encoder) sendUsage(u *cascade.Usage, emit dialect.Emit) error {
	en.usageOut = true
	return send(emit, &completion{ID: en.id, Object: "text_completion", Created: en.created, Model: en.model, Choices: []choice{}, Usage: u})
}

// End emits the usage chunk when the client asked for it and none went out, the eoc chunk and
// [DONE].
func (en *encoder) End(ans *cascade.Answer, fig dialect.Figures, emit dialect.Emit) error {
	if ans != nil && en.id == "" && len(ans.Choices) > 0 {
		// No chunk came: the answer's text goes out as one.
		en.head(ans.ID, ans.Model, ans.Created)
		finish := finishReason(ans.Choices[0].FinishReason)
		if err := send(emit, &completion{ID: en.id, Object: "text_completion", Created: en.created, Model: en.model,
			Choices: []choice{{Text: ans.Text(), FinishReason: &finish}}}); err != nil {
			return err
		}
	}
	if ans != nil {
		en.head(ans.ID, ans.Model, ans.Created)
		if ans.Usage != nil {
			en.usage = ans.Usage
		}
	} else {
		en.head("", "", 0)
	}
	if en.x.usage && !en.usageOut && en.usage != nil {
		if err := en.sendUsage(en.usage, emit); err != nil {
			return err
		}
	}
	if err := send(emit, &completion{ID: en.id, Object: "text_completion", Created: en.created, Model: en.model,
		Choices: []choice{}, EOC: &fig}); err != nil {
		return err
	}
	return emit(dialect.Event{Data: []byte("[DONE]")})
}

func send(emit dialect.Emit, c *completion) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return emit(dialect.Event{Data: b})
}

// finishReason maps a chat finish reason onto the legacy API's: stop, length or content_filter.
func finishReason(f string) string {
	switch f {
	case "length", "content_filter":
		return f
	}
	return "stop"
}

// completionID turns a chat completion id into a legacy one: chatcmpl-X becomes cmpl-X.
func completionID(id string) string {
	if id == "" {
		id = cascade.NewID()
	}
	return "cmpl-" + strings.TrimPrefix(id, "chatcmpl-")
}

func created(at int64) int64 {
	if at == 0 {
		return time.Now().Unix()
	}
	return at
}

func modelOf(answered, asked string) string {
	if answered != "" {
		return answered
	}
	return asked
}

// Error renders e in OpenAI's shape, {"error":{"message","type","param","code"}}.
func (Dialect) Error(e *dialect.Error) []byte { return dialect.OpenAIError(e) }

// jsonError names the field a decode failed at.
func jsonError(err error) *dialect.Error {
	var se *jsonv2.SemanticError
	var sy *jsontext.SyntacticError
	switch {
	case errors.As(err, &se) && errors.Is(se.Err, jsonv2.ErrUnknownName):
		p := param(se.JSONPointer)
		return badRequest(p, "%s: not a parameter this proxy supports on /v1/completions", p)
	case errors.As(err, &se) && se.JSONPointer != "":
		p := param(se.JSONPointer)
		return badRequest(p, "%s: wrong type", p)
	case errors.As(err, &sy) && errors.Is(sy.Err, jsontext.ErrDuplicateName):
		p := param(sy.JSONPointer)
		return badRequest(p, "%s: sent twice", p)
	case errors.As(err, &sy):
		return badRequest("", "malformed JSON at byte %d", sy.ByteOffset)
	}
	return badRequest("", "request body must be a JSON object")
}

// param turns a JSON pointer into the field's name: /stream_options/include_usage becomes
// stream_options.include_usage.
func param(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if _, err := strconv.Atoi(tok); err == nil {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		if len(tok) > 64 {
			tok = tok[:64]
		}
		b.WriteString(tok)
	}
	return b.String()
}

func badRequest(param, format string, a ...any) *dialect.Error {
	return &dialect.Error{Status: 400, Type: "invalid_request_error", Param: param, Message: fmt.Sprintf(format, a...)}
}

func present(v jsontext.Value) bool { return len(v) > 0 && v.Kind() != 'n' }

func emptyObject(v jsontext.Value) bool {
	return v.Kind() == '{' && len(bytes.TrimSpace(v[1:len(v)-1])) == 0
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
