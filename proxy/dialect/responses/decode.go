package responses

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// request is a Responses create request. Fields whose shape varies stay raw.
type request struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	Text               *textConfig       `json:"text"`
	Stream             *bool             `json:"stream"`
	StreamOptions      json.RawMessage   `json:"stream_options"`
	Store              *bool             `json:"store"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Metadata           map[string]string `json:"metadata"`
	User               *string           `json:"user"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	Truncation         *string           `json:"truncation"`
	Reasoning          *reasoning        `json:"reasoning"`
	Include            []string          `json:"include"`
	ServiceTier        *string           `json:"service_tier"`
	SafetyIdentifier   *string           `json:"safety_identifier"`
	PromptCacheKey     *string           `json:"prompt_cache_key"`
	// Refused unless absent, null or their "off" value.
	Background        json.RawMessage `json:"background"`
	Conversation      json.RawMessage `json:"conversation"`
	Prompt            json.RawMessage `json:"prompt"`
	MaxToolCalls      json.RawMessage `json:"max_tool_calls"`
	TopLogprobs       json.RawMessage `json:"top_logprobs"`
	ContextManagement json.RawMessage `json:"context_management"`
	Moderation        json.RawMessage `json:"moderation"`
	// Accepted and not read: caching hints for OpenAI's own prompt cache.
	PromptCacheRetention json.RawMessage `json:"prompt_cache_retention"`
	PromptCacheOptions   json.RawMessage `json:"prompt_cache_options"`
}

type textConfig struct {
	Format    json.RawMessage `json:"format,omitempty"`
	Verbosity *string         `json:"verbosity,omitempty"`
}

// textFormat is text.format: text, json_object, or json_schema with its fields flat.
type textFormat struct {
	Type        string          `json:"type"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

type reasoning struct {
	Effort          *string `json:"effort,omitempty"`
	Summary         *string `json:"summary,omitempty"`
	GenerateSummary *string `json:"generate_summary,omitempty"`
}

// functionTool is Responses' function tool, flat: {type, name, description, parameters, strict}.
type functionTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// inputItem is one element of input: a message (type "message", or no type with a role), a
// function_call or a function_call_output.
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments *string         `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// inputPart is one content part of an input message.
type inputPart struct {
	Type     string          `json:"type"`
	Text     *string         `json:"text"`
	Refusal  *string         `json:"refusal"`
	ImageURL *string         `json:"image_url"`
	FileID   json.RawMessage `json:"file_id"`
	Detail   string          `json:"detail"`
}

// chatWire is the chat request as sent upstream and keyed: the cascade's fields, and the two
// that ChatRequest does not name but backends read from the raw body.
type chatWire struct {
	*cascade.ChatRequest
	ParallelToolCalls *bool   `json:"parallel_tool_calls,omitempty"`
	ReasoningEffort   *string `json:"reasoning_effort,omitempty"`
}

var validEfforts = map[string]bool{"none": true, "minimal": true, "low": true, "medium": true, "high": true}

// Decode validates body and builds the chat request it asks for, continuing tenant's stored
// conversation when previous_response_id names one.
func (d *Dialect) Decode(ctx context.Context, tenant string, body []byte) (dialect.Exchange, *dialect.Error) {
	if e := scan(body); e != nil {
		return nil, e
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return nil, badRequest("", "request body must be a JSON object")
	}
	var r request
	if e := unmarshal(body, &r); e != nil {
		return nil, e
	}
	x := &exchange{d: d, tenant: tenant, store: r.Store == nil || *r.Store, ctx: ctx}
	if e := x.build(&r); e != nil {
		return nil, e
	}
	if r.PreviousResponseID != nil && *r.PreviousResponseID != "" {
		rec, e := d.load(ctx, tenant, *r.PreviousResponseID, "previous_response_id")
		if e != nil {
			return nil, e
		}
		x.conv = append(rec.Messages[:len(rec.Messages):len(rec.Messages)], x.conv...)
		if len(x.conv) > maxItems*2 {
			return nil, badRequest("previous_response_id", "previous_response_id: the conversation has more than %d messages", maxItems*2)
		}
	}
	x.chat.Messages = x.conv
	if r.Instructions != nil && *r.Instructions != "" {
		x.chat.Messages = append([]cascade.Message{{Role: "system", Content: quote(*r.Instructions)}}, x.conv...)
	}
	if len(x.chat.Messages) == 0 {
		return nil, badRequest("input", "input: required")
	}
	raw, err := json.Marshal(chatWire{ChatRequest: &x.chat, ParallelToolCalls: r.ParallelToolCalls, ReasoningEffort: x.effort})
	if err != nil {
		return nil, badRequest("", "request body: %v", err)
	}
	x.raw = raw
	x.id = d.newID()
	x.created = d.now().Unix()
	return x, nil
}

// unmarshal decodes body into r; a failure names the field.
func unmarshal(body []byte, r *request) *dialect.Error {
	err := json.Unmarshal(body, r)
	if err == nil {
		return nil
	}
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

// isNull reports whether a raw field is absent or null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

func quote(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// build fills x from r: the chat request's fields, the conversation of r's input, and what the
// Response object echoes.
func (x *exchange) build(r *request) *dialect.Error {
	if r.Model == "" {
		return badRequest("model", "model: required")
	}
	if e := refusals(r); e != nil {
		return e
	}
	c := &x.chat
	c.Model = r.Model
	c.Stream = r.Stream != nil && *r.Stream
	if c.Stream {
		// The usage chunk carries what response.completed reports.
		c.StreamOptions = &cascade.StreamOptions{IncludeUsage: true}
	}
	switch {
	case r.Temperature != nil && (*r.Temperature < 0 || *r.Temperature > 2):
		return badRequest("temperature", "temperature: %v is not in [0, 2]", *r.Temperature)
	case r.TopP != nil && (*r.TopP < 0 || *r.TopP > 1):
		return badRequest("top_p", "top_p: %v is not in [0, 1]", *r.TopP)
	case r.MaxOutputTokens != nil && *r.MaxOutputTokens < 1:
		return badRequest("max_output_tokens", "max_output_tokens: must be at least 1")
	case r.Truncation != nil && *r.Truncation != "auto" && *r.Truncation != "disabled":
		return badRequest("truncation", `truncation: must be "auto" or "disabled"`)
	}
	c.Temperature, c.TopP, c.MaxTokens = r.Temperature, r.TopP, r.MaxOutputTokens
	if r.User != nil {
		c.User = *r.User
	}
	for k, v := range r.Metadata {
		if len(k) > maxMetadataKey || len(v) > maxMetadataValue {
			return badRequest("metadata", "metadata: keys are at most %d characters and values at most %d", maxMetadataKey, maxMetadataValue)
		}
	}
	if r.Reasoning != nil && r.Reasoning.Effort != nil {
		if !validEfforts[*r.Reasoning.Effort] {
			return badRequest("reasoning.effort", "reasoning.effort: %q is not one of none, minimal, low, medium, high", *r.Reasoning.Effort)
		}
		x.effort = r.Reasoning.Effort
	}
	if e := x.tools(r); e != nil {
		return e
	}
	if e := x.textFormat(r); e != nil {
		return e
	}
	conv, e := inputMessages(r.Input)
	if e != nil {
		return e
	}
	x.conv = conv
	x.echo = echoOf(r)
	return nil
}

// refusals refuses the fields that would change the answer and that the proxy cannot honour.
func refusals(r *request) *dialect.Error {
	switch {
	case !isNull(r.Background) && string(bytes.TrimSpace(r.Background)) != "false":
		return unsupported("background", "background: background responses are not supported; leave it out or false")
	case !isNull(r.Conversation):
		return unsupported("conversation", "conversation: conversations are not supported; continue one with previous_response_id")
	case !isNull(r.Prompt):
		return unsupported("prompt", "prompt: stored prompt templates are not supported; send instructions and input")
	case !isNull(r.MaxToolCalls):
		return unsupported("max_tool_calls", "max_tool_calls: not supported")
	case !isNull(r.TopLogprobs) && string(bytes.TrimSpace(r.TopLogprobs)) != "0":
		return unsupported("top_logprobs", "top_logprobs: log probabilities are not supported")
	case !isNull(r.ContextManagement) && string(bytes.TrimSpace(r.ContextManagement)) != "[]":
		return unsupported("context_management", "context_management: not supported")
	case !isNull(r.Moderation):
		return unsupported("moderation", "moderation: not supported")
	case r.Text != nil && r.Text.Verbosity != nil && *r.Text.Verbosity != "medium":
		return unsupported("text.verbosity", "text.verbosity: only medium (the default) is supported")
	}
	for i, v := range r.Include {
		// Encrypted reasoning is asked for by clients that do not store; no reasoning item is
		// ever returned here, so asking for it changes nothing.
		if v != "reasoning.encrypted_content" {
			return unsupported(fmt.Sprintf("include[%d]", i), "include[%d]: %q is not supported", i, v)
		}
	}
	if !isNull(r.StreamOptions) && (r.Stream == nil || !*r.Stream) {
		return badRequest("stream_options", "stream_options: only allowed when stream is true")
	}
	return nil
}

// tools maps function tools and tool_choice onto the chat request's.
func (x *exchange) tools(r *request) *dialect.Error {
	for i, raw := range r.Tools {
		param := fmt.Sprintf("tools[%d]", i)
		var t functionTool
		if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &t) != nil {
			return badRequest(param, "%s: must be a tool object", param)
		}
		if t.Type != "function" {
			return unsupported(param+".type", "%s.type: %q tools are not supported; only function tools are", param, t.Type)
		}
		if t.Name == "" {
			return badRequest(param+".name", "%s.name: required", param)
		}
		if !isNull(t.Parameters) && bytes.TrimSpace(t.Parameters)[0] != '{' {
			return badRequest(param+".parameters", "%s.parameters: must be a JSON schema object", param)
		}
		x.chat.Tools = append(x.chat.Tools, cascade.Tool{Type: "function", Function: cascade.ToolFunction{
			Name: t.Name, Description: t.Description, Parameters: t.Parameters, Strict: t.Strict}})
		x.echoTools = append(x.echoTools, t)
	}
	tc := bytes.TrimSpace(r.ToolChoice)
	if isNull(tc) {
		return nil
	}
	var mode string
	if json.Unmarshal(tc, &mode) == nil {
		switch mode {
		case "none", "auto", "required":
			x.chat.ToolChoice = quote(mode)
			x.toolChoice = tc
			return nil
		}
		return badRequest("tool_choice", `tool_choice: %q is not one of "none", "auto", "required"`, mode)
	}
	var fn struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if tc[0] != '{' || json.Unmarshal(tc, &fn) != nil {
		return badRequest("tool_choice", "tool_choice: must be a string or a tool choice object")
	}
	if fn.Type != "function" {
		return unsupported("tool_choice.type", "tool_choice.type: %q is not supported; only function is", fn.Type)
	}
	if fn.Name == "" {
		return badRequest("tool_choice.name", "tool_choice.name: required")
	}
	b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": fn.Name}})
	x.chat.ToolChoice = b
	x.toolChoice, _ = json.Marshal(fn)
	return nil
}

// textFormat maps text.format onto response_format.
func (x *exchange) textFormat(r *request) *dialect.Error {
	if r.Text == nil || isNull(r.Text.Format) {
		return nil
	}
	var f textFormat
	if r.Text.Format[0] != '{' || json.Unmarshal(r.Text.Format, &f) != nil {
		return badRequest("text.format", "text.format: must be an object with a type")
	}
	switch f.Type {
	case "text":
	case "json_object":
		x.chat.ResponseFormat = &cascade.ResponseFormat{Type: "json_object"}
	case "json_schema":
		if f.Name == "" {
			return badRequest("text.format.name", "text.format.name: required for json_schema")
		}
		if isNull(f.Schema) || bytes.TrimSpace(f.Schema)[0] != '{' {
			return badRequest("text.format.schema", "text.format.schema: must be a JSON schema object")
		}
		rf := &cascade.ResponseFormat{Type: "json_schema"}
		rf.JSONSchema = &struct {
			Name   string          `json:"name,omitempty"`
			Schema json.RawMessage `json:"schema,omitempty"`
			Strict *bool           `json:"strict,omitempty"`
		}{Name: f.Name, Schema: f.Schema, Strict: f.Strict}
		x.chat.ResponseFormat = rf
	default:
		return badRequest("text.format.type", `text.format.type: %q is not one of "text", "json_object", "json_schema"`, f.Type)
	}
	x.format = &f
	return nil
}

// inputMessages turns input (a string, or a list of items) into chat messages. Consecutive
// function_call items, and those that follow an assistant message, become one assistant message
// with tool calls, as the chat API spells a turn that called tools.
func inputMessages(raw json.RawMessage) ([]cascade.Message, *dialect.Error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return nil, nil // previous_response_id alone may carry the conversation; Decode checks
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, badRequest("input", "input: must be a string or a list of input items")
		}
		return []cascade.Message{{Role: "user", Content: raw}}, nil
	case '[':
	default:
		return nil, badRequest("input", "input: must be a string or a list of input items")
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, badRequest("input", "input: must be a string or a list of input items")
	}
	msgs := make([]cascade.Message, 0, len(items))
	for i, ir := range items {
		param := fmt.Sprintf("input[%d]", i)
		var it inputItem
		if len(ir) == 0 || ir[0] != '{' || json.Unmarshal(ir, &it) != nil {
			return nil, badRequest(param, "%s: must be an input item object", param)
		}
		typ := it.Type
		if typ == "" && it.Role != "" {
			typ = "message"
		}
		switch typ {
		case "message":
			m, e := inputMessage(&it, param)
			if e != nil {
				return nil, e
			}
			msgs = append(msgs, m)
		case "function_call":
			if it.CallID == "" {
				return nil, badRequest(param+".call_id", "%s.call_id: required", param)
			}
			if it.Name == "" {
				return nil, badRequest(param+".name", "%s.name: required", param)
			}
			if it.Arguments == nil {
				return nil, badRequest(param+".arguments", "%s.arguments: required, a string", param)
			}
			call := cascade.ToolCall{ID: it.CallID, Type: "function", Function: cascade.ToolCallFunction{Name: it.Name, Arguments: *it.Arguments}}
			if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" {
				msgs[n-1].ToolCalls = append(msgs[n-1].ToolCalls, call)
			} else {
				msgs = append(msgs, cascade.Message{Role: "assistant", ToolCalls: []cascade.ToolCall{call}})
			}
		case "function_call_output":
			if it.CallID == "" {
				return nil, badRequest(param+".call_id", "%s.call_id: required", param)
			}
			out, e := toolOutput(it.Output, param+".output")
			if e != nil {
				return nil, e
			}
			msgs = append(msgs, cascade.Message{Role: "tool", ToolCallID: it.CallID, Content: out})
		case "reasoning":
			// A reasoning item this proxy returned, sent back as a client that does not store
			// does. The chat request has no place for it: chat templates drop earlier turns'
			// reasoning, so leaving it out is what the model would see anyway.
		case "":
			return nil, badRequest(param+".type", "%s.type: required", param)
		default:
			return nil, unsupported(param+".type", "%s.type: %q items are not supported; messages, function_call and function_call_output are", param, truncate(typ))
		}
	}
	return msgs, nil
}

var inputRoles = map[string]bool{"user": true, "system": true, "developer": true, "assistant": true}

// inputMessage maps one message item; an assistant's parts (output_text) become its text.
func inputMessage(it *inputItem, param string) (cascade.Message, *dialect.Error) {
	if !inputRoles[it.Role] {
		return cascade.Message{}, badRequest(param+".role", "%s.role: %q is not one of user, system, developer, assistant", param, truncate(it.Role))
	}
	c := bytes.TrimSpace(it.Content)
	if isNull(c) {
		return cascade.Message{}, badRequest(param+".content", "%s.content: required", param)
	}
	switch c[0] {
	case '"':
		return cascade.Message{Role: it.Role, Content: c}, nil
	case '[':
	default:
		return cascade.Message{}, badRequest(param+".content", "%s.content: must be a string or a list of content parts", param)
	}
	var raws []json.RawMessage
	if json.Unmarshal(c, &raws) != nil {
		return cascade.Message{}, badRequest(param+".content", "%s.content: must be a string or a list of content parts", param)
	}
	var parts []cascade.ContentPart
	var text strings.Builder
	images := false
	for j, pr := range raws {
		pp := fmt.Sprintf("%s.content[%d]", param, j)
		var p inputPart
		if len(pr) == 0 || pr[0] != '{' || json.Unmarshal(pr, &p) != nil {
			return cascade.Message{}, badRequest(pp, "%s: must be a content part, an object with a type", pp)
		}
		switch p.Type {
		case "input_text", "output_text", "text":
			if p.Text == nil {
				return cascade.Message{}, badRequest(pp+".text", "%s.text: must be a string", pp)
			}
			parts = append(parts, cascade.ContentPart{Type: "text", Text: *p.Text})
			if text.Len() > 0 {
				text.WriteByte('\n')
			}
			text.WriteString(*p.Text)
		case "refusal":
			if p.Refusal == nil {
				return cascade.Message{}, badRequest(pp+".refusal", "%s.refusal: must be a string", pp)
			}
			parts = append(parts, cascade.ContentPart{Type: "text", Text: *p.Refusal})
			if text.Len() > 0 {
				text.WriteByte('\n')
			}
			text.WriteString(*p.Refusal)
		case "input_image":
			if p.ImageURL == nil || *p.ImageURL == "" || !isNull(p.FileID) {
				return cascade.Message{}, unsupported(pp+".image_url", "%s: images are supported by image_url only, not file_id", pp)
			}
			if it.Role != "user" {
				return cascade.Message{}, badRequest(pp, "%s: images are allowed in user messages only", pp)
			}
			cp := cascade.ContentPart{Type: "image_url"}
			cp.ImageURL = &struct {
				URL    string `json:"url"`
				Detail string `json:"detail,omitempty"`
			}{URL: *p.ImageURL, Detail: p.Detail}
			parts = append(parts, cp)
			images = true
		default:
			return cascade.Message{}, unsupported(pp+".type", "%s.type: %q content is not supported; input_text, output_text and input_image are", pp, truncate(p.Type))
		}
	}
	if !images {
		// Text alone is sent as a string: every backend takes that, and the key is the same as a
		// string input's.
		return cascade.Message{Role: it.Role, Content: quote(text.String())}, nil
	}
	b, _ := json.Marshal(parts)
	return cascade.Message{Role: it.Role, Content: b}, nil
}

// toolOutput is a function_call_output's output: a string, or a list of input_text parts.
func toolOutput(raw json.RawMessage, param string) (json.RawMessage, *dialect.Error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return nil, badRequest(param, "%s: required", param)
	}
	switch raw[0] {
	case '"':
		return raw, nil
	case '[':
		var parts []inputPart
		if json.Unmarshal(raw, &parts) != nil {
			return nil, badRequest(param, "%s: must be a string or a list of input_text parts", param)
		}
		var b strings.Builder
		for j, p := range parts {
			if p.Type != "input_text" || p.Text == nil {
				return nil, unsupported(fmt.Sprintf("%s[%d]", param, j), "%s[%d]: only input_text parts are supported in a function output", param, j)
			}
			b.WriteString(*p.Text)
		}
		return quote(b.String()), nil
	}
	return nil, badRequest(param, "%s: must be a string or a list of input_text parts", param)
}

// truncate keeps a client's string short enough to quote in an error.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
