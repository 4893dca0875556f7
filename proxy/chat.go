package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// chatDialect is OpenAI's Chat Completions, the edge's first dialect: the body is the cascade's
// own request, passed upstream as it came; a stream is "data:" events of chunks, the eoc chunk
// and "data: [DONE]".
type chatDialect struct {
	openAIErrors
	decoded *decodedChats
}

var _ dialect.Dialect = chatDialect{}

// Decode validates body, or takes what it made of the same bytes of tenant's before
// (decodedChats); every failure names the field.
func (d chatDialect) Decode(_ context.Context, tenant string, body []byte) (dialect.Exchange, *dialect.Error) {
	known, h := d.decoded.get(tenant, body)
	if known != nil {
		return known, nil // read-only, as the memo's requests are
	}
	e := newDecodedChat(tenant, body)
	if err := decodeChat(body, &e.parsed); err != nil {
		return nil, err.wire()
	}
	e.req.Key() // once for every call that sends these bytes
	d.decoded.put(h, e)
	return &e.x, nil
}

// chatBody is what decodeChat reads of a chat body, in one pass: the cascade's request (which
// the pointer must point at) and the reasoning switches it checks.
type chatBody struct {
	*cascade.ChatRequest
	thinkFields
}

// decodeChat decodes and validates a chat body into b.
func decodeChat(body []byte, b *chatBody) *APIError {
	if e := scanBody(body, scanChat); e != nil {
		return e
	}
	if unmarshalChat(body, b) != nil {
		// Refused: unmarshal decodes the request again, so that its error names the field as
		// encoding/json names it in a ChatRequest.
		b.thinkFields = thinkFields{}
		if e := unmarshal(body, b.ChatRequest); e != nil {
			return e
		}
		_ = json.Unmarshal(body, &b.thinkFields)
	}
	if e := validate(b.ChatRequest); e != nil {
		return e
	}
	return validateThink(body, &b.thinkFields)
}

// chatOptions are jsonv1's, encoding/json's semantics, but for a raw value (a message's content,
// stop, tool_choice, ...): it is the body's own bytes, not a copy. The decoder reads the body in
// place, the request keeps the body (Raw) as long as the values, and nothing modifies either.
var chatOptions = []jsonv2.Options{jsonv1.DefaultOptionsV1(), jsonv2.WithUnmarshalers(
	jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, raw *json.RawMessage) error {
		v, err := dec.ReadValue()
		if err != nil {
			return err
		}
		*raw = json.RawMessage(v[:len(v):len(v)]) // an append to it copies
		return nil
	}))}

// unmarshalChat decodes body into b as jsonv1.Unmarshal does, its raw values in place.
func unmarshalChat(body []byte, b *chatBody) error {
	return jsonv2.Unmarshal(body, b, chatOptions...)
}

// chatExchange is one chat call: its body is the cascade's request as it came. It may be the
// decoded-body memo's, shared between the calls that sent the same bytes: nothing modifies it.
type chatExchange struct {
	chat *cascade.ChatRequest
	raw  []byte
	// req is the cascade's request of chat and raw, its key computed, for decode to copy; nil
	// when the caller builds it.
	req *cascade.Request
}

func (x *chatExchange) Chat() *cascade.ChatRequest { return x.chat }
func (x *chatExchange) RawChat() []byte            { return x.raw }
func (x *chatExchange) Stream() bool               { return x.chat.Stream }

func (x *chatExchange) Whole(ans *cascade.Answer) ([]byte, error) {
	return json.Marshal(completion{Object: "chat.completion", Answer: ans})
}

func (x *chatExchange) Encoder() dialect.Encoder {
	return &chatEncoder{usage: x.chat.StreamOptions != nil && x.chat.StreamOptions.IncludeUsage}
}

func (x *chatExchange) Done(context.Context, *cascade.Answer) error { return nil }

// completion is the non-streaming response body.
type completion struct {
	Object string `json:"object"`
	*cascade.Answer
}

// chatEncoder writes each chunk as one "data:" event in OpenAI's chunk shape, and ends the
// stream with the eoc chunk and [DONE].
type chatEncoder struct {
	usage   bool // the client asked for the usage chunk
	buf     bytes.Buffer
	id      string
	model   string
	created int64
}

func (e *chatEncoder) Chunk(ch *cascade.Chunk, emit dialect.Emit) error {
	if e.id == "" {
		e.id, e.model, e.created = ch.ID, ch.Model, ch.Created
	}
	if ch.Usage != nil && !e.usage {
		if len(ch.Choices) == 0 {
			return nil // the usage chunk the client did not ask for
		}
		c := *ch
		c.Usage = nil
		ch = &c
	}
	return e.emitJSON(ch, emit)
}

// emitJSON emits v as one event; the event's data is valid until emit returns.
func (e *chatEncoder) emitJSON(v any, emit dialect.Emit) error {
	e.buf.Reset()
	enc := json.NewEncoder(&e.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b := e.buf.Bytes()
	return emit(dialect.Event{Data: b[:len(b)-1]}) // without Encode's newline
}

var doneEvent = []byte("[DONE]")

func (e *chatEncoder) End(ans *cascade.Answer, fig dialect.Figures, emit dialect.Emit) error {
	if e.id == "" && ans != nil {
		e.id, e.model, e.created = ans.ID, ans.Model, ans.Created
	}
	final := eocChunk{ID: e.id, Object: "chat.completion.chunk", Created: e.created, Model: e.model, Choices: []json.RawMessage{},
		EOC: eocFigures{Joules: fig.Joules, Stage: fig.Stage, Energy: fig.Grade, Coverage: fig.Coverage,
			Method: fig.Method, Reason: fig.Reason, JoulesSaved: fig.JoulesSaved, Receipt: fig.Receipt,
			BudgetRemaining: fig.BudgetRemaining, BudgetCoverage: fig.BudgetCoverage,
			eocBounds: eocBounds{JoulesLow: fig.JoulesLow, JoulesHigh: fig.JoulesHigh, State: fig.State, ReceiptTime: fig.ReceiptTime,
				JoulesSavedGrade: fig.JoulesSavedGrade, JoulesPerPromptToken: fig.JoulesPerPromptToken,
				JoulesPerCompletionToken: fig.JoulesPerCompletionToken, TokenSplit: fig.TokenSplit}}}
	if err := e.emitJSON(final, emit); err != nil {
		return err
	}
	return emit(dialect.Event{Data: doneEvent})
}

// eocChunk is the final chunk before [DONE]: no choices, and the energy figures.
type eocChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []json.RawMessage `json:"choices"`
	EOC     eocFigures        `json:"eoc"`
}

type eocFigures struct {
	Joules      float64 `json:"joules"`
	Stage       string  `json:"stage"`
	Energy      string  `json:"energy"`
	Coverage    string  `json:"coverage,omitempty"`
	Method      string  `json:"method,omitempty"`
	Reason      string  `json:"reason,omitempty"`
	JoulesSaved float64 `json:"joules_saved,omitempty"`
	Receipt     string  `json:"receipt"`
	// BudgetRemaining is the key's joule budget left, for keys with a budget.
	BudgetRemaining *float64 `json:"budget_remaining,omitempty"`
	// BudgetCoverage is X-EOC-Budget-Coverage, with BudgetRemaining.
	BudgetCoverage string `json:"budget_coverage,omitempty"`
	eocBounds
}

// validRole reports whether role is one a chat message may have.
func validRole(role string) bool {
	switch role {
	case "system", "developer", "user", "assistant", "tool", "function":
		return true
	}
	return false
}

// unmarshal decodes a request body into v, a non-nil pointer, with encoding/json's semantics, by
// go-json-experiment's v1 package (as backends' decodeAnswer does): it allocates less than
// encoding/json. A body it refuses is decoded again by encoding/json from the zero value, so a
// failure names the field and the offset in encoding/json's words. FuzzUnmarshal holds the two
// decoders equal.
func unmarshal(body []byte, v any) *APIError {
	if jsonv1.Unmarshal(body, v) == nil {
		return nil
	}
	reflect.ValueOf(v).Elem().SetZero()
	if err := json.Unmarshal(body, v); err != nil {
		var typeErr *json.UnmarshalTypeError
		var syntaxErr *json.SyntaxError
		switch {
		case errors.As(err, &typeErr) && typeErr.Field != "":
			return badRequest(typeErr.Field, "%s: expected %s, got %s", typeErr.Field, typeErr.Type, typeErr.Value)
		case errors.As(err, &syntaxErr):
			return badRequest("", "malformed JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)
		}
		return badRequest("", "request body must be a JSON object: %v", err)
	}
	return nil
}

// validStop reports whether stop is absent, null, a string, or an array whose every element is
// a string (not a number, not null).
func validStop(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return true
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return raw[0] == '"'
	}
	var many []json.RawMessage
	if json.Unmarshal(raw, &many) != nil {
		return false
	}
	for _, e := range many {
		if len(e) == 0 || e[0] != '"' || json.Unmarshal(e, &one) != nil {
			return false
		}
	}
	return true
}

func validate(c *cascade.ChatRequest) *APIError {
	if c.Model == "" {
		return badRequest("model", "model: required")
	}
	if len(c.Messages) == 0 {
		return badRequest("messages", "messages: at least one message is required")
	}
	for i, m := range c.Messages {
		if !validRole(m.Role) {
			return badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role: %q is not one of system, developer, user, assistant, tool", i, m.Role)
		}
		// Only an assistant message (one with tool calls) may leave its content out or null it.
		null := len(m.Content) == 0 || string(m.Content) == "null"
		if !null {
			switch m.Content[0] {
			case '"':
			case '[':
				if e := validateParts(m.Content, i); e != nil {
					return e
				}
			default:
				return badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content: must be a string or an array of content parts", i)
			}
		} else if m.Role != "assistant" {
			return badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content: required", i)
		}
		if m.Role == "tool" && m.ToolCallID == "" {
			return badRequest(fmt.Sprintf("messages[%d].tool_call_id", i), "messages[%d].tool_call_id: required for role tool", i)
		}
	}
	switch {
	case c.Temperature != nil && (*c.Temperature < 0 || *c.Temperature > 2):
		return badRequest("temperature", "temperature: %v is not in [0, 2]", *c.Temperature)
	case c.TopP != nil && (*c.TopP < 0 || *c.TopP > 1):
		return badRequest("top_p", "top_p: %v is not in [0, 1]", *c.TopP)
	case c.N != nil && (*c.N < 1 || *c.N > 128):
		return badRequest("n", "n: %d is not in [1, 128]", *c.N)
	case c.MaxTokens != nil && *c.MaxTokens < 1:
		return badRequest("max_tokens", "max_tokens: must be at least 1")
	case c.MaxCompletionTokens != nil && *c.MaxCompletionTokens < 1:
		return badRequest("max_completion_tokens", "max_completion_tokens: must be at least 1")
	case c.StreamOptions != nil && !c.Stream:
		return badRequest("stream_options", "stream_options: only allowed when stream is true")
	}
	if !validStop(c.Stop) {
		return badRequest("stop", "stop: must be a string or an array of strings")
	}
	for i, t := range c.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			return badRequest(fmt.Sprintf("tools[%d]", i), "tools[%d]: type must be function and function.name is required", i)
		}
	}
	return nil
}

// validateParts checks an array content: every part an object whose type is a string, and a
// text part's text a string. Types it does not know pass: a backend that knows them may take
// them.
func validateParts(content json.RawMessage, msg int) *APIError {
	var parts []json.RawMessage
	if json.Unmarshal(content, &parts) != nil {
		return badRequest(fmt.Sprintf("messages[%d].content", msg), "messages[%d].content: must be a string or an array of content parts", msg)
	}
	for j, raw := range parts {
		param := fmt.Sprintf("messages[%d].content[%d]", msg, j)
		var p struct {
			Type *string         `json:"type"`
			Text json.RawMessage `json:"text"`
		}
		if raw[0] != '{' || json.Unmarshal(raw, &p) != nil || p.Type == nil || *p.Type == "" {
			return badRequest(param, "%s: must be a content part, an object with a type", param)
		}
		if *p.Type == "text" && (len(p.Text) == 0 || p.Text[0] != '"') {
			return badRequest(param+".text", "%s.text: must be a string", param)
		}
	}
	return nil
}

// thinkFields are the request's reasoning switches, which the proxy passes on but does not
// otherwise read: Ollama's think and OpenAI's reasoning_effort.
type thinkFields struct {
	Think           json.RawMessage `json:"think"`
	ReasoningEffort json.RawMessage `json:"reasoning_effort"`
}

var (
	thinkKey           = []byte(`"think"`)
	reasoningEffortKey = []byte(`"reasoning_effort"`)
)

// validateThink refuses a think that is not true, false, "low", "medium" or "high" (Ollama's
// values) and a reasoning_effort that is not a string, whichever backend the call goes to: an
// earlier stage (the cache) may answer without a backend ever reading them. Which efforts a
// backend takes is the backend's to say. f is what body's decode made of them, whose names
// match case-insensitively: only a body that spells one as the backends do is refused.
func validateThink(body []byte, f *thinkFields) *APIError {
	if f.Think == nil && f.ReasoningEffort == nil {
		return nil
	}
	if !bytes.Contains(body, thinkKey) && !bytes.Contains(body, reasoningEffortKey) {
		return nil // the names as a client spells them; the backends look for the same
	}
	switch string(bytes.TrimSpace(f.Think)) {
	case "", "null", "true", "false", `"low"`, `"medium"`, `"high"`:
	default:
		return badRequest("think", `think: must be true, false, "low", "medium" or "high"`)
	}
	if e := bytes.TrimSpace(f.ReasoningEffort); len(e) > 0 && e[0] != '"' && string(e) != "null" {
		return badRequest("reasoning_effort", "reasoning_effort: must be a string")
	}
	return nil
}
