package cascade

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
)

// fieldsNotInKey are request fields that do not change the answer.
var fieldsNotInKey = map[string]bool{
	"stream":         true,
	"stream_options": true,
	"user":           true,
	"metadata":       true,
	"store":          true,
}

// Key is the hex SHA-256 of canonical JSON (sorted keys, normalised numbers) over the tenant and
// every request field that can change the answer. Unknown fields count: an unknown field may
// change the answer, so two requests that differ in one never share a key.
func (r *Request) Key() string {
	if r.key == "" {
		r.key = canonicalKey(r.Tenant, r.Raw)
	}
	return r.key
}

func canonicalKey(tenant string, raw json.RawMessage) string {
	h := sha256.New()
	fmt.Fprintf(h, "eoc-key-v1\x00%d:%s\x00", len(tenant), tenant)
	var body map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil {
		h.Write(raw) // not an object; the proxy rejects these before the walk
	} else {
		for k := range fieldsNotInKey {
			delete(body, k)
		}
		normalizeNumbers(body)
		b, _ := json.Marshal(body) // maps marshal with sorted keys
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// normalizeNumbers rewrites json.Number values so 1, 1.0 and 1e0 are the same key.
func normalizeNumbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = normalizeNumbers(x)
		}
	case []any:
		for i, x := range t {
			t[i] = normalizeNumbers(x)
		}
	case json.Number:
		if i, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return json.Number(strconv.FormatInt(i, 10))
		}
		if f, err := strconv.ParseFloat(string(t), 64); err == nil {
			if f == float64(int64(f)) && f < 1e18 && f > -1e18 {
				return json.Number(strconv.FormatInt(int64(f), 10))
			}
			return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
		}
	}
	return v
}
