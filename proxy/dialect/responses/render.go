package responses

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// exchange is one decoded Responses call. It is used by one goroutine at a time.
type exchange struct {
	d      *Dialect
	tenant string
	chat   cascade.ChatRequest
	raw    []byte
	// conv is the conversation without the instructions (which a continuation does not inherit,
	// as OpenAI's does not): the stored one, then this call's input.
	conv []cascade.Message
	// What the Response object echoes of the request.
	echo       echo
	echoTools  []functionTool
	toolChoice json.RawMessage
	format     *textFormat
	effort     *string

	id      string // the random part of this call's ids
	created int64
	store   bool
	enc     *encoder
	// ctx is Decode's, for the store's Put (save): Whole and End take none.
	ctx context.Context
	// final is the Response the client got (Whole's, or the stream's last); saved says it was
	// stored, saveErr how that failed.
	final   *response
	saved   bool
	saveErr error
}

var _ dialect.Exchange = (*exchange)(nil)

func (x *exchange) Chat() *cascade.ChatRequest { return &x.chat }
func (x *exchange) RawChat() []byte            { return x.raw }
func (x *exchange) Stream() bool               { return x.chat.Stream }

// ID is the Response's id.
func (x *exchange) ID() string { return "resp_" + x.id }

// echo is what the Response object repeats of the request, as the SDKs' types expect.
type echo struct {
	instructions       *string
	maxOutputTokens    *int
	temperature, topP  *float64
	parallelToolCalls  bool
	previousResponseID *string
	metadata           map[string]string
	user               *string
	truncation         string
	reasoning          reasoningEcho
	serviceTier        string
	safetyIdentifier   *string
	promptCacheKey     *string
}

type reasoningEcho struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

func echoOf(r *request) echo {
	e := echo{instructions: r.Instructions, maxOutputTokens: r.MaxOutputTokens, temperature: r.Temperature, topP: r.TopP,
		parallelToolCalls: r.ParallelToolCalls == nil || *r.ParallelToolCalls, metadata: r.Metadata, user: r.User,
		truncation: "disabled", serviceTier: "default", safetyIdentifier: r.SafetyIdentifier, promptCacheKey: r.PromptCacheKey}
	if r.PreviousResponseID != nil && *r.PreviousResponseID != "" {
		e.previousResponseID = r.PreviousResponseID
	}
	if r.Truncation != nil {
		e.truncation = *r.Truncation
	}
	if r.Reasoning != nil {
		e.reasoning = reasoningEcho{Effort: r.Reasoning.Effort, Summary: r.Reasoning.Summary}
	}
	if e.metadata == nil {
		e.metadata = map[string]string{}
	}
	return e
}

// response is the Response object.
type response struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	CreatedAt          int64             `json:"created_at"`
	Status             string            `json:"status"`
	Background         bool              `json:"background"`
	CompletedAt        *int64            `json:"completed_at"`
	Error              *struct{}         `json:"error"`
	IncompleteDetails  *incomplete       `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Model              string            `json:"model"`
	Output             []any             `json:"output"`
	OutputText         string            `json:"output_text"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Reasoning          reasoningEcho     `json:"reasoning"`
	SafetyIdentifier   *string           `json:"safety_identifier"`
	PromptCacheKey     *string           `json:"prompt_cache_key"`
	ServiceTier        string            `json:"service_tier"`
	Store              bool              `json:"store"`
	Temperature        *float64          `json:"temperature"`
	Text               textEcho          `json:"text"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	Tools              []toolEcho        `json:"tools"`
	TopP               *float64          `json:"top_p"`
	Truncation         string            `json:"truncation"`
	Usage              *usage            `json:"usage"`
	User               *string           `json:"user,omitempty"`
	Metadata           map[string]string `json:"metadata"`
	// EOC is what the call cost (the X-EOC trailers' figures), on a stream's last event only:
	// the SDKs' stream helpers refuse an event type they do not know, so the figures ride here.
	EOC *dialect.Figures `json:"eoc,omitempty"`
}

type incomplete struct {
	Reason string `json:"reason"`
}

type textEcho struct {
	Format json.RawMessage `json:"format"`
}

type toolEcho struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

type usage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

func usageOf(u *cascade.Usage) *usage {
	if u == nil {
		return nil
	}
	total := u.TotalTokens
	if total == 0 {
		total = u.PromptTokens + u.CompletionTokens
	}
	return &usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: total}
}

// messageItem is an output message; functionCallItem a tool call.
type messageItem struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Status  string `json:"status"`
	Role    string `json:"role"`
	Content []any  `json:"content"`
}

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

type refusalPart struct {
	Type    string `json:"type"`
	Refusal string `json:"refusal"`
}

// reasoningItem is the model's reasoning (a chat answer's reasoning_content), as its text.
type reasoningItem struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Status  string `json:"status"`
	Summary []any  `json:"summary"`
	Content []any  `json:"content"`
}

type reasoningText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func newReasoningText(text string) *reasoningText {
	return &reasoningText{Type: "reasoning_text", Text: text}
}

type functionCallItem struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	Status    string `json:"status"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

func newOutputText(text string) *outputText {
	return &outputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}
}

// skeleton is the Response object before any output: status in_progress.
func (x *exchange) skeleton(model string) *response {
	e := &x.echo
	r := &response{ID: x.ID(), Object: "response", CreatedAt: x.created, Status: "in_progress",
		Instructions: e.instructions, MaxOutputTokens: e.maxOutputTokens, Model: model, Output: []any{},
		ParallelToolCalls: e.parallelToolCalls, PreviousResponseID: e.previousResponseID, Reasoning: e.reasoning,
		SafetyIdentifier: e.safetyIdentifier, PromptCacheKey: e.promptCacheKey, ServiceTier: e.serviceTier,
		Store: x.store, Temperature: e.temperature, TopP: e.topP, Truncation: e.truncation, User: e.user,
		Metadata: e.metadata, ToolChoice: x.toolChoice, Tools: make([]toolEcho, 0, len(x.echoTools))}
	if r.ToolChoice == nil {
		r.ToolChoice = json.RawMessage(`"auto"`)
	}
	r.Text.Format = json.RawMessage(`{"type":"text"}`)
	if x.format != nil {
		r.Text.Format, _ = json.Marshal(x.format)
	}
	for _, t := range x.echoTools {
		// strict as it was sent upstream: null when the request left it to the backend.
		te := toolEcho{Type: "function", Name: t.Name, Parameters: t.Parameters, Strict: t.Strict}
		if t.Description != "" {
			te.Description = &t.Description
		}
		if te.Parameters == nil {
			te.Parameters = json.RawMessage("null")
		}
		r.Tools = append(r.Tools, te)
	}
	return r
}

// finish sets the status the finish reason says, and the completion time.
func (x *exchange) finish(r *response, finishReason string) {
	r.Status = "completed"
	switch finishReason {
	case "length":
		r.Status, r.IncompleteDetails = "incomplete", &incomplete{Reason: "max_output_tokens"}
	case "content_filter":
		r.Status, r.IncompleteDetails = "incomplete", &incomplete{Reason: "content_filter"}
	}
	at := x.d.now().Unix()
	r.CompletedAt = &at
}

func (x *exchange) msgID() string       { return "msg_" + x.id }
func (x *exchange) reasoningID() string { return "rs_" + x.id }

// callIDs are the ids of a tool call: the item's, and the call's own when the backend gave none.
func (x *exchange) callIDs(i int, id string) (itemID, callID string) {
	n := strconv.Itoa(i)
	itemID = "fc_" + x.id + "_" + n
	if id == "" {
		id = "call_" + x.id + "_" + n
	}
	return itemID, id
}

// fromAnswer builds the completed Response of a whole answer.
func (x *exchange) fromAnswer(ans *cascade.Answer) *response {
	model := ans.Model
	if model == "" {
		model = x.chat.Model
	}
	r := x.skeleton(model)
	var msg cascade.AnswerMessage
	finish := ""
	if len(ans.Choices) > 0 {
		msg, finish = ans.Choices[0].Message, ans.Choices[0].FinishReason
	}
	text := ""
	if msg.Content != nil {
		text = *msg.Content
	}
	if msg.ReasoningContent != "" {
		r.Output = append(r.Output, &reasoningItem{ID: x.reasoningID(), Type: "reasoning", Status: "completed", Summary: []any{},
			Content: []any{newReasoningText(msg.ReasoningContent)}})
	}
	if text != "" || msg.Refusal != "" || len(msg.ToolCalls) == 0 {
		m := &messageItem{ID: x.msgID(), Type: "message", Status: "completed", Role: "assistant", Content: []any{}}
		if text != "" || msg.Refusal == "" {
			m.Content = append(m.Content, newOutputText(text))
		}
		if msg.Refusal != "" {
			m.Content = append(m.Content, &refusalPart{Type: "refusal", Refusal: msg.Refusal})
		}
		r.Output = append(r.Output, m)
	}
	for i, tc := range msg.ToolCalls {
		itemID, callID := x.callIDs(i, tc.ID)
		r.Output = append(r.Output, &functionCallItem{ID: itemID, Type: "function_call", Status: "completed",
			CallID: callID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	r.OutputText = text
	r.Usage = usageOf(ans.Usage)
	x.finish(r, finish)
	return r
}

// Whole renders a whole answer as the Response object, and stores it first when asked to: the
// client may continue the conversation the moment it has the body.
func (x *exchange) Whole(ans *cascade.Answer) ([]byte, error) {
	r := x.fromAnswer(ans)
	body, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	x.save(r, body)
	return body, nil
}

// Encoder returns the encoder of this call's stream.
func (x *exchange) Encoder() dialect.Encoder {
	if x.enc == nil {
		x.enc = &encoder{x: x}
	}
	return x.enc
}

// record is what the store keeps of one response: the conversation through its output, and
// the Response object as the client got it.
type record struct {
	Version  int               `json:"v"`
	Messages []cascade.Message `json:"messages"`
	Response json.RawMessage   `json:"response"`
}

const recordVersion = 1

// storeTimeout bounds one Put of a stored response.
const storeTimeout = 5 * time.Second

// save stores r, the Response the client gets, when the request asked to (store, true by
// default). It runs before the answer goes out (Whole, End), so a continuation sent the moment
// the client has it finds it; a client that leaves does not cancel it. A failure is kept for Done
// to report: the answer goes out without it.
func (x *exchange) save(r *response, body []byte) {
	x.final = r
	if !x.store || x.saved {
		return
	}
	x.saved = true
	var err error
	if body == nil {
		saved := *r
		saved.EOC = nil // the figures belong to the call, not to the stored object
		body, err = json.Marshal(&saved)
	}
	if err == nil {
		var val []byte
		if val, err = x.record(r, body); err == nil {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(x.ctx), storeTimeout)
			err = x.d.store.Put(ctx, x.tenant, x.ID(), val)
			cancel()
		}
	}
	if err != nil {
		x.saveErr = fmt.Errorf("storing response: %w", err)
	}
}

// record is the stored record of r, whose JSON (without the figures) is body: written by hand
// around body, which encoding/json would otherwise scan again.
func (x *exchange) record(r *response, body []byte) ([]byte, error) {
	msgs, err := json.Marshal(append(x.conv[:len(x.conv):len(x.conv)], outputMessage(r)))
	if err != nil {
		return nil, err
	}
	val := make([]byte, 0, len(msgs)+len(body)+32)
	val = append(val, `{"v":`...)
	val = strconv.AppendInt(val, recordVersion, 10)
	val = append(val, `,"messages":`...)
	val = append(val, msgs...)
	val = append(val, `,"response":`...)
	val = append(val, body...)
	return append(val, '}'), nil
}

// Done stores the response if Whole or End did not, and reports a store that failed.
func (x *exchange) Done(_ context.Context, ans *cascade.Answer) error {
	if x.final == nil && ans != nil {
		x.save(x.fromAnswer(ans), nil)
	}
	return x.saveErr
}

// outputMessage is a Response's output as the assistant's chat message, for the conversation a
// continuation sends.
func outputMessage(r *response) cascade.Message {
	m := cascade.Message{Role: "assistant"}
	var text strings.Builder
	for _, it := range r.Output {
		switch it := it.(type) {
		case *messageItem:
			for _, c := range it.Content {
				if t, ok := c.(*outputText); ok {
					text.WriteString(t.Text)
				}
			}
		case *functionCallItem:
			m.ToolCalls = append(m.ToolCalls, cascade.ToolCall{ID: it.CallID, Type: "function",
				Function: cascade.ToolCallFunction{Name: it.Name, Arguments: it.Arguments}})
		}
	}
	if text.Len() > 0 || len(m.ToolCalls) == 0 {
		m.Content = quote(text.String())
	}
	return m
}
