//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"
)

// The fake upstream's fixed answers. It speaks Ollama's native API (what the shipped eoc.yaml's
// backend, type ollama, calls) and the OpenAI-compatible API Ollama also serves (what the direct
// and reverse-proxy paths call), each with one small fixed completion.
const (
	upModel = "bench-model"

	ollamaWhole = `{"model":"bench-model","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"Hello from the fake upstream."},"done":true,"done_reason":"stop","total_duration":7000000,"load_duration":1000000,"prompt_eval_count":12,"prompt_eval_duration":2000000,"eval_count":4,"eval_duration":3000000}`

	ollamaStream = `{"model":"bench-model","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"Hello from the fake upstream."},"done":false}
{"model":"bench-model","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","total_duration":7000000,"load_duration":1000000,"prompt_eval_count":12,"prompt_eval_duration":2000000,"eval_count":4,"eval_duration":3000000}
`

	openaiWhole = `{"id":"chatcmpl-fake","object":"chat.completion","created":1700000000,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the fake upstream."},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":4,"total_tokens":16}}`

	openaiStream = "data: {\"id\":\"chatcmpl-fake\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"bench-model\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hello from the fake upstream.\"},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"chatcmpl-fake\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"bench-model\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":4,\"total_tokens\":16}}\n\n" +
		"data: [DONE]\n\n"
)

// upstreamHandler is the fake upstream. Bodies are drained and looked at only for "stream".
func upstreamHandler() http.Handler {
	mux := http.NewServeMux()
	writeJSON := func(w http.ResponseWriter, s string) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, s)
	}
	mux.HandleFunc("POST /api/chat", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"stream":false`)) {
			writeJSON(w, ollamaWhole)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		_, _ = io.WriteString(w, ollamaStream)
	})
	mux.HandleFunc("GET /api/tags", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, `{"models":[{"name":"bench-model","model":"bench-model","modified_at":"2025-01-01T00:00:00Z","size":1,"digest":"0"}]}`)
	})
	mux.HandleFunc("GET /api/version", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, `{"version":"0.17.4"}`) })
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "Ollama is running") })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, openaiStream)
			return
		}
		writeJSON(w, openaiWhole)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, `{"object":"list","data":[{"id":"bench-model","object":"model","created":1700000000,"owned_by":"bench"}]}`)
	})
	return mux
}

// reverseProxyHandler is yardstick 1: one bare httputil.ReverseProxy hop, as configured by default.
func reverseProxyHandler(target string) (http.Handler, error) {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("bad target %q", target)
	}
	return httputil.NewSingleHostReverseProxy(u), nil
}

// cachedResponse is what eoc-proxy answered for a cache hit, for the bare handler to replay.
type cachedResponse struct {
	Header http.Header `json:"header"`
	Body   []byte      `json:"body"`
}

// bareHandler is yardstick 2: a bare handler that drains the request and writes the bytes and
// headers eoc-proxy wrote for a cache hit, Date left to the server.
func bareHandler(path string) (http.Handler, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cr cachedResponse
	if err := json.Unmarshal(raw, &cr); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	cr.Header.Del("Date")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		for k, v := range cr.Header {
			h[k] = v
		}
		_, _ = w.Write(cr.Body)
	}), nil
}

// floorHeaders are the headers eoc-proxy writes on a neural answer here (no RAPL), with values
// of the same lengths, for the translator floor.
var floorHeaders = [][2]string{
	{"X-Eoc-Attempts", "1"}, {"X-Eoc-Backend", "local"}, {"X-Eoc-Coverage", "whole"}, {"X-Eoc-Energy", "estimated"},
	{"X-Eoc-Energy-Method", "cpu-time-model"}, {"X-Eoc-Energy-Reason", "no-rapl"}, {"X-Eoc-Joules", "0.00483775"},
	{"X-Eoc-Joules-High", "0.007256625"}, {"X-Eoc-Joules-Low", "0.002418875"},
	{"X-Eoc-Receipt", "bb98fd74d766daf0660c55f7b3c3e384f7496ad1d6d9154a30bcbf7e416d0c16"},
	{"X-Eoc-Receipt-Time", "2026-12-03T21:42:12.283836943Z"}, {"X-Eoc-Stage", "neural"}, {"X-Request-Id", "req_fc5d8eec28b36bac"},
}

// floorHandler is a yardstick for reading only: the least a proxy does that reads the call and
// the answer in Ollama's native API, as eoc-proxy's default backend does, and says what the call
// cost in eoc-proxy's headers. It decodes the OpenAI request, encodes Ollama's, calls the
// upstream, decodes its answer, encodes OpenAI's and writes floorHeaders: no stages, no meter,
// no receipt, metrics or log. What it adds over the hop is the floor of the product's fixed
// work, on this machine, in the same run.
func floorHandler(upstream string) (http.Handler, error) {
	u, err := url.Parse(upstream)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("bad upstream %q", upstream)
	}
	chatURL := u.JoinPath("/api/chat").String()
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	type usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	}
	type choice struct {
		Index        int     `json:"index"`
		Message      message `json:"message"`
		FinishReason string  `json:"finish_reason"`
	}
	client := &http.Client{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Model    string    `json:"model"`
			Messages []message `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body, err := json.Marshal(struct {
			Model    string    `json:"model"`
			Messages []message `json:"messages"`
			Stream   bool      `json:"stream"`
		}{in.Model, in.Messages, false})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp, err := client.Post(chatURL, "application/json", bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		var out struct {
			Message         message `json:"message"`
			DoneReason      string  `json:"done_reason"`
			PromptEvalCount int     `json:"prompt_eval_count"`
			EvalCount       int     `json:"eval_count"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		_ = resp.Body.Close()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		answer, err := json.Marshal(struct {
			ID      string   `json:"id"`
			Object  string   `json:"object"`
			Created int64    `json:"created"`
			Model   string   `json:"model"`
			Choices []choice `json:"choices"`
			Usage   usage    `json:"usage"`
		}{"chatcmpl-floor", "chat.completion", time.Now().Unix(), in.Model,
			[]choice{{Message: out.Message, FinishReason: out.DoneReason}},
			usage{out.PromptEvalCount, out.EvalCount, out.PromptEvalCount + out.EvalCount}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		for _, kv := range floorHeaders {
			h[kv[0]] = []string{kv[1]}
		}
		h["Content-Type"] = []string{"application/json"}
		_, _ = w.Write(answer)
	}), nil
}
