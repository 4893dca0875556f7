package proxy

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// decodeChatCommon decodes a chat body of the shape nearly every call sends into b, exactly as
// jsonv1.Unmarshal would, and reports whether it did: the fields model, messages (role, content
// as a string, name, tool_call_id), stream and its include_usage, the sampling numbers, stop,
// user, think and reasoning_effort, each once, spelled in lower case, none null. Any other body, valid or not,
// it leaves to the library (false), and b is then as it came: b.Messages empty, on its backing.
// It reads the body once and touches far less code than the reflective decoder, which is what a
// fresh call pays for in a server whose caches other processes keep evicting. It is hand-written
// on purpose and stays only while it earns the 5 % a hand-written hot path has to, end to end
// (scripts/bench-ab.sh -phases neural); FuzzDecodeChatCommon holds it to jsonv1. A message's
// content is the body's own bytes (capacity clipped), not a copy: the body is kept as long as
// the request, and nothing modifies either.
func decodeChatCommon(body []byte, b *chatBody) bool {
	msgs := b.Messages[:0]
	c := chatScan{b: body}
	if !c.decode(b) {
		clear(msgs[:cap(msgs)]) // what it decoded there, also when the messages grew past it
		*b.ChatRequest = cascade.ChatRequest{Messages: msgs}
		b.thinkFields = thinkFields{}
		return false
	}
	return true
}

// chatScan reads one body; p is the offset of the next byte.
type chatScan struct {
	b []byte
	p int
}

// The top-level fields decodeChatCommon takes, as bits of a set, so a field sent twice (which
// jsonv1 merges or replaces by its own rules) goes to the library.
const (
	ccModel uint32 = 1 << iota
	ccMessages
	ccStream
	ccTemperature
	ccTopP
	ccN
	ccMaxTokens
	ccMaxCompletionTokens
	ccStop
	ccSeed
	ccPresencePenalty
	ccFrequencyPenalty
	ccUser
	ccThink
	ccReasoningEffort
	ccStreamOptions
)

func (c *chatScan) decode(b *chatBody) bool {
	if !c.next('{') {
		return false
	}
	var seen uint32
	for empty := c.next('}'); !empty; {
		name, ok := c.plainString()
		if !ok || !c.next(':') {
			return false
		}
		var bit uint32
		switch string(name) {
		case "model":
			bit = ccModel
			var s []byte
			s, ok = c.plainString()
			b.Model = string(s)
		case "messages":
			bit = ccMessages
			ok = c.messages(b)
		case "stream":
			bit = ccStream
			b.Stream, ok = c.boolean()
		case "stream_options":
			bit = ccStreamOptions
			b.StreamOptions, ok = c.streamOptions()
		case "temperature":
			bit = ccTemperature
			ok = c.float(&b.Temperature)
		case "top_p":
			bit = ccTopP
			ok = c.float(&b.TopP)
		case "presence_penalty":
			bit = ccPresencePenalty
			ok = c.float(&b.PresencePenalty)
		case "frequency_penalty":
			bit = ccFrequencyPenalty
			ok = c.float(&b.FrequencyPenalty)
		case "n":
			bit = ccN
			ok = c.int(&b.N)
		case "max_tokens":
			bit = ccMaxTokens
			ok = c.int(&b.MaxTokens)
		case "max_completion_tokens":
			bit = ccMaxCompletionTokens
			ok = c.int(&b.MaxCompletionTokens)
		case "seed":
			bit = ccSeed
			var n int
			if n, ok = c.integer(); ok {
				s := int64(n)
				b.Seed = &s
			}
		case "stop":
			bit = ccStop
			b.Stop, ok = c.stop()
		case "user":
			bit = ccUser
			var s []byte
			s, ok = c.plainString()
			b.User = string(s)
		case "think":
			bit = ccThink
			b.Think, ok = c.scalar()
		case "reasoning_effort":
			bit = ccReasoningEffort
			b.ReasoningEffort, ok = c.scalar()
		default:
			return false
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		if c.next('}') {
			break
		}
		if !c.next(',') {
			return false
		}
	}
	c.space()
	return c.p == len(c.b) // only space may follow the object
}

// messages reads the messages array into b.Messages.
func (c *chatScan) messages(b *chatBody) bool {
	if !c.next('[') {
		return false
	}
	if c.next(']') {
		return true // present and empty: b.Messages stays empty, not nil, as jsonv1 leaves it
	}
	for {
		b.Messages = append(b.Messages, cascade.Message{})
		if !c.message(&b.Messages[len(b.Messages)-1]) {
			return false
		}
		if c.next(']') {
			return true
		}
		if !c.next(',') {
			return false
		}
	}
}

// streamOptions reads {"include_usage": true or false}, or {}.
func (c *chatScan) streamOptions() (*cascade.StreamOptions, bool) {
	if !c.next('{') {
		return nil, false
	}
	o := new(cascade.StreamOptions)
	if c.next('}') {
		return o, true
	}
	name, ok := c.plainString()
	if !ok || string(name) != "include_usage" || !c.next(':') {
		return nil, false
	}
	if o.IncludeUsage, ok = c.boolean(); !ok || !c.next('}') {
		return nil, false
	}
	return o, true
}

// The fields of a message decodeChatCommon takes.
const (
	cmRole uint8 = 1 << iota
	cmContent
	cmName
	cmToolCallID
)

func (c *chatScan) message(m *cascade.Message) bool {
	if !c.next('{') {
		return false
	}
	var seen uint8
	if c.next('}') {
		return true
	}
	for {
		name, ok := c.plainString()
		if !ok || !c.next(':') {
			return false
		}
		var bit uint8
		switch string(name) {
		case "role":
			bit = cmRole
			var s []byte
			if s, ok = c.plainString(); ok {
				m.Role = role(s)
			}
		case "content":
			bit = cmContent
			var start, end int
			if start, end, ok = c.str(); ok {
				m.Content = json.RawMessage(c.b[start:end:end])
			}
		case "name":
			bit = cmName
			var s []byte
			s, ok = c.plainString()
			m.Name = string(s)
		case "tool_call_id":
			bit = cmToolCallID
			var s []byte
			s, ok = c.plainString()
			m.ToolCallID = string(s)
		default:
			return false
		}
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		if c.next('}') {
			return true
		}
		if !c.next(',') {
			return false
		}
	}
}

// role is s as a string, the usual roles without an allocation.
func role(s []byte) string {
	switch string(s) {
	case "system":
		return "system"
	case "user":
		return "user"
	case "assistant":
		return "assistant"
	case "developer":
		return "developer"
	case "tool":
		return "tool"
	}
	return string(s)
}

func (c *chatScan) space() {
	for c.p < len(c.b) {
		switch c.b[c.p] {
		case ' ', '\t', '\n', '\r':
			c.p++
		default:
			return
		}
	}
}

// next consumes tok after optional space, when it is next.
func (c *chatScan) next(tok byte) bool {
	c.space()
	if c.p < len(c.b) && c.b[c.p] == tok {
		c.p++
		return true
	}
	return false
}

// plainString reads a string of printable ASCII without escapes, whose decoded value is its
// raw content, and returns that content; the names of the members it takes are such strings.
func (c *chatScan) plainString() ([]byte, bool) {
	c.space()
	if c.p >= len(c.b) || c.b[c.p] != '"' {
		return nil, false
	}
	start := c.p + 1
	for i := start; i < len(c.b); i++ {
		switch b := c.b[i]; {
		case b == '"':
			c.p = i + 1
			return c.b[start:i], true
		case b < 0x20 || b == '\\' || b >= utf8.RuneSelf:
			return nil, false
		}
	}
	return nil, false
}

// str reads a JSON string, its escapes valid and its bytes valid UTF-8, and returns its span,
// quotes included.
func (c *chatScan) str() (start, end int, ok bool) {
	c.space()
	if c.p >= len(c.b) || c.b[c.p] != '"' {
		return 0, 0, false
	}
	start = c.p
	ascii := true
	for i := start + 1; i < len(c.b); i++ {
		switch b := c.b[i]; {
		case b == '"':
			if !ascii && !utf8.Valid(c.b[start+1:i]) {
				return 0, 0, false
			}
			c.p = i + 1
			return start, i + 1, true
		case b < 0x20:
			return 0, 0, false
		case b >= utf8.RuneSelf:
			ascii = false
		case b == '\\':
			if i+1 >= len(c.b) {
				return 0, 0, false
			}
			switch c.b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				// A surrogate escape, paired or not, goes to the library, which replaces an
				// unpaired one.
				if len(c.b)-i < 6 || !isHexDigit(c.b[i+2]) || !isHexDigit(c.b[i+3]) || !isHexDigit(c.b[i+4]) || !isHexDigit(c.b[i+5]) ||
					c.b[i+2] == 'd' || c.b[i+2] == 'D' {
					return 0, 0, false
				}
				i += 5
			default:
				return 0, 0, false
			}
		}
	}
	return 0, 0, false
}

func isHexDigit(b byte) bool {
	return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F'
}

func (c *chatScan) boolean() (v, ok bool) {
	c.space()
	switch {
	case hasPrefixAt(c.b, c.p, "true"):
		c.p += 4
		return true, true
	case hasPrefixAt(c.b, c.p, "false"):
		c.p += 5
		return false, true
	}
	return false, false
}

func hasPrefixAt(b []byte, p int, s string) bool {
	return len(b)-p >= len(s) && string(b[p:p+len(s)]) == s
}

// number reads a JSON number and returns its text, and whether it is an integer (no fraction,
// no exponent).
func (c *chatScan) number() (lit []byte, integer, ok bool) {
	c.space()
	start, p := c.p, c.p
	if p < len(c.b) && c.b[p] == '-' {
		p++
	}
	switch {
	case p >= len(c.b):
		return nil, false, false
	case c.b[p] == '0':
		p++
	case '1' <= c.b[p] && c.b[p] <= '9':
		for p++; p < len(c.b) && isDigit(c.b[p]); p++ {
		}
	default:
		return nil, false, false
	}
	integer = true
	if p < len(c.b) && c.b[p] == '.' {
		integer = false
		if p++; p >= len(c.b) || !isDigit(c.b[p]) {
			return nil, false, false
		}
		for p++; p < len(c.b) && isDigit(c.b[p]); p++ {
		}
	}
	if p < len(c.b) && (c.b[p] == 'e' || c.b[p] == 'E') {
		integer = false
		if p++; p < len(c.b) && (c.b[p] == '+' || c.b[p] == '-') {
			p++
		}
		if p >= len(c.b) || !isDigit(c.b[p]) {
			return nil, false, false
		}
		for p++; p < len(c.b) && isDigit(c.b[p]); p++ {
		}
	}
	c.p = p
	return c.b[start:p], integer, true
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// float reads a number into *dst, as strconv parses it; one out of range goes to the library.
func (c *chatScan) float(dst **float64) bool {
	lit, _, ok := c.number()
	if !ok {
		return false
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil {
		return false
	}
	*dst = &f
	return true
}

// int reads an integer of at most nine digits into *dst, which any int holds.
func (c *chatScan) int(dst **int) bool {
	n, ok := c.integer()
	if ok {
		*dst = &n
	}
	return ok
}

// integer reads an integer of at most nine digits.
func (c *chatScan) integer() (int, bool) {
	lit, integer, ok := c.number()
	if !ok || !integer || len(lit) > 9 {
		return 0, false
	}
	n, err := strconv.Atoi(string(lit))
	return n, err == nil
}

// stop reads a stop: a string, or an array of strings.
func (c *chatScan) stop() (json.RawMessage, bool) {
	c.space()
	start := c.p
	if c.p < len(c.b) && c.b[c.p] == '[' {
		c.p++
		for empty := c.next(']'); !empty; {
			if _, _, ok := c.str(); !ok {
				return nil, false
			}
			if c.next(']') {
				break
			}
			if !c.next(',') {
				return nil, false
			}
		}
	} else if _, _, ok := c.str(); !ok {
		return nil, false
	}
	return json.RawMessage(c.b[start:c.p:c.p]), true
}

// scalar reads a string, a number, true or false, and returns its text.
func (c *chatScan) scalar() (json.RawMessage, bool) {
	c.space()
	start := c.p
	var ok bool
	switch {
	case c.p >= len(c.b):
		return nil, false
	case c.b[c.p] == '"':
		_, _, ok = c.str()
	case c.b[c.p] == 't' || c.b[c.p] == 'f':
		_, ok = c.boolean()
	default:
		_, _, ok = c.number()
	}
	if !ok {
		return nil, false
	}
	return json.RawMessage(c.b[start:c.p:c.p]), true
}
