package proxy

import (
	"strconv"
	"unicode/utf8"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// appendCompletion appends a whole chat answer's body: what encoding/json.Marshal makes of
// completion{Object: "chat.completion", Answer: a}, byte for byte (FuzzAppendCompletion holds
// the two equal), without reflection. It returns false for an answer whose choices carry
// logprobs, raw JSON that encoding/json checks and compacts: the caller marshals that one.
func appendCompletion(dst []byte, a *cascade.Answer) ([]byte, bool) {
	for i := range a.Choices {
		if len(a.Choices[i].Logprobs) > 0 {
			return dst, false
		}
	}
	dst = append(dst, `{"object":"chat.completion","id":`...)
	dst = appendJSONString(dst, a.ID)
	dst = append(dst, `,"model":`...)
	dst = appendJSONString(dst, a.Model)
	dst = append(dst, `,"created":`...)
	dst = strconv.AppendInt(dst, a.Created, 10)
	if a.SystemFingerprint != "" {
		dst = append(dst, `,"system_fingerprint":`...)
		dst = appendJSONString(dst, a.SystemFingerprint)
	}
	dst = append(dst, `,"choices":`...)
	if a.Choices == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i := range a.Choices {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendChoice(dst, &a.Choices[i])
		}
		dst = append(dst, ']')
	}
	if u := a.Usage; u != nil {
		dst = append(dst, `,"usage":{"prompt_tokens":`...)
		dst = strconv.AppendInt(dst, int64(u.PromptTokens), 10)
		dst = append(dst, `,"completion_tokens":`...)
		dst = strconv.AppendInt(dst, int64(u.CompletionTokens), 10)
		dst = append(dst, `,"total_tokens":`...)
		dst = strconv.AppendInt(dst, int64(u.TotalTokens), 10)
		dst = append(dst, '}')
	}
	return append(dst, '}'), true
}

// appendChoice appends c, which has no logprobs.
func appendChoice(dst []byte, c *cascade.Choice) []byte {
	m := &c.Message
	dst = append(dst, `{"index":`...)
	dst = strconv.AppendInt(dst, int64(c.Index), 10)
	dst = append(dst, `,"message":{"role":`...)
	dst = appendJSONString(dst, m.Role)
	dst = append(dst, `,"content":`...)
	if m.Content == nil {
		dst = append(dst, "null"...)
	} else {
		dst = appendJSONString(dst, *m.Content)
	}
	if m.ReasoningContent != "" {
		dst = append(dst, `,"reasoning_content":`...)
		dst = appendJSONString(dst, m.ReasoningContent)
	}
	if m.Refusal != "" {
		dst = append(dst, `,"refusal":`...)
		dst = appendJSONString(dst, m.Refusal)
	}
	if len(m.ToolCalls) > 0 {
		dst = append(dst, `,"tool_calls":[`...)
		for i := range m.ToolCalls {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendToolCall(dst, &m.ToolCalls[i])
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `},"finish_reason":`...)
	dst = appendJSONString(dst, c.FinishReason)
	return append(dst, '}')
}

func appendToolCall(dst []byte, tc *cascade.ToolCall) []byte {
	dst = append(dst, '{')
	if tc.Index != nil {
		dst = append(dst, `"index":`...)
		dst = strconv.AppendInt(dst, int64(*tc.Index), 10)
		dst = append(dst, ',')
	}
	if tc.ID != "" {
		dst = append(dst, `"id":`...)
		dst = appendJSONString(dst, tc.ID)
		dst = append(dst, ',')
	}
	if tc.Type != "" {
		dst = append(dst, `"type":`...)
		dst = appendJSONString(dst, tc.Type)
		dst = append(dst, ',')
	}
	dst = append(dst, `"function":{`...)
	if tc.Function.Name != "" {
		dst = append(dst, `"name":`...)
		dst = appendJSONString(dst, tc.Function.Name)
		dst = append(dst, ',')
	}
	dst = append(dst, `"arguments":`...)
	dst = appendJSONString(dst, tc.Function.Arguments)
	return append(dst, "}}"...)
}

// appendJSONString appends s quoted as encoding/json quotes a string: <, > and & escaped for
// HTML, U+2028 and U+2029 escaped, each invalid UTF-8 byte as \ufffd.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if jsonSafe[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default: // the other control bytes, and <, > and &
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// jsonSafe is encoding/json's htmlSafeSet: the ASCII bytes a string holds unescaped.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for b := ' '; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return t
}()
