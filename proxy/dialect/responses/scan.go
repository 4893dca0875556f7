package responses

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// Bounds on one request body, every dialect's (package dialect) for the same things, so that
// decoding builds at most a small multiple of the body's bytes whatever its shape.
const (
	maxItems    = dialect.MaxMessages // input items
	maxParts    = dialect.MaxParts    // content parts, over all items (a function_call_output's output counts)
	maxTools    = dialect.MaxTools
	maxInclude  = 64 // include values
	maxMetadata = 16 // metadata keys, OpenAI's own bound
	maxDepth    = dialect.MaxDepth
)

// metadata bounds, OpenAI's: a key of at most 64 characters, a value of at most 512.
const (
	maxMetadataKey   = 64
	maxMetadataValue = 512
)

// knownFields are the request's top-level fields, lower-cased (the decoder matches names
// case-insensitively, as encoding/json does). Every other name is refused: the chat request the
// dialect builds carries only what it understood, so an unknown field would be dropped silently.
var knownFields = map[string]bool{
	"model": true, "input": true, "instructions": true, "tools": true, "tool_choice": true,
	"max_output_tokens": true, "temperature": true, "top_p": true, "text": true, "stream": true,
	"stream_options": true, "store": true, "previous_response_id": true, "metadata": true,
	"user": true, "parallel_tool_calls": true, "truncation": true, "reasoning": true,
	"include": true, "background": true, "conversation": true, "prompt": true,
	"max_tool_calls": true, "top_logprobs": true, "service_tier": true, "safety_identifier": true,
	"prompt_cache_key": true, "prompt_cache_retention": true, "prompt_cache_options": true,
	"context_management": true, "moderation": true,
}

type scanCount struct {
	param, what string
	limit, n    int
}

type scanFrame struct {
	object   bool
	wantName bool
	root     bool       // the body's object
	item     bool       // an object directly in input
	name     string     // an object's last name, lower-cased, for root and item objects
	count    *scanCount // an array (or metadata's object) whose elements count against a bound
	items    bool       // the input array
}

// scan walks body's tokens, building no values: it refuses an unknown top-level field, an array
// longer than its bound, and nesting deeper than maxDepth. A body that is not JSON passes: the
// decode that follows says where it breaks.
func scan(body []byte) *dialect.Error {
	var (
		items    = scanCount{param: "input", what: "input items", limit: maxItems}
		parts    = scanCount{param: "input[%d].content", what: "content parts over all input items", limit: maxParts}
		tools    = scanCount{param: "tools", what: "tools", limit: maxTools}
		include  = scanCount{param: "include", what: "include values", limit: maxInclude}
		metadata = scanCount{param: "metadata", what: "metadata keys", limit: maxMetadata}
	)
	d := jsontext.NewDecoder(bytes.NewBuffer(body), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	stack := make([]scanFrame, 0, 16)
	for {
		tok, err := d.ReadToken()
		if err != nil {
			return nil
		}
		k := tok.Kind()
		var f *scanFrame
		if n := len(stack); n > 0 {
			f = &stack[n-1]
		}
		if f != nil && f.object {
			if f.wantName && k == '"' {
				f.wantName = false
				if f.root || f.item {
					f.name = strings.ToLower(tok.String())
				}
				if f.root && !knownFields[f.name] {
					name := tok.String()
					if len(name) > 64 {
						name = name[:64] + "…"
					}
					return unsupported(name, "%s: not a parameter this proxy supports for /v1/responses", name)
				}
				if f.count != nil {
					if e := f.count.add(items.n); e != nil {
						return e
					}
				}
				continue
			}
			f.wantName = true
		}
		if f != nil && !f.object && f.count != nil && k != ']' {
			if e := f.count.add(items.n); e != nil {
				return e
			}
		}
		switch k {
		case '{', '[':
			if d.StackDepth() > maxDepth {
				return &dialect.Error{Status: statusBadRequest, Type: "invalid_request_error", Code: "nesting_too_deep",
					Message: fmt.Sprintf("request body: arrays and objects nested more than %d deep", maxDepth)}
			}
			next := scanFrame{object: k == '{', wantName: k == '{'}
			switch {
			case f == nil:
				next.root = k == '{'
			case f.items && k == '{':
				next.item = true
			case f.root && k == '[':
				switch f.name {
				case "input":
					next.items, next.count = true, &items
				case "tools":
					next.count = &tools
				case "include":
					next.count = &include
				}
			case f.root && k == '{' && f.name == "metadata":
				next.count = &metadata
			case f.item && k == '[' && (f.name == "content" || f.name == "output"):
				next.count = &parts
			}
			stack = append(stack, next)
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		}
	}
}

// add counts one element; item is the count of input items so far, for the error's param.
func (c *scanCount) add(item int) *dialect.Error {
	if c.n++; c.n <= c.limit {
		return nil
	}
	param := c.param
	if strings.Contains(param, "%d") {
		param = fmt.Sprintf(param, item-1)
	}
	return &dialect.Error{Status: statusBadRequest, Type: "invalid_request_error", Code: "array_above_max_length",
		Param: param, Message: fmt.Sprintf("%s: more than %d %s in one request", param, c.limit, c.what)}
}
