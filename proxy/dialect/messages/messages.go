// Package messages is Anthropic's Messages API (POST /v1/messages) as a dialect: it decodes a call into the cascade's chat request and renders answers, stream events and errors in Anthropic's shapes.
//
// What it cannot honour it refuses with a 400 naming the field, as Anthropic's own API refuses an
// unknown one: image and document blocks, extended thinking, server tools, top_k, citations and
// disable_parallel_tool_use. metadata, service_tier and cache_control are accepted and change
// nothing. A stream's energy figures go out as one more event, `event: eoc`, between
// message_delta and message_stop; the SDKs pass an event type they do not know to the caller.
package messages

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// Dialect is the Messages API. The zero value is ready to use; it keeps no state and is safe
// for concurrent use.
type Dialect struct{}

var _ dialect.Dialect = Dialect{}

// New returns the Messages dialect.
func New() Dialect { return Dialect{} }

// Decode validates a POST /v1/messages body; tenant and ctx are not used (the dialect keeps no
// state).
func (Dialect) Decode(_ context.Context, _ string, body []byte) (dialect.Exchange, *dialect.Error) {
	d, e := decode(body, true)
	if e != nil {
		return nil, e
	}
	raw, err := json.Marshal(&d.chat)
	if err != nil {
		return nil, &dialect.Error{Status: 500, Type: "server_error", Code: "internal_error", Message: "internal error encoding the request"}
	}
	return &exchange{d: d, raw: raw}, nil
}

// CountTokens answers POST /v1/messages/count_tokens: {"input_tokens": N} for the body, a
// Messages request without max_tokens. estimated is true when N is an estimate at four
// characters a token, not a tokenizer's count (always, for now): the edge then says so in a
// header.
func (Dialect) CountTokens(body []byte) (out []byte, estimated bool, e *dialect.Error) {
	d, e := decode(body, false)
	if e != nil {
		return nil, false, e
	}
	out, _ = json.Marshal(struct {
		InputTokens int `json:"input_tokens"`
	}{d.promptTokens})
	return out, true, nil
}

// exchange is one decoded Messages call.
type exchange struct {
	d   *decoded
	raw []byte
}

func (x *exchange) Chat() *cascade.ChatRequest { return &x.d.chat }
func (x *exchange) RawChat() []byte            { return x.raw }
func (x *exchange) Stream() bool               { return x.d.chat.Stream }

// Done keeps nothing: the Messages API is stateless.
func (x *exchange) Done(context.Context, *cascade.Answer) error { return nil }

func (x *exchange) Encoder() dialect.Encoder {
	return &encoder{model: x.d.chat.Model, promptTokens: x.d.promptTokens, open: -1, tools: map[int]int{}}
}

// Whole renders a whole answer as a Message.
func (x *exchange) Whole(ans *cascade.Answer) ([]byte, error) {
	m := messageObject{ID: messageID(ans.ID), Type: "message", Role: "assistant", Model: modelOf(ans.Model, x.d.chat.Model),
		Content: []contentBlock{}}
	finish := ""
	var text strings.Builder
	if len(ans.Choices) > 0 {
		c := &ans.Choices[0]
		finish = c.FinishReason
		if s := c.Message.Content; s != nil && *s != "" {
			text.WriteString(*s)
		}
		text.WriteString(c.Message.Refusal)
		if text.Len() > 0 {
			t := text.String()
			m.Content = append(m.Content, contentBlock{Type: "text", Text: &t})
		}
		for _, tc := range c.Message.ToolCalls {
			m.Content = append(m.Content, contentBlock{Type: "tool_use", ID: toolID(tc.ID), Name: tc.Function.Name, Input: toolInput(tc.Function.Arguments)})
		}
	}
	reason := stopReason(finish)
	m.StopReason = &reason
	m.Usage = usageOf(ans.Usage, x.d.promptTokens, text.String())
	return json.Marshal(&m)
}

// messageObject is Anthropic's Message.
type messageObject struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []contentBlock `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        usage          `json:"usage"`
}

// contentBlock is a text or a tool_use block of an answer.
type contentBlock struct {
	Type  string          `json:"type"`
	Text  *string         `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

type usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// usageOf is the answer's token counts, estimated at four characters a token where the answer
// has none.
func usageOf(u *cascade.Usage, promptTokens int, text string) usage {
	if u != nil {
		return usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
	}
	return usage{InputTokens: promptTokens, OutputTokens: cascade.EstimateTokens(text)}
}

// stopReason maps a chat finish reason onto Anthropic's. A chat answer does not say whether a
// stop sequence ended it, so "stop" is always end_turn and stop_sequence stays null.
func stopReason(finish string) string {
	switch finish {
	case "length":
		return "max_tokens"
	case "tool_calls", "function_call":
		return "tool_use"
	case "content_filter":
		return "refusal"
	}
	return "end_turn"
}

// messageID turns a completion id into a message id: chatcmpl-X becomes msg_X.
func messageID(id string) string {
	if id == "" {
		id = strings.TrimPrefix(cascade.NewID(), "chatcmpl-")
	}
	return "msg_" + strings.TrimPrefix(id, "chatcmpl-")
}

// toolID is a tool call's id, or a fresh one when the backend gave none (a tool_result must
// name it).
func toolID(id string) string {
	if id != "" {
		return id
	}
	return "toolu_" + strings.TrimPrefix(cascade.NewID(), "chatcmpl-")
}

// toolInput is a tool call's arguments as tool_use's input: the JSON they hold, {} when empty,
// and the text as a JSON string when the model wrote something that is not JSON.
func toolInput(args string) json.RawMessage {
	s := strings.TrimSpace(args)
	if s == "" {
		return json.RawMessage("{}")
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(args)
	return b
}

func modelOf(answered, asked string) string {
	if answered != "" {
		return answered
	}
	return asked
}

// Error renders e as Anthropic's error body. The type follows the status, as Anthropic's does,
// so that its SDKs raise their matching error class.
func (Dialect) Error(e *dialect.Error) []byte {
	b, _ := json.Marshal(errorBody{Type: "error", Error: errorFields{Type: ErrorType(e.Status), Message: e.Message}})
	return b
}

// ErrorType is Anthropic's error type for an HTTP status.
func ErrorType(status int) string {
	switch {
	case status == 401:
		return "authentication_error"
	case status == 402:
		return "billing_error"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 413:
		return "request_too_large"
	case status == 429:
		return "rate_limit_error"
	case status == 503 || status == 529:
		return "overloaded_error"
	case status == 504:
		return "timeout_error"
	case status >= 500:
		return "api_error"
	}
	return "invalid_request_error"
}

type errorBody struct {
	Type  string      `json:"type"`
	Error errorFields `json:"error"`
}

type errorFields struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}
