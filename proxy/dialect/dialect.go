// Package dialect is the seam between the HTTP edge and each wire format it speaks: a dialect decodes its request into the cascade's and renders answers, stream events and errors in its own shape.
//
// The edge (package proxy) owns everything a dialect shares: reading the body, keys, budgets,
// rate limits, the walk, settlement, the ledger and the X-EOC headers and trailers. A dialect
// owns only bytes: it knows no HTTP, no budget and no ledger, so each one is a pure package with
// table and fuzz tests of its own (dialect/responses, dialect/messages, dialect/completions; the
// OpenAI chat dialect is the edge's first).
package dialect

import (
	"context"
	"encoding/json"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

// Error is a refusal or failure as the edge means it; each dialect renders it in its own shape
// (Dialect.Error). Type and Code are OpenAI's vocabulary: the edge's own Types are
// invalid_request_error, server_error, upstream_error, requests (a key's rate limit, 429) and
// insufficient_quota (a key's joule budget, 429), and an upstream's 4xx passes its own Type
// through; a dialect with another vocabulary maps them, by Status first.
type Error struct {
	Status  int
	Type    string
	Code    string
	Param   string // the request field at fault, "" when none
	Message string
	// RetryAfter, when positive, becomes the Retry-After header.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Message }

// Event is one server-sent event: "event: Name" (left out when Name is "") and "data: Data".
type Event struct {
	Name string
	Data []byte
}

// Emit writes one event to the client and flushes it; an error means the client went away.
type Emit func(Event) error

// Dialect is one wire format of chat-like calls.
type Dialect interface {
	// Decode validates body and returns the call it asks for; every refusal names the field.
	// tenant is the caller's key id ("" with auth off), for state the dialect keeps per tenant
	// (stored Responses). ctx bounds any lookup.
	Decode(ctx context.Context, tenant string, body []byte) (Exchange, *Error)
	// Error renders e as this dialect's error body (JSON).
	Error(e *Error) []byte
}

// Exchange is one decoded call of a dialect.
type Exchange interface {
	// Chat is the chat request the cascade walks (cascade.Request.Chat); RawChat is its JSON,
	// for cascade.Request.Raw (what an OpenAI-compatible upstream is sent, and what the cache
	// key is made from: it must cover the whole conversation).
	Chat() *cascade.ChatRequest
	RawChat() []byte
	// Stream reports whether the client asked for a stream.
	Stream() bool
	// Whole renders a whole answer as the response body (JSON).
	Whole(ans *cascade.Answer) ([]byte, error)
	// Encoder returns the encoder of this call's stream.
	Encoder() Encoder
	// Done is called once after a complete answer went out (whole or streamed), with that
	// answer, for state the dialect keeps (a stored Response); ctx bounds it. An error is logged.
	Done(ctx context.Context, ans *cascade.Answer) error
}

// Encoder turns a stream of cascade chunks into a dialect's events, in order.
type Encoder interface {
	// Chunk emits the events of one chunk (none, one or several).
	Chunk(ch *cascade.Chunk, emit Emit) error
	// End emits the closing events after the last chunk: usage, the stop reason, and a final
	// event carrying the call's energy figure, fig, with its receipt (the X-EOC trailers say the
	// same). ans is the whole answer as recorded (its Usage may be nil).
	End(ans *cascade.Answer, fig Figures, emit Emit) error
}

// Figures is what a stream's final event says of the call's cost: the X-EOC values.
type Figures struct {
	energy.View
	Stage   string `json:"stage"`
	Receipt string `json:"receipt"`
	// State is "provisional" or "settled" (X-EOC-Joules-State).
	State           string   `json:"state,omitempty"`
	JoulesSaved     float64  `json:"joules_saved,omitempty"`
	BudgetRemaining *float64 `json:"budget_remaining,omitempty"`
	BudgetCoverage  string   `json:"budget_coverage,omitempty"`
	// ReceiptTime is the receipt's time, RFC 3339 UTC with nanoseconds (X-EOC-Receipt-Time).
	ReceiptTime string `json:"receipt_time,omitempty"`
	// JoulesSavedGrade is the grade of JoulesSaved (X-EOC-Joules-Saved-Grade), with it.
	JoulesSavedGrade string `json:"joules_saved_grade,omitempty"`
	// The figure's prompt and completion parts over the tokens its work processed, and how the
	// joules were split between them (token-weight); zero and "" when unknown.
	JoulesPerPromptToken     float64 `json:"joules_per_prompt_token,omitempty"`
	JoulesPerCompletionToken float64 `json:"joules_per_completion_token,omitempty"`
	TokenSplit               string  `json:"token_split,omitempty"`
}

// The bounds every dialect holds one request body to, so that decoding builds at most a small
// multiple of the body's bytes whatever its shape; past one, the call is a 400 naming the field.
// A model's context is far below all of them; MaxTools is OpenAI's bound, which Anthropic's is
// not above.
const (
	MaxMessages  = 10000 // messages, or a Responses input's items
	MaxParts     = 10000 // content parts or blocks, over the whole request
	MaxToolCalls = 10000 // tool calls, over the whole request
	MaxTools     = 128   // tools offered
	MaxStop      = 64    // stop sequences
	MaxDepth     = 64    // nesting of arrays and objects, anywhere in the body
)

// OpenAIError renders e as OpenAI's error object, {"error":{"message","type","param","code"}},
// param and code null when empty: the shape of the chat, Responses and completions dialects and
// of every route without a dialect of its own.
func OpenAIError(e *Error) []byte {
	b, _ := json.Marshal(openAIErrorBody{openAIErrorFields{Message: e.Message, Type: e.Type, Param: nullable(e.Param), Code: nullable(e.Code)}})
	return b
}

type openAIErrorBody struct {
	Error openAIErrorFields `json:"error"`
}

type openAIErrorFields struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
