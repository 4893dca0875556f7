// Package cascadetest holds what the stages' tests share.
package cascadetest

import (
	"encoding/json"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// FuzzRequest builds a request the way the proxy's decoder does: an optional system prompt, then
// one message with role and text, as a string or as one text part. It reports false when the
// inputs make no request.
func FuzzRequest(role, q, system string, parts bool) (*cascade.Request, bool) {
	var content any = q
	if parts {
		content = []map[string]string{{"type": "text", "text": q}}
	}
	msgs := []map[string]any{}
	if system != "" {
		msgs = append(msgs, map[string]any{"role": "system", "content": system})
	}
	msgs = append(msgs, map[string]any{"role": role, "content": content})
	body, err := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	if err != nil {
		return nil, false
	}
	var c cascade.ChatRequest
	if json.Unmarshal(body, &c) != nil {
		return nil, false
	}
	return &cascade.Request{Chat: c, Raw: body}, true
}
