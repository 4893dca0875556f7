package proxy

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// Bounds on what one request body may hold, so that decoding it builds at most a small multiple
// of its bytes whatever its shape: a message decodes into a struct thirty times the size of the
// three bytes `{},` that make an empty one, so an unbounded count of them is the amplifier.
// The limits are every dialect's (package dialect), far beyond what a model's context holds.
const (
	maxMessages     = dialect.MaxMessages
	maxContentParts = dialect.MaxParts
	maxToolCalls    = dialect.MaxToolCalls
	maxTools        = dialect.MaxTools
	maxStop         = dialect.MaxStop
	maxDepth        = dialect.MaxDepth
)

// scanFewest is the smallest count bound: an array with more elements needs at least as many
// commas in the body.
const scanFewest = min(maxMessages, maxContentParts, maxToolCalls, maxTools, maxStop, maxEmbedInputs)

// bodyKind tells scanBody which endpoint's fields it reads.
type bodyKind uint8

const (
	scanChat bodyKind = iota
	scanEmbeddings
)

// scanCount counts the elements of the arrays under one bound; the arrays of one field in
// several messages, or of a field sent twice, count together.
type scanCount struct {
	param string // the field, for the error
	what  string // what its elements are, for the error
	limit int
	n     int
}

// scanFrame is one open object or array while scanning.
type scanFrame struct {
	object   bool
	wantName bool       // an object's next token is a name (or its end)
	role     scanRole   // what this value is in the request
	field    scanField  // an object's last name, when its role is one whose fields matter
	count    *scanCount // an array whose elements count against a bound
}

type scanRole uint8

const (
	roleOther    scanRole = iota
	roleRoot              // the body's object
	roleMessages          // the messages array
	roleMessage           // one message
)

type scanField uint8

const (
	fieldOther scanField = iota
	fieldMessages
	fieldTools
	fieldStop
	fieldInput
	fieldContent
	fieldToolCalls
)

// scanBody walks body's tokens, building no values, and refuses the body at the first array that
// holds more elements than its bound allows, or the first value nested deeper than maxDepth. It
// says nothing about a body that is not JSON: the decode that follows reports that, and the walk
// has proven that the part it decodes before the error is within the bounds. Field names match
// as the decoder matches them, case-insensitively. A body too short to exceed any bound (fewer
// commas than the smallest count, fewer brackets than the depth) is not walked at all.
func scanBody(body []byte, kind bodyKind) *APIError {
	if bytes.Count(body, []byte{','}) < scanFewest &&
		bytes.Count(body, []byte{'{'})+bytes.Count(body, []byte{'['}) <= maxDepth {
		return nil
	}
	var (
		messages = scanCount{param: "messages", what: "messages", limit: maxMessages}
		parts    = scanCount{param: "messages[%d].content", what: "content parts over all messages", limit: maxContentParts}
		calls    = scanCount{param: "messages[%d].tool_calls", what: "tool calls over all messages", limit: maxToolCalls}
		tools    = scanCount{param: "tools", what: "tools", limit: maxTools}
		stop     = scanCount{param: "stop", what: "stop sequences", limit: maxStop}
		inputs   = scanCount{param: "input", what: "texts", limit: maxEmbedInputs}
	)
	// A bytes.Buffer is read in place, not copied.
	d := jsontext.NewDecoder(bytes.NewBuffer(body), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	stack := make([]scanFrame, 0, 16)
	for {
		tok, err := d.ReadToken()
		if err != nil {
			return nil // the end, or not JSON: the decode says which
		}
		k := tok.Kind()
		var f *scanFrame
		if n := len(stack); n > 0 {
			f = &stack[n-1]
		}
		if f != nil && f.object {
			if f.wantName && k == '"' {
				f.wantName = false
				if f.role == roleRoot || f.role == roleMessage {
					f.field = nameField(tok.String(), f.role, kind)
				}
				continue
			}
			f.wantName = true
		}
		if f != nil && f.count != nil && k != ']' {
			c := f.count
			if c.n++; c.n > c.limit {
				param := c.param
				if strings.Contains(param, "%d") {
					param = fmt.Sprintf(param, messages.n-1)
				}
				return &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "array_above_max_length",
					Param: param, Message: fmt.Sprintf("%s: more than %d %s in one request", param, c.limit, c.what)}
			}
		}
		switch k {
		case '{', '[':
			if d.StackDepth() > maxDepth {
				return &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "nesting_too_deep",
					Message: fmt.Sprintf("request body: arrays and objects nested more than %d deep", maxDepth)}
			}
			next := scanFrame{object: k == '{', wantName: k == '{'}
			switch {
			case f == nil:
				next.role = roleRoot
			case f.role == roleMessages && k == '{':
				next.role = roleMessage
			case k == '[' && f.object:
				switch f.field {
				case fieldMessages:
					next.role, next.count = roleMessages, &messages
				case fieldTools:
					next.count = &tools
				case fieldStop:
					next.count = &stop
				case fieldInput:
					next.count = &inputs
				case fieldContent:
					next.count = &parts
				case fieldToolCalls:
					next.count = &calls
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

// nameField says which bounded field name is, in an object of role.
func nameField(name string, role scanRole, kind bodyKind) scanField {
	switch {
	case role == roleMessage && strings.EqualFold(name, "content"):
		return fieldContent
	case role == roleMessage && strings.EqualFold(name, "tool_calls"):
		return fieldToolCalls
	case role != roleRoot:
	case kind == scanEmbeddings:
		if strings.EqualFold(name, "input") {
			return fieldInput
		}
	case strings.EqualFold(name, "messages"):
		return fieldMessages
	case strings.EqualFold(name, "tools"):
		return fieldTools
	case strings.EqualFold(name, "stop"):
		return fieldStop
	}
	return fieldOther
}
