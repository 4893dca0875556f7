package messages

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// request is the body of POST /v1/messages. Members it does not list are refused, as
// Anthropic's API refuses them: a field this proxy cannot honour is never dropped in silence.
type request struct {
	Model         string         `json:"model"`
	MaxTokens     *int           `json:"max_tokens"`
	Messages      []message      `json:"messages"`
	System        jsontext.Value `json:"system"`
	StopSequences []string       `json:"stop_sequences"`
	Stream        bool           `json:"stream"`
	Temperature   *float64       `json:"temperature"`
	TopP          *float64       `json:"top_p"`
	TopK          jsontext.Value `json:"top_k"`
	Tools         []tool         `json:"tools"`
	ToolChoice    *toolChoice    `json:"tool_choice"`
	Thinking      jsontext.Value `json:"thinking"`
	// Metadata (user_id) and ServiceTier change nothing in the answer: accepted, not used.
	Metadata    jsontext.Value `json:"metadata"`
	ServiceTier jsontext.Value `json:"service_tier"`
}

type message struct {
	Role    string         `json:"role"`
	Content jsontext.Value `json:"content"`
}

type tool struct {
	Type         string         `json:"type"`
	Name         string         `json:"name"`
	Description  string         `json:"description"`
	InputSchema  jsontext.Value `json:"input_schema"`
	CacheControl jsontext.Value `json:"cache_control"`
}

type toolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
}

// block is one content block of any type the dialect takes; which members a type may carry is
// checked by blockFields.
type block struct {
	Type         string         `json:"type"`
	Text         *string        `json:"text"`
	ID           string         `json:"id"`
	Name         string         `json:"name"`
	Input        jsontext.Value `json:"input"`
	ToolUseID    string         `json:"tool_use_id"`
	Content      jsontext.Value `json:"content"`
	IsError      bool           `json:"is_error"`
	CacheControl jsontext.Value `json:"cache_control"`
	Citations    jsontext.Value `json:"citations"`
}

// blockFields are the members each block type may carry besides type and cache_control.
var blockFields = map[string][]string{
	"text":        {"text", "citations"},
	"tool_use":    {"id", "name", "input"},
	"tool_result": {"tool_use_id", "content", "is_error"},
}

var strict = jsonv2.RejectUnknownMembers(true)

// decoded is a request as the cascade takes it, and what rendering the answer needs of it.
type decoded struct {
	chat cascade.ChatRequest
	// promptTokens estimates the prompt at four characters a token (message_start's
	// input_tokens, before the backend's count arrives; count_tokens).
	promptTokens int
}

// decode validates body and maps it onto a chat request; needMax is false for count_tokens,
// whose body has no max_tokens.
func decode(body []byte, needMax bool) (*decoded, *dialect.Error) {
	if e := scan(body); e != nil {
		return nil, e
	}
	var r request
	if err := jsonv2.Unmarshal(body, &r, strict); err != nil {
		return nil, jsonError(err, "")
	}
	out := &decoded{}
	c := &out.chat
	c.Model = r.Model
	switch {
	case r.Model == "":
		return nil, badRequest("model", "model: Field required")
	case needMax && r.MaxTokens == nil:
		return nil, badRequest("max_tokens", "max_tokens: Field required")
	case r.MaxTokens != nil && *r.MaxTokens < 1:
		return nil, badRequest("max_tokens", "max_tokens: must be at least 1")
	case len(r.Messages) == 0:
		return nil, badRequest("messages", "messages: at least one message is required")
	case r.Temperature != nil && (*r.Temperature < 0 || *r.Temperature > 1):
		return nil, badRequest("temperature", "temperature: %v is not in [0, 1]", *r.Temperature)
	case r.TopP != nil && (*r.TopP < 0 || *r.TopP > 1):
		return nil, badRequest("top_p", "top_p: %v is not in [0, 1]", *r.TopP)
	case present(r.TopK):
		// Neither Ollama's nor OpenAI's chat API takes top_k: it would be dropped in silence.
		return nil, badRequest("top_k", "top_k: not supported by this proxy (its backends' chat APIs do not take it); leave it out")
	}
	if needMax {
		c.MaxTokens = r.MaxTokens
	}
	if present(r.Thinking) {
		var t struct {
			Type string `json:"type"`
		}
		if jsonv2.Unmarshal(r.Thinking, &t) != nil || t.Type != "disabled" {
			return nil, badRequest("thinking", "thinking: extended thinking is not supported by this proxy; leave it out or send {\"type\":\"disabled\"}")
		}
	}
	if e := checkHarmless(&r); e != nil {
		return nil, e
	}
	if len(r.StopSequences) > 0 {
		c.Stop, _ = json.Marshal(r.StopSequences)
	}
	c.Temperature, c.TopP = r.Temperature, r.TopP
	if r.Stream {
		c.Stream = true
		// The usage chunk gives message_delta its output_tokens.
		c.StreamOptions = &cascade.StreamOptions{IncludeUsage: true}
	}
	if present(r.System) {
		text, e := textOf(r.System, "system")
		if e != nil {
			return nil, e
		}
		c.Messages = append(c.Messages, cascade.Message{Role: "system", Content: jsonString(text)})
	}
	for i := range r.Messages {
		msgs, e := chatMessages(&r.Messages[i], i)
		if e != nil {
			return nil, e
		}
		c.Messages = append(c.Messages, msgs...)
	}
	for i, t := range r.Tools {
		param := fmt.Sprintf("tools[%d]", i)
		switch {
		case t.Type != "" && t.Type != "custom":
			return nil, badRequest(param+".type", "%s.type: %q is a server tool, which this proxy does not run; only custom tools (name, description, input_schema) are supported", param, clip(t.Type))
		case t.Name == "":
			return nil, badRequest(param+".name", "%s.name: Field required", param)
		case !isObject(t.InputSchema):
			return nil, badRequest(param+".input_schema", "%s.input_schema: must be a JSON Schema object", param)
		}
		c.Tools = append(c.Tools, cascade.Tool{Type: "function",
			Function: cascade.ToolFunction{Name: t.Name, Description: t.Description, Parameters: json.RawMessage(t.InputSchema)}})
	}
	if r.ToolChoice != nil {
		if e := toolChoiceOf(r.ToolChoice, c); e != nil {
			return nil, e
		}
	}
	out.promptTokens = promptTokens(c)
	return out, nil
}

// checkHarmless refuses metadata and service_tier values that are not what Anthropic takes; what
// they say is not used.
func checkHarmless(r *request) *dialect.Error {
	if present(r.Metadata) && r.Metadata.Kind() != '{' {
		return badRequest("metadata", "metadata: must be an object")
	}
	if present(r.ServiceTier) && r.ServiceTier.Kind() != '"' {
		return badRequest("service_tier", "service_tier: must be a string")
	}
	return nil
}

func toolChoiceOf(tc *toolChoice, c *cascade.ChatRequest) *dialect.Error {
	if tc.DisableParallelToolUse {
		// Ollama takes no such switch: the answer could hold several calls all the same.
		return badRequest("tool_choice.disable_parallel_tool_use", "tool_choice.disable_parallel_tool_use: not supported by this proxy; leave it out")
	}
	switch tc.Type {
	case "auto":
		c.ToolChoice = json.RawMessage(`"auto"`)
	case "any":
		c.ToolChoice = json.RawMessage(`"required"`)
	case "none":
		c.ToolChoice = json.RawMessage(`"none"`)
	case "tool":
		if tc.Name == "" {
			return badRequest("tool_choice.name", "tool_choice.name: Field required for type tool")
		}
		c.ToolChoice, _ = json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}})
	default:
		return badRequest("tool_choice.type", "tool_choice.type: must be one of auto, any, tool, none")
	}
	if tc.Type != "tool" && tc.Name != "" {
		return badRequest("tool_choice.name", "tool_choice.name: only with type tool")
	}
	return nil
}

// chatMessages maps one Anthropic message onto chat messages: a user message's tool_result
// blocks become tool messages (first, as the chat API wants them right after the assistant's
// calls), its text one user message; an assistant message's text and tool_use blocks become one
// assistant message with tool calls.
func chatMessages(m *message, i int) ([]cascade.Message, *dialect.Error) {
	param := fmt.Sprintf("messages[%d]", i)
	if m.Role != "user" && m.Role != "assistant" {
		return nil, badRequest(param+".role", "%s.role: must be user or assistant (the system prompt goes in system)", param)
	}
	if !present(m.Content) {
		return nil, badRequest(param+".content", "%s.content: Field required", param)
	}
	if m.Content.Kind() == '"' {
		var s string
		if jsonv2.Unmarshal(m.Content, &s) != nil {
			return nil, badRequest(param+".content", "%s.content: not a valid string", param)
		}
		return []cascade.Message{{Role: m.Role, Content: jsonString(s)}}, nil
	}
	blocks, e := blocksOf(m.Content, param+".content")
	if e != nil {
		return nil, e
	}
	var (
		out   []cascade.Message
		texts []string
		calls []cascade.ToolCall
	)
	for j := range blocks {
		b := &blocks[j]
		bp := fmt.Sprintf("%s.content[%d]", param, j)
		switch b.Type {
		case "text":
			texts = append(texts, *b.Text)
		case "tool_use":
			if m.Role != "assistant" {
				return nil, badRequest(bp+".type", "%s.type: tool_use blocks belong in assistant messages", bp)
			}
			if b.ID == "" || b.Name == "" {
				return nil, badRequest(bp, "%s: tool_use needs an id and a name", bp)
			}
			if !isObject(b.Input) {
				return nil, badRequest(bp+".input", "%s.input: must be an object", bp)
			}
			var args bytes.Buffer
			if json.Compact(&args, b.Input) != nil {
				return nil, badRequest(bp+".input", "%s.input: must be an object", bp)
			}
			calls = append(calls, cascade.ToolCall{ID: b.ID, Type: "function", Function: cascade.ToolCallFunction{Name: b.Name, Arguments: args.String()}})
		case "tool_result":
			if m.Role != "user" {
				return nil, badRequest(bp+".type", "%s.type: tool_result blocks belong in user messages", bp)
			}
			if b.ToolUseID == "" {
				return nil, badRequest(bp+".tool_use_id", "%s.tool_use_id: Field required", bp)
			}
			text := ""
			if present(b.Content) {
				var e *dialect.Error
				if text, e = textOf(b.Content, bp+".content"); e != nil {
					return nil, e
				}
			}
			if b.IsError {
				// The chat API's tool message has no error flag: the text says it.
				text = "Error: " + text
			}
			out = append(out, cascade.Message{Role: "tool", ToolCallID: b.ToolUseID, Content: jsonString(text)})
		}
	}
	switch {
	case m.Role == "assistant":
		am := cascade.Message{Role: "assistant", ToolCalls: calls}
		if len(texts) > 0 || len(calls) == 0 {
			am.Content = jsonString(strings.Join(texts, "\n"))
		}
		out = append(out, am)
	case len(texts) > 0 || len(out) == 0:
		out = append(out, cascade.Message{Role: "user", Content: jsonString(strings.Join(texts, "\n"))})
	}
	return out, nil
}

// blocksOf decodes an array of content blocks, refusing the types this proxy cannot honour and
// members a type does not carry.
func blocksOf(raw jsontext.Value, param string) ([]block, *dialect.Error) {
	if raw.Kind() != '[' {
		return nil, badRequest(param, "%s: must be a string or an array of content blocks", param)
	}
	var items []jsontext.Value
	if err := jsonv2.Unmarshal(raw, &items); err != nil {
		return nil, badRequest(param, "%s: must be a string or an array of content blocks", param)
	}
	out := make([]block, len(items))
	for j, it := range items {
		bp := fmt.Sprintf("%s[%d]", param, j)
		var typ struct {
			Type string `json:"type"`
		}
		if it.Kind() != '{' || jsonv2.Unmarshal(it, &typ) != nil || typ.Type == "" {
			return nil, badRequest(bp, "%s: must be a content block, an object with a type", bp)
		}
		allowed, ok := blockFields[typ.Type]
		if !ok {
			return nil, badRequest(bp+".type", "%s.type: %q blocks are not supported by this proxy (text, tool_use and tool_result are)", bp, clip(typ.Type))
		}
		var members map[string]jsontext.Value
		if err := jsonv2.Unmarshal(it, &members); err != nil {
			return nil, badRequest(bp, "%s: must be a content block, an object with a type", bp)
		}
		for name := range members {
			if name != "type" && name != "cache_control" && !contains(allowed, name) {
				return nil, badRequest(bp+"."+clip(name), "%s.%s: not a member of a %s block", bp, clip(name), typ.Type)
			}
		}
		if err := jsonv2.Unmarshal(it, &out[j]); err != nil {
			return nil, jsonError(err, bp)
		}
		b := &out[j]
		if b.Type == "text" {
			if b.Text == nil {
				return nil, badRequest(bp+".text", "%s.text: Field required", bp)
			}
			if present(b.Citations) {
				return nil, badRequest(bp+".citations", "%s.citations: not supported by this proxy", bp)
			}
		}
	}
	return out, nil
}

// textOf reads a string or an array of text blocks (system, a tool_result's content) as one text.
func textOf(raw jsontext.Value, param string) (string, *dialect.Error) {
	if raw.Kind() == '"' {
		var s string
		if jsonv2.Unmarshal(raw, &s) != nil {
			return "", badRequest(param, "%s: not a valid string", param)
		}
		return s, nil
	}
	blocks, e := blocksOf(raw, param)
	if e != nil {
		return "", e
	}
	texts := make([]string, 0, len(blocks))
	for j := range blocks {
		if blocks[j].Type != "text" {
			bp := fmt.Sprintf("%s[%d]", param, j)
			return "", badRequest(bp+".type", "%s.type: only text blocks may appear here", bp)
		}
		texts = append(texts, *blocks[j].Text)
	}
	return strings.Join(texts, "\n"), nil
}

// promptTokens estimates the prompt's tokens at four characters a token: its texts, tool calls
// and tool definitions.
func promptTokens(c *cascade.ChatRequest) int {
	n := 0
	for i := range c.Messages {
		m := &c.Messages[i]
		n += cascade.EstimateTokens(m.Text())
		for _, tc := range m.ToolCalls {
			n += cascade.EstimateTokens(tc.Function.Name) + cascade.EstimateTokens(tc.Function.Arguments)
		}
	}
	for _, t := range c.Tools {
		n += cascade.EstimateTokens(t.Function.Name) + cascade.EstimateTokens(t.Function.Description) +
			cascade.EstimateTokens(string(t.Function.Parameters))
	}
	return n
}

// jsonError names the field a decode failed at; prefix names the value that was decoded, "" for
// the body.
func jsonError(err error, prefix string) *dialect.Error {
	var se *jsonv2.SemanticError
	var sy *jsontext.SyntacticError
	switch {
	case errors.As(err, &se) && errors.Is(se.Err, jsonv2.ErrUnknownName):
		p := param(prefix, se.JSONPointer)
		return badRequest(p, "%s: Extra inputs are not permitted (not a field this proxy supports)", p)
	case errors.As(err, &se) && se.JSONPointer != "":
		p := param(prefix, se.JSONPointer)
		want := "a value of another type"
		if se.GoType != nil {
			want = typeName(se.GoType.String())
		}
		return badRequest(p, "%s: expected %s", p, want)
	case errors.As(err, &sy) && errors.Is(sy.Err, jsontext.ErrDuplicateName):
		p := param(prefix, sy.JSONPointer)
		return badRequest(p, "%s: sent twice", p)
	case errors.As(err, &sy):
		return badRequest("", "malformed JSON at byte %d", sy.ByteOffset)
	}
	return badRequest(prefix, "%s: must be a JSON object", cmp.Or(prefix, "request body"))
}

// typeName says a Go type in JSON's words.
func typeName(t string) string {
	t = strings.TrimPrefix(t, "*")
	switch {
	case t == "string":
		return "a string"
	case t == "int" || t == "int64":
		return "an integer"
	case t == "float64":
		return "a number"
	case t == "bool":
		return "a boolean"
	case strings.HasPrefix(t, "[]"):
		return "an array"
	}
	return "an object"
}

// param turns a JSON pointer into the field's name: /messages/0/content → messages[0].content.
func param(prefix string, p jsontext.Pointer) string {
	var b strings.Builder
	b.WriteString(prefix)
	for tok := range p.Tokens() {
		if _, err := strconv.Atoi(tok); err == nil && tok != "" {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(clip(tok))
	}
	return b.String()
}

// clip bounds a client's name in an error message.
func clip(s string) string {
	const most = 64
	if len(s) > most {
		return strconv.Quote(s[:most]) + "…"
	}
	return s
}

func badRequest(param, format string, a ...any) *dialect.Error {
	return &dialect.Error{Status: 400, Type: "invalid_request_error", Param: param, Message: fmt.Sprintf(format, a...)}
}

// present reports whether a raw member was sent and is not null.
func present(v jsontext.Value) bool { return len(v) > 0 && v.Kind() != 'n' }

func isObject(v jsontext.Value) bool { return len(v) > 0 && v.Kind() == '{' }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
