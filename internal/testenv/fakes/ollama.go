package fakes

import (
	"encoding/json"
	"net/http"
)

// OllamaCreatedAt is the created_at the Ollama fake reports.
const OllamaCreatedAt = "2025-01-01T00:00:00Z"

// OllamaVersion is what the Ollama fake's /api/version reports.
const OllamaVersion = "0.17.4"

type ollamaIn struct {
	Model  string `json:"model"`
	Stream *bool  `json:"stream"`
}

func (s *Server) ollamaChat(w http.ResponseWriter, r *http.Request) {
	body, cfg, err := s.begin(r)
	if err != nil {
		return
	}
	var in ollamaIn
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
	if in.Stream == nil || *in.Stream { // Ollama streams unless told not to
		s.ollamaStream(w, r, &cfg, model)
		return
	}
	b := ollamaHead(nil, model)
	b = append(b, `"message":{"role":"assistant","content":`...)
	if len(cfg.ToolCalls) > 0 {
		b = append(b, `""`...)
		b = appendOllamaTools(b, &cfg, 0, len(cfg.ToolCalls))
	} else {
		b = appendString(b, cfg.Reply)
	}
	b = appendOllamaDone(append(b, '}'), &cfg)
	writeWhole(w, b, cfg.TruncateAfter != 0)
}

func ollamaHead(b []byte, model string) []byte {
	b = append(b, `{"model":`...)
	b = appendString(b, model)
	return append(b, `,"created_at":"`+OllamaCreatedAt+`",`...)
}

func appendOllamaTools(b []byte, cfg *Config, from, to int) []byte {
	b = append(b, `,"tool_calls":[`...)
	for i := from; i < to; i++ {
		tc := cfg.ToolCalls[i]
		if i > from {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = appendString(b, toolID(tc, i))
		b = append(b, `,"function":{"index":`...)
		b = appendInt(b, int64(i))
		b = append(b, `,"name":`...)
		b = appendString(b, tc.Function.Name)
		b = append(b, `,"arguments":`...)
		b = append(b, toolArgs(tc)...)
		b = append(b, `}}`...)
	}
	return append(b, ']')
}

// appendOllamaDone ends a response object with done, done_reason and the metrics.
func appendOllamaDone(b []byte, cfg *Config) []byte {
	t := cfg.Timings
	b = append(b, `,"done":true,"done_reason":`...)
	b = appendString(b, finishReason(cfg, true))
	b = append(b, `,"total_duration":`...)
	b = appendInt(b, int64(t.Total))
	b = append(b, `,"load_duration":`...)
	b = appendInt(b, int64(t.Load))
	b = append(b, `,"prompt_eval_count":`...)
	b = appendInt(b, int64(cfg.Usage.PromptTokens))
	b = append(b, `,"prompt_eval_duration":`...)
	b = appendInt(b, int64(t.PromptEval))
	b = append(b, `,"eval_count":`...)
	b = appendInt(b, int64(cfg.Usage.CompletionTokens))
	b = append(b, `,"eval_duration":`...)
	b = appendInt(b, int64(t.Eval))
	return append(b, '}')
}

// ollamaStream writes NDJSON: one line per content chunk (or per tool call), then the done line
// with the metrics.
func (s *Server) ollamaStream(w http.ResponseWriter, r *http.Request, cfg *Config, model string) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	if cfg.TruncateAfter < 0 {
		cut(w)
		return
	}
	rc := http.NewResponseController(w)
	head := ollamaHead(make([]byte, 0, 96), model)
	buf := make([]byte, 0, 512)
	send := func(b []byte) bool {
		if _, err := w.Write(b); err != nil {
			s.sawCancel()
			return false
		}
		if err := rc.Flush(); err != nil {
			s.sawCancel()
			return false
		}
		return true
	}
	n := cfg.Chunks
	var parts []string
	if len(cfg.ToolCalls) > 0 {
		n = len(cfg.ToolCalls)
	} else {
		parts = split(cfg.Reply, cfg.Chunks)
	}
	for i := range n {
		if !s.between(r, cfg) {
			return
		}
		buf = append(buf[:0], head...)
		buf = append(buf, `"message":{"role":"assistant","content":`...)
		if parts != nil {
			buf = appendString(buf, parts[i])
		} else {
			buf = append(buf, `""`...)
			buf = appendOllamaTools(buf, cfg, i, i+1)
		}
		buf = append(buf, "},\"done\":false}\n"...)
		if !send(buf) {
			return
		}
		switch i + 1 {
		case cfg.TruncateAfter:
			cut(w)
			return
		case cfg.BlockAfter:
			s.block(r)
			return
		}
	}
	switch {
	case cfg.TruncateAfter > n:
		cut(w)
		return
	case cfg.BlockAfter > n:
		s.block(r)
		return
	}
	if !s.between(r, cfg) {
		return
	}
	buf = append(buf[:0], head...)
	buf = append(buf, `"message":{"role":"assistant","content":""}`...)
	buf = appendOllamaDone(buf, cfg)
	send(append(buf, '\n'))
}

func (s *Server) ollamaTags(w http.ResponseWriter, _ *http.Request) {
	cfg := s.config()
	b := []byte(`{"models":[`)
	for i, m := range cfg.Models {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendString(b, m)
		b = append(b, `,"model":`...)
		b = appendString(b, m)
		b = append(b, `,"modified_at":"`+OllamaCreatedAt+`","size":1,"digest":"0000"}`...)
	}
	b = append(b, "]}"...)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func (s *Server) ollamaVersion(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"version":"` + OllamaVersion + `"}`))
}
