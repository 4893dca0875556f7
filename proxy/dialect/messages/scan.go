package messages

import (
	"bytes"
	"fmt"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// Bounds on what one body may hold, every dialect's (package dialect): decoding builds at
// most a small multiple of the body's bytes whatever its shape. A model's context is far below
// all of them; tools is OpenAI's bound, which Anthropic's is not above.
const (
	maxMessages = dialect.MaxMessages
	maxBlocks   = dialect.MaxParts // content blocks over all messages, system and tool results included
	maxTools    = dialect.MaxTools
	maxStop     = dialect.MaxStop
	maxDepth    = dialect.MaxDepth
)

// scanFewest is the smallest count bound: an array with more elements needs at least as many
// commas in the body.
const scanFewest = min(maxMessages, maxBlocks, maxTools, maxStop)

// role is what an open array or object is in the request.
type role uint8

const (
	roleOther    role = iota
	roleRoot          // the body's object
	roleMessages      // the messages array
	roleMessage       // one message
	roleBlocks        // a content, system or tool_result content array
	roleBlock         // one block in it
)

type counter struct {
	param string
	limit int
	n     int
}

type frame struct {
	object   bool
	wantName bool
	role     role
	name     string   // an object's last member name, when its role is one whose members matter
	count    *counter // an array whose elements count against a bound
}

// scan walks body's tokens, building no values, and refuses it at the first array with more
// elements than its bound or the first value nested deeper than maxDepth. A body that is not
// JSON passes: the decode that follows says where it breaks. A body too short to exceed any
// bound is not walked.
func scan(body []byte) *dialect.Error {
	if bytes.Count(body, []byte{','}) < scanFewest &&
		bytes.Count(body, []byte{'{'})+bytes.Count(body, []byte{'['}) <= maxDepth {
		return nil
	}
	var (
		messages = counter{param: "messages", limit: maxMessages}
		blocks   = counter{param: "content blocks over all messages", limit: maxBlocks}
		tools    = counter{param: "tools", limit: maxTools}
		stop     = counter{param: "stop_sequences", limit: maxStop}
	)
	d := jsontext.NewDecoder(bytes.NewReader(body), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	stack := make([]frame, 0, 16)
	for {
		tok, err := d.ReadToken()
		if err != nil {
			return nil
		}
		k := tok.Kind()
		var f *frame
		if n := len(stack); n > 0 {
			f = &stack[n-1]
		}
		if f != nil && f.object {
			if f.wantName && k == '"' {
				f.wantName = false
				if f.role != roleOther {
					f.name = tok.String()
				}
				continue
			}
			f.wantName = true
		}
		if f != nil && f.count != nil && k != ']' {
			if f.count.n++; f.count.n > f.count.limit {
				return &dialect.Error{Status: 400, Type: "invalid_request_error", Code: "array_above_max_length", Param: paramOf(f.count),
					Message: fmt.Sprintf("%s: more than %d in one request", f.count.param, f.count.limit)}
			}
		}
		switch k {
		case '{', '[':
			if d.StackDepth() > maxDepth {
				return &dialect.Error{Status: 400, Type: "invalid_request_error", Code: "nesting_too_deep",
					Message: fmt.Sprintf("request body: arrays and objects nested more than %d deep", maxDepth)}
			}
			next := frame{object: k == '{', wantName: k == '{'}
			switch {
			case f == nil:
				next.role = roleRoot
			case k == '{' && f.role == roleMessages:
				next.role = roleMessage
			case k == '{' && f.role == roleBlocks:
				next.role = roleBlock
			case k == '[' && f.object:
				switch {
				case f.role == roleRoot && f.name == "messages":
					next.role, next.count = roleMessages, &messages
				case f.role == roleRoot && f.name == "system",
					f.role == roleMessage && f.name == "content",
					f.role == roleBlock && f.name == "content":
					next.role, next.count = roleBlocks, &blocks
				case f.role == roleRoot && f.name == "tools":
					next.count = &tools
				case f.role == roleRoot && f.name == "stop_sequences":
					next.count = &stop
				}
			}
			stack = append(stack, next)
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		}
	}
}

// paramOf names the field a count bounds; blocks are spread over several fields, so none.
func paramOf(c *counter) string {
	if c.param == "content blocks over all messages" {
		return ""
	}
	return c.param
}
