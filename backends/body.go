package backends

import (
	"encoding/json"
	"errors"
)

var errNotObject = errors.New("request body is not a JSON object")

// setStream returns body (a JSON object) with its top-level "stream" set to stream and, when
// streaming, "stream_options" carrying include_usage: true, other options kept; without a stream
// stream_options is dropped, as OpenAI refuses it there. Every other member is copied byte for
// byte, so fields this proxy does not know reach the upstream untouched. When nothing needs to
// change, body itself is returned. body must be valid JSON (the edge decoded it); the scan only
// finds the top-level members and does not validate what it skips.
func setStream(body []byte, stream bool) ([]byte, error) {
	var nStream, nOpts int
	streamOK, optsOK := false, false
	var lastOpts []byte
	err := eachMember(body, func(key []byte, esc bool, _, vs, ve int) {
		switch {
		case keyIs(key, esc, "stream"):
			nStream++
			v := string(body[vs:ve])
			streamOK = (stream && v == "true") || (!stream && v == "false")
		case keyIs(key, esc, "stream_options"):
			nOpts++
			lastOpts = body[vs:ve]
		}
	})
	if err != nil {
		return nil, err
	}
	if stream && nOpts == 1 {
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		optsOK = json.Unmarshal(lastOpts, &so) == nil && so.IncludeUsage
	}
	switch {
	case !stream && nOpts == 0 && (nStream == 0 || (nStream == 1 && streamOK)):
		return body, nil
	case stream && nStream == 1 && streamOK && optsOK:
		return body, nil
	}

	out := make([]byte, 0, len(body)+48)
	out = append(out, '{')
	_ = eachMember(body, func(key []byte, esc bool, start, _, end int) {
		if keyIs(key, esc, "stream") || keyIs(key, esc, "stream_options") {
			return
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, body[start:end]...)
	})
	if len(out) > 1 {
		out = append(out, ',')
	}
	if !stream {
		out = append(out, `"stream":false}`...)
		return out, nil
	}
	out = append(out, `"stream":true,"stream_options":`...)
	out = append(out, mergeIncludeUsage(lastOpts)...)
	return append(out, '}'), nil
}

var includeUsageOnly = []byte(`{"include_usage":true}`)

// mergeIncludeUsage returns the stream_options object opts with include_usage set to true.
func mergeIncludeUsage(opts []byte) []byte {
	var m map[string]json.RawMessage
	if len(opts) == 0 || opts[0] != '{' || json.Unmarshal(opts, &m) != nil || len(m) == 0 {
		return includeUsageOnly
	}
	m["include_usage"] = json.RawMessage("true")
	b, err := json.Marshal(m)
	if err != nil {
		return includeUsageOnly
	}
	return b
}

// keyIs reports whether the raw key (between its quotes) is name.
func keyIs(key []byte, escaped bool, name string) bool {
	if !escaped {
		return string(key) == name
	}
	var s string
	q := make([]byte, 0, len(key)+2)
	q = append(append(append(q, '"'), key...), '"')
	return json.Unmarshal(q, &s) == nil && s == name
}

// eachMember calls fn for each top-level member of the JSON object b: key is the raw key between
// its quotes (escaped when it holds a backslash), b[start:end] the whole member and b[vs:ve] its
// value.
func eachMember(b []byte, fn func(key []byte, escaped bool, start, vs, ve int)) error {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return errNotObject
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return trailing(b, i+1)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return errNotObject
		}
		start := i
		kend, esc, ok := scanString(b, i)
		if !ok {
			return errNotObject
		}
		i = skipWS(b, kend)
		if i >= len(b) || b[i] != ':' {
			return errNotObject
		}
		vs := skipWS(b, i+1)
		ve, ok := scanValue(b, vs)
		if !ok {
			return errNotObject
		}
		fn(b[start+1:kend-1], esc, start, vs, ve)
		i = skipWS(b, ve)
		if i >= len(b) {
			return errNotObject
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return trailing(b, i+1)
		default:
			return errNotObject
		}
	}
}

func trailing(b []byte, i int) error {
	if skipWS(b, i) != len(b) {
		return errNotObject
	}
	return nil
}

func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanString returns the index after the string starting at b[i] == '"', and whether it holds
// an escape.
func scanString(b []byte, i int) (end int, escaped, ok bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j + 1, escaped, true
		}
	}
	return 0, false, false
}

// scanValue returns the index after the value starting at b[i].
func scanValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		end, _, ok := scanString(b, i)
		return end, ok
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, _, ok := scanString(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j, j > i
		}
		j++
	}
	return j, j > i
}
