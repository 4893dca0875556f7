package fakes

import (
	"encoding/json"
	"net/http"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// openaiIn is what the OpenAI-style fakes read of a request.
type openaiIn struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (s *Server) openaiChat(w http.ResponseWriter, r *http.Request) {
	body, cfg, err := s.begin(r)
	if err != nil {
		return
	}
	var in openaiIn
	if err := json.Unmarshal(body, &in); err != nil {
		s.writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return
	}
	if !s.prelude(w, r, &cfg) {
		return
	}
	model := in.Model
	if model == "" {
		model = cfg.Models[0]
	}
	if in.Stream {
		s.openaiStream(w, r, &cfg, model, in.StreamOptions != nil && in.StreamOptions.IncludeUsage)
		return
	}
	writeWhole(w, s.openaiWhole(&cfg, model), cfg.TruncateAfter != 0)
}

func finishReason(cfg *Config, ollama bool) string {
	switch {
	case cfg.FinishReason != "":
		return cfg.FinishReason
	case len(cfg.ToolCalls) > 0 && !ollama:
		return "tool_calls"
	}
	return "stop"
}

func toolID(tc cascade.ToolCall, i int) string {
	if tc.ID != "" {
		return tc.ID
	}
	return "call_fake_" + itoa(i)
}

func (s *Server) openaiWhole(cfg *Config, model string) []byte {
	b := make([]byte, 0, 512+len(cfg.Reply))
	b = append(b, `{"id":"`+ID+`","object":"chat.completion","created":`...)
	b = appendInt(b, Created)
	b = append(b, `,"model":`...)
	b = appendString(b, model)
	b = append(b, `,"system_fingerprint":"fp_fake","choices":[{"index":0,"message":{"role":"assistant","content":`...)
	if len(cfg.ToolCalls) > 0 {
		b = append(b, `null,"tool_calls":[`...)
		for i, tc := range cfg.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = appendString(b, toolID(tc, i))
			b = append(b, `,"type":"function","function":{"name":`...)
			b = appendString(b, tc.Function.Name)
			b = append(b, `,"arguments":`...)
			b = appendString(b, toolArgs(tc))
			b = append(b, `}}`...)
		}
		b = append(b, ']')
	} else {
		b = appendString(b, cfg.Reply)
	}
	b = append(b, `},"logprobs":null,"finish_reason":`...)
	b = appendString(b, finishReason(cfg, false))
	b = append(b, `}],"usage":`...)
	b = appendUsage(b, cfg.Usage)
	if s.Dialect == LlamaCpp {
		b = append(b, `,"timings":`...)
		b = appendLlamaTimings(b, cfg.Timings)
	}
	return append(b, '}')
}

func appendUsage(b []byte, u *cascade.Usage) []byte {
	b = append(b, `{"prompt_tokens":`...)
	b = appendInt(b, int64(u.PromptTokens))
	b = append(b, `,"completion_tokens":`...)
	b = appendInt(b, int64(u.CompletionTokens))
	b = append(b, `,"total_tokens":`...)
	b = appendInt(b, int64(u.TotalTokens))
	return append(b, '}')
}

// appendLlamaTimings writes llama-server's timings object (result_timings::to_json).
func appendLlamaTimings(b []byte, t *cascade.Timings) []byte {
	promptMS := float64(t.PromptEval.Microseconds()) / 1000
	predMS := float64(t.Eval.Microseconds()) / 1000
	per := func(ms float64, n int) (float64, float64) {
		if n == 0 || ms == 0 {
			return 0, 0
		}
		return ms / float64(n), 1000 * float64(n) / ms
	}
	ppt, pps := per(promptMS, t.PromptN)
	dpt, dps := per(predMS, t.PredictedN)
	b = append(b, `{"cache_n":`...)
	b = appendInt(b, int64(t.CacheN))
	b = append(b, `,"prompt_n":`...)
	b = appendInt(b, int64(t.PromptN))
	b = append(b, `,"prompt_ms":`...)
	b = appendFloat(b, promptMS)
	b = append(b, `,"prompt_per_token_ms":`...)
	b = appendFloat(b, ppt)
	b = append(b, `,"prompt_per_second":`...)
	b = appendFloat(b, pps)
	b = append(b, `,"predicted_n":`...)
	b = appendInt(b, int64(t.PredictedN))
	b = append(b, `,"predicted_ms":`...)
	b = appendFloat(b, predMS)
	b = append(b, `,"predicted_per_token_ms":`...)
	b = appendFloat(b, dpt)
	b = append(b, `,"predicted_per_second":`...)
	b = appendFloat(b, dps)
	return append(b, '}')
}

// openaiStream writes the answer as OpenAI's SSE: a role chunk, the content (or tool call)
// chunks, a finish chunk, the usage chunk when asked, and [DONE]. llama.cpp's timings ride on
// the last chunk before [DONE], as llama-server does.
func (s *Server) openaiStream(w http.ResponseWriter, r *http.Request, cfg *Config, model string, includeUsage bool) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if cfg.TruncateAfter < 0 {
		cut(w)
		return
	}
	rc := http.NewResponseController(w)
	head := make([]byte, 0, 160)
	head = append(head, `data: {"id":"`+ID+`","object":"chat.completion.chunk","created":`...)
	head = appendInt(head, Created)
	head = append(head, `,"model":`...)
	head = appendString(head, model)
	head = append(head, `,"system_fingerprint":"fp_fake","choices":[`...)
	buf := make([]byte, 0, 512)
	send := func(choice string, tail func([]byte) []byte) bool {
		buf = append(buf[:0], head...)
		buf = append(buf, choice...)
		buf = append(buf, ']')
		if tail != nil {
			buf = tail(buf)
		}
		buf = append(buf, "}\n\n"...)
		if _, err := w.Write(buf); err != nil {
			s.sawCancel()
			return false
		}
		if err := rc.Flush(); err != nil {
			s.sawCancel()
			return false
		}
		return true
	}

	if !send(`{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`, nil) {
		return
	}
	pieces := openaiPieces(cfg)
	for i, p := range pieces {
		if !s.between(r, cfg) || !send(p, nil) {
			return
		}
		if n := i + 1; n == cfg.TruncateAfter {
			cut(w)
			return
		} else if n == cfg.BlockAfter {
			s.block(r)
			return
		}
	}
	switch {
	case cfg.TruncateAfter > len(pieces):
		cut(w)
		return
	case cfg.BlockAfter > len(pieces):
		s.block(r)
		return
	}
	if !s.between(r, cfg) {
		return
	}
	timings := func(b []byte) []byte {
		if s.Dialect != LlamaCpp {
			return b
		}
		b = append(b, `,"timings":`...)
		return appendLlamaTimings(b, cfg.Timings)
	}
	fin := make([]byte, 0, 96)
	fin = append(fin, `{"index":0,"delta":{},"logprobs":null,"finish_reason":`...)
	fin = appendString(fin, finishReason(cfg, false))
	fin = append(fin, '}')
	var finTail func([]byte) []byte
	if !includeUsage {
		finTail = timings
	}
	if !send(string(fin), finTail) {
		return
	}
	if includeUsage {
		ok := send("", func(b []byte) []byte {
			b = append(b, `,"usage":`...)
			b = appendUsage(b, cfg.Usage)
			return timings(b)
		})
		if !ok {
			return
		}
	}
	if _, err := w.Write([]byte("data: [DONE]\n\n")); err != nil {
		s.sawCancel()
	}
}

// openaiPieces are the choice objects of the body chunks: content pieces, or for tool calls a
// name chunk and an arguments chunk per call.
func openaiPieces(cfg *Config) []string {
	if len(cfg.ToolCalls) == 0 {
		parts := split(cfg.Reply, cfg.Chunks)
		out := make([]string, len(parts))
		for i, p := range parts {
			b := append([]byte(`{"index":0,"delta":{"content":`), appendString(nil, p)...)
			b = append(b, `},"logprobs":null,"finish_reason":null}`...)
			out[i] = string(b)
		}
		return out
	}
	out := make([]string, 0, 2*len(cfg.ToolCalls))
	for i, tc := range cfg.ToolCalls {
		b := []byte(`{"index":0,"delta":{"tool_calls":[{"index":`)
		b = appendInt(b, int64(i))
		b = append(b, `,"id":`...)
		b = appendString(b, toolID(tc, i))
		b = append(b, `,"type":"function","function":{"name":`...)
		b = appendString(b, tc.Function.Name)
		b = append(b, `,"arguments":""}}]},"logprobs":null,"finish_reason":null}`...)
		out = append(out, string(b))
		b = []byte(`{"index":0,"delta":{"tool_calls":[{"index":`)
		b = appendInt(b, int64(i))
		b = append(b, `,"function":{"arguments":`...)
		b = appendString(b, toolArgs(tc))
		b = append(b, `}}]},"logprobs":null,"finish_reason":null}`...)
		out = append(out, string(b))
	}
	return out
}

func (s *Server) openaiModels(w http.ResponseWriter, _ *http.Request) {
	cfg := s.config()
	b := []byte(`{"object":"list","data":[`)
	for i, m := range cfg.Models {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = appendString(b, m)
		b = append(b, `,"object":"model","created":`...)
		b = appendInt(b, Created)
		b = append(b, `,"owned_by":"fake"}`...)
	}
	b = append(b, "]}"...)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func (s *Server) llamaHealth(w http.ResponseWriter, _ *http.Request) {
	cfg := s.config()
	if cfg.HealthStatus != http.StatusOK {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(cfg.HealthStatus)
		_, _ = w.Write([]byte(`{"error":{"code":` + itoa(cfg.HealthStatus) + `,"message":"Loading model","type":"unavailable_error"}}`))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ok"}`))
}
