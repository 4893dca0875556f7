package backends

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ollama/ollama/api"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// invalidRequest is a request Ollama cannot be given; it reaches the client as a 400.
type invalidRequest struct {
	param string
	msg   string
}

func (e *invalidRequest) Error() string { return e.msg }

func invalid(param, format string, a ...any) *invalidRequest {
	return &invalidRequest{param: param, msg: fmt.Sprintf(format, a...)}
}

// maxTopLogprobs is OpenAI's bound on top_logprobs.
const maxTopLogprobs = 20

// ollamaRequest is api.ChatRequest with its options in a struct of the ones this proxy sets:
// the same JSON, without a map whose values are boxed and whose keys are sorted per call.
type ollamaRequest struct {
	api.ChatRequest
	Options *ollamaOptions `json:"options"` // nil: null, as api.ChatRequest's nil map
	opts    ollamaOptions
}

// ollamaOptions are the sampling options a chat request maps onto, in the order encoding/json
// writes a map's keys; fields the client left out stay out, so the model's own defaults apply.
type ollamaOptions struct {
	FrequencyPenalty *float64 `json:"frequency_penalty,omitempty"`
	NumPredict       int      `json:"num_predict,omitempty"`
	PresencePenalty  *float64 `json:"presence_penalty,omitempty"`
	Seed             *int64   `json:"seed,omitempty"`
	Stop             []string `json:"stop,omitempty"`
	Temperature      *float64 `json:"temperature,omitempty"`
	TopP             *float64 `json:"top_p,omitempty"`
}

// toOllama maps an OpenAI chat request onto Ollama's native /api/chat request.
func toOllama(req *cascade.Request) (*ollamaRequest, error) {
	c := &req.Chat
	if c.N != nil && *c.N > 1 {
		return nil, invalid("n", "n > 1 is not supported by Ollama backends")
	}
	out := &ollamaRequest{ChatRequest: api.ChatRequest{Model: c.Model, Logprobs: c.Logprobs != nil && *c.Logprobs}}
	if c.TopLogprobs != nil {
		if *c.TopLogprobs < 0 || *c.TopLogprobs > maxTopLogprobs {
			return nil, invalid("top_logprobs", "top_logprobs: %d is not in [0, %d]", *c.TopLogprobs, maxTopLogprobs)
		}
		out.TopLogprobs = *c.TopLogprobs
	}
	msgs, err := ollamaMessages(c.Messages)
	if err != nil {
		return nil, err
	}
	out.Messages = msgs
	if !toolChoiceNone(c.ToolChoice) {
		if out.Tools, err = ollamaTools(c.Tools); err != nil {
			return nil, err
		}
	}
	if out.opts = optionsOf(c); !out.opts.empty() {
		out.Options = &out.opts
	}
	if out.Format, err = ollamaFormat(c.ResponseFormat); err != nil {
		return nil, err
	}
	if out.Think, err = ollamaThink(req.Raw); err != nil {
		return nil, err
	}
	return out, nil
}

func ollamaMessages(in []cascade.Message) ([]api.Message, error) {
	out := make([]api.Message, 0, len(in))
	for i := range in {
		m := &in[i]
		out = append(out, api.Message{Role: m.Role, ToolCallID: m.ToolCallID})
		om := &out[i] // filled in place: a local api.Message would escape, one allocation a message
		switch m.Role {
		case "developer":
			om.Role = "system"
		case "function": // the legacy shape of a tool result
			om.Role = "tool"
		}
		if err := ollamaContent(m.Content, om, i); err != nil {
			return nil, err
		}
		for j, tc := range m.ToolCalls {
			args := api.NewToolCallFunctionArguments()
			if s := strings.TrimSpace(tc.Function.Arguments); s != "" {
				if err := json.Unmarshal([]byte(s), &args); err != nil {
					return nil, invalid(fmt.Sprintf("messages[%d].tool_calls[%d].function.arguments", i, j), "tool call arguments are not a JSON object: %v", err)
				}
			}
			om.ToolCalls = append(om.ToolCalls, api.ToolCall{ID: tc.ID, Function: api.ToolCallFunction{Index: j, Name: tc.Function.Name, Arguments: args}})
		}
		if om.Role == "tool" {
			om.ToolName = m.Name
			if om.ToolName == "" && m.ToolCallID != "" {
				om.ToolName = toolNameByID(in[:i], m.ToolCallID)
			}
		}
	}
	return out, nil
}

// toolNameByID finds the function an earlier assistant message called under id (the latest wins).
func toolNameByID(prev []cascade.Message, id string) string {
	for i := len(prev) - 1; i >= 0; i-- {
		for _, tc := range prev[i].ToolCalls {
			if tc.ID == id {
				return tc.Function.Name
			}
		}
	}
	return ""
}

// contentPart is one element of an array content, image_url as an object or a bare string.
type contentPart struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	Refusal  string          `json:"refusal"`
	ImageURL json.RawMessage `json:"image_url"`
}

// ollamaContent sets om's text and images from an OpenAI content: a string, or parts whose texts
// are joined by newlines and whose data: URL images are decoded.
func ollamaContent(raw json.RawMessage, om *api.Message, msg int) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	switch raw[0] {
	case '"':
		if s, ok := cascade.PlainString(raw); ok {
			om.Content = s
			return nil
		}
		return json.Unmarshal(raw, &om.Content)
	case '[':
	default:
		return invalid(fmt.Sprintf("messages[%d].content", msg), "content must be a string or an array of content parts")
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return invalid(fmt.Sprintf("messages[%d].content", msg), "invalid content parts: %v", err)
	}
	var text strings.Builder
	addText := func(s string) {
		if text.Len() > 0 {
			text.WriteByte('\n')
		}
		text.WriteString(s)
	}
	for j, p := range parts {
		switch p.Type {
		case "text":
			addText(p.Text)
		case "refusal":
			addText(p.Refusal)
		case "image_url":
			img, err := imageData(p.ImageURL)
			if err != nil {
				return invalid(fmt.Sprintf("messages[%d].content[%d].image_url", msg, j), "%v", err)
			}
			om.Images = append(om.Images, img)
		default:
			return invalid(fmt.Sprintf("messages[%d].content[%d].type", msg, j), "content part type %q is not supported by Ollama backends", p.Type)
		}
	}
	om.Content = text.String()
	return nil
}

// imageData decodes an image_url ({"url": ...} or a bare string) holding a base64 data: URL.
func imageData(raw json.RawMessage) (api.ImageData, error) {
	var u string
	if len(raw) > 0 && raw[0] == '"' {
		_ = json.Unmarshal(raw, &u)
	} else {
		var obj struct {
			URL string `json:"url"`
		}
		_ = json.Unmarshal(raw, &obj)
		u = obj.URL
	}
	if strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") {
		return nil, fmt.Errorf("image URLs are not fetched for Ollama backends; send the image as a base64 data: URL")
	}
	rest, ok := strings.CutPrefix(u, "data:")
	if !ok {
		return nil, fmt.Errorf("image_url must be a base64 data: URL")
	}
	meta, data, ok := strings.Cut(rest, ",")
	if !ok || !strings.HasSuffix(meta, ";base64") {
		return nil, fmt.Errorf("image_url must be a base64 data: URL")
	}
	img, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		if img, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(data, "=")); err != nil {
			return nil, fmt.Errorf("image data is not valid base64")
		}
	}
	return img, nil
}

func toolChoiceNone(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == `"none"`
}

func ollamaTools(in []cascade.Tool) (api.Tools, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(api.Tools, 0, len(in))
	for i, t := range in {
		if t.Type != "" && t.Type != "function" {
			return nil, invalid(fmt.Sprintf("tools[%d].type", i), "tool type %q is not supported by Ollama backends", t.Type)
		}
		fn := api.ToolFunction{Name: t.Function.Name, Description: t.Function.Description}
		if p := bytes.TrimSpace(t.Function.Parameters); len(p) > 0 && string(p) != "null" {
			if err := json.Unmarshal(p, &fn.Parameters); err != nil {
				return nil, invalid(fmt.Sprintf("tools[%d].function.parameters", i), "invalid parameters schema: %v", err)
			}
		} else {
			fn.Parameters.Type = "object"
			fn.Parameters.Properties = api.NewToolPropertiesMap()
		}
		out = append(out, api.Tool{Type: "function", Function: fn})
	}
	return out, nil
}

// optionsOf maps the sampling fields onto Ollama's options.
func optionsOf(c *cascade.ChatRequest) ollamaOptions {
	o := ollamaOptions{Temperature: c.Temperature, TopP: c.TopP, Seed: c.Seed,
		PresencePenalty: c.PresencePenalty, FrequencyPenalty: c.FrequencyPenalty}
	if n := c.MaxOutputTokens(); n > 0 {
		o.NumPredict = n
	}
	if stop := c.StopWords(); len(stop) > 0 {
		o.Stop = stop
	}
	return o
}

func (o *ollamaOptions) empty() bool {
	return o.FrequencyPenalty == nil && o.NumPredict == 0 && o.PresencePenalty == nil && o.Seed == nil &&
		len(o.Stop) == 0 && o.Temperature == nil && o.TopP == nil
}

var formatJSON = json.RawMessage(`"json"`)

// ollamaFormat maps response_format: json_object to "json", json_schema to the schema itself.
func ollamaFormat(rf *cascade.ResponseFormat) (json.RawMessage, error) {
	if rf == nil {
		return nil, nil
	}
	switch rf.Type {
	case "", "text":
		return nil, nil
	case "json_object":
		return formatJSON, nil
	case "json_schema":
		if rf.JSONSchema == nil {
			return formatJSON, nil
		}
		schema := bytes.TrimSpace(rf.JSONSchema.Schema)
		switch {
		case len(schema) == 0 || string(schema) == "null":
			return formatJSON, nil
		case schema[0] != '{':
			return nil, invalid("response_format.json_schema.schema", "response_format.json_schema.schema must be a JSON object")
		}
		return schema, nil
	}
	return nil, invalid("response_format.type", "response_format type %q is not supported by Ollama backends", rf.Type)
}

var (
	reasoningEffortKey = []byte(`"reasoning_effort"`)
	thinkKey           = []byte(`"think"`)
)

// ollamaThink maps OpenAI's reasoning_effort (kept in the raw body) onto Ollama's think, else
// passes on Ollama's own think (true, false, "low", "medium" or "high") when the client sent it.
// Any other value of either is refused.
func ollamaThink(raw json.RawMessage) (*api.ThinkValue, error) {
	if !bytes.Contains(raw, reasoningEffortKey) && !bytes.Contains(raw, thinkKey) {
		return nil, nil
	}
	var r struct {
		ReasoningEffort *string         `json:"reasoning_effort"`
		Think           json.RawMessage `json:"think"`
	}
	if json.Unmarshal(raw, &r) != nil {
		return nil, nil
	}
	if r.ReasoningEffort != nil {
		switch e := *r.ReasoningEffort; e {
		case "none":
			return &api.ThinkValue{Value: false}, nil
		case "minimal", "low":
			return &api.ThinkValue{Value: "low"}, nil
		case "medium", "high":
			return &api.ThinkValue{Value: e}, nil
		default:
			return nil, invalid("reasoning_effort", "reasoning_effort %q is not one of none, minimal, low, medium, high", e)
		}
	}
	switch t := string(bytes.TrimSpace(r.Think)); t {
	case "", "null":
		return nil, nil
	case "true", "false":
		return &api.ThinkValue{Value: t == "true"}, nil
	case `"low"`, `"medium"`, `"high"`:
		return &api.ThinkValue{Value: strings.Trim(t, `"`)}, nil
	default:
		return nil, invalid("think", "think must be true, false, \"low\", \"medium\" or \"high\"")
	}
}
