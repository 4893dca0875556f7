//go:build linux

package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The fake upstream's fixed answers. It speaks Ollama's native API (what the shipped eoc.yaml's
// backend, type ollama, calls) and the OpenAI-compatible API Ollama also serves (what the direct
// and reverse-proxy paths call), each with one small fixed completion whole, and streamChunks
// chunks of streamToken when streamed.
const (
	upModel = "bench-model"

	// streamToken is each streamed chunk's text; the client finds the first token by it, so it
	// is nowhere in a prompt or an instruction.
	streamToken  = "Blorp "
	streamChunks = 32

	ollamaWhole = `{"model":"bench-model","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"Hello from the fake upstream."},"done":true,"done_reason":"stop","total_duration":7000000,"load_duration":1000000,"prompt_eval_count":12,"prompt_eval_duration":2000000,"eval_count":4,"eval_duration":3000000}`

	openaiWhole = `{"id":"chatcmpl-fake","object":"chat.completion","created":1700000000,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the fake upstream."},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":4,"total_tokens":16}}`
)

// The streamed answers: streamChunks chunks of streamToken, each written and flushed on its own,
// then the end (Ollama's done line with its counts; OpenAI's finish chunk with usage and [DONE]).
var (
	ollamaChunk = []byte(`{"model":"bench-model","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":"` + streamToken + `"},"done":false}` + "\n")
	ollamaEnd   = []byte(`{"model":"bench-model","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","total_duration":7000000,"load_duration":1000000,"prompt_eval_count":12,"prompt_eval_duration":2000000,"eval_count":32,"eval_duration":3000000}` + "\n")
	openaiChunk = []byte("data: {\"id\":\"chatcmpl-fake\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"bench-model\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"" + streamToken + "\"},\"finish_reason\":null}]}\n\n")
	openaiEnd   = []byte("data: {\"id\":\"chatcmpl-fake\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"bench-model\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":32,\"total_tokens\":44}}\n\n" +
		"data: [DONE]\n\n")
)

// firstTokenGap is the upstream's pause after the first chunk, as a model's between two tokens,
// so that the first token's trip through each proxy is timed alone, not while the proxy and the
// client also handle the rest of the stream.
const firstTokenGap = time.Millisecond

// streamOut writes chunk streamChunks times, flushing each, with firstTokenGap after the first,
// then end.
func streamOut(w http.ResponseWriter, contentType string, chunk, end []byte) {
	w.Header().Set("Content-Type", contentType)
	rc := http.NewResponseController(w)
	for i := range streamChunks {
		if _, err := w.Write(chunk); err != nil {
			return
		}
		_ = rc.Flush()
		if i == 0 {
			time.Sleep(firstTokenGap)
		}
	}
	_, _ = w.Write(end)
}

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
		streamOut(w, "application/x-ndjson", ollamaChunk, ollamaEnd)
	})
	mux.HandleFunc("GET /api/tags", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, `{"models":[{"name":"bench-model","model":"bench-model","modified_at":"2025-01-01T00:00:00Z","size":1,"digest":"0"}]}`)
	})
	mux.HandleFunc("GET /api/version", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, `{"version":"0.17.4"}`) })
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "Ollama is running") })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"stream":true`)) {
			streamOut(w, "text/event-stream", openaiChunk, openaiEnd)
			return
		}
		writeJSON(w, openaiWhole)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, `{"object":"list","data":[{"id":"bench-model","object":"model","created":1700000000,"owned_by":"bench"}]}`)
	})
	return mux
}

// reverseProxyHandler is yardstick 1: one bare httputil.ReverseProxy hop, as configured by
// default, with the request body read first. Streamed through a bare ReverseProxy, an answer is
// cut now and then: writing its headers closes the inbound body while the transport still reads
// it once more past its length, and the transport then drops the upstream connection
// (golang/go#40747). eoc-proxy reads the whole body before its call, as this does.
func reverseProxyHandler(target string) (http.Handler, error) {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("bad target %q", target)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	}), nil
}

// cachedResponse is what eoc-proxy answered for a cache hit, for the bare handler to replay.
type cachedResponse struct {
	Header http.Header `json:"header"`
	Body   []byte      `json:"body"`
}

// readHit reads the cache hit captured in the file at path, its Date left out for the server to
// write.
func readHit(path string) (cachedResponse, error) {
	var cr cachedResponse
	raw, err := os.ReadFile(path)
	if err != nil {
		return cr, err
	}
	if err := json.Unmarshal(raw, &cr); err != nil {
		return cr, fmt.Errorf("%s: %w", path, err)
	}
	cr.Header.Del("Date")
	return cr, nil
}

// bareHandler is yardstick 2: a bare handler that drains the request and writes the bytes and
// headers eoc-proxy wrote for a cache hit, Date left to the server.
func bareHandler(path string) (http.Handler, error) {
	cr, err := readHit(path)
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		for k, v := range cr.Header {
			h[k] = v
		}
		_, _ = w.Write(cr.Body)
	}), nil
}

// hitFloorHandler is a yardstick for reading only: the least an exact-match caching proxy does
// for a hit, as the translator floor is for a neural call. It reads the body (bounded) and keys
// it: with decode, by decoding the OpenAI request with encoding/json and taking SHA-256 of the
// decoded request encoded again (a key that does not care for spacing or field order, and a
// request a proxy can route); without, by SHA-256 of the body's bytes as they came. It looks the
// key up in a map under a read lock (the first request of a key stores the answer eoc-proxy gave
// for it), encodes the stored answer with a fresh id and creation time, and writes the headers
// eoc-proxy wrote for the hit (its figures as captured, Content-Length the new body's): no
// stages, no receipt, budget, metrics or log.
func hitFloorHandler(path string, decode bool) (http.Handler, error) {
	cr, err := readHit(path)
	if err != nil {
		return nil, err
	}
	var answer hitAnswer
	if err := json.Unmarshal(cr.Body, &answer); err != nil {
		return nil, fmt.Errorf("%s: the answer: %w", path, err)
	}
	cr.Header.Del("Content-Length")
	var (
		mu     sync.RWMutex
		stored = map[[sha256.Size]byte]*hitAnswer{}
		n      atomic.Uint64
	)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := http.MaxBytesReader(w, r.Body, 10<<20)
		var key [sha256.Size]byte
		if decode {
			var in struct {
				Model       string         `json:"model"`
				Messages    []floorMessage `json:"messages"`
				Stream      bool           `json:"stream"`
				Temperature *float64       `json:"temperature,omitempty"`
				MaxTokens   *int           `json:"max_tokens,omitempty"`
			}
			if err := json.NewDecoder(body).Decode(&in); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			canon, err := json.Marshal(in)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			key = sha256.Sum256(canon)
		} else {
			raw, err := io.ReadAll(body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			key = sha256.Sum256(raw)
		}
		mu.RLock()
		a, ok := stored[key]
		mu.RUnlock()
		if !ok {
			mu.Lock()
			a = &answer
			stored[key] = a
			mu.Unlock()
		}
		out := *a
		out.ID = fmt.Sprintf("chatcmpl-%024x", n.Add(1)) // as long as eoc-proxy's ids
		out.Created = time.Now().Unix()
		b, err := json.Marshal(&out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		for k, v := range cr.Header {
			h[k] = v
		}
		h["Content-Length"] = []string{strconv.Itoa(len(b))}
		_, _ = w.Write(b)
	}), nil
}

// hitAnswer is the chat completion a cache hit answers with, as the hit floor stores it.
type hitAnswer struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint,omitempty"`
	Choices           []floorChoice `json:"choices"`
	Usage             floorUsage    `json:"usage"`
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

// floorStreamHeaders are the floor's headers that go out before a stream; the rest of
// floorHeaders go out as trailers, as eoc-proxy's figures do.
var floorStreamHeaders = map[string]bool{"X-Eoc-Attempts": true, "X-Eoc-Backend": true, "X-Eoc-Stage": true, "X-Request-Id": true}

// floorHandler is a yardstick for reading only: the least a proxy does that reads the call and
// the answer in Ollama's native API, as eoc-proxy's default backend does, and says what the call
// cost in eoc-proxy's headers. It decodes the OpenAI request, encodes Ollama's, calls the
// upstream, decodes its answer, encodes OpenAI's and writes floorHeaders: no stages, no meter,
// no receipt, metrics or log. What it adds over the hop is the floor of the product's fixed
// work, on this machine, in the same run. A streamed call is the same per line of Ollama's
// stream, each chunk flushed, then a closing chunk with the figures, [DONE] and the trailers.
func floorHandler(upstream string) (http.Handler, error) {
	u, err := url.Parse(upstream)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("bad upstream %q", upstream)
	}
	chatURL := u.JoinPath("/api/chat").String()
	client := &http.Client{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Model    string         `json:"model"`
			Messages []floorMessage `json:"messages"`
			Stream   bool           `json:"stream"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body, err := json.Marshal(struct {
			Model    string         `json:"model"`
			Messages []floorMessage `json:"messages"`
			Stream   bool           `json:"stream"`
		}{in.Model, in.Messages, in.Stream})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp, err := client.Post(chatURL, "application/json", bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		if in.Stream {
			floorStream(w, in.Model, resp.Body)
			return
		}
		var out ollamaLine
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		answer, err := json.Marshal(struct {
			ID      string        `json:"id"`
			Object  string        `json:"object"`
			Created int64         `json:"created"`
			Model   string        `json:"model"`
			Choices []floorChoice `json:"choices"`
			Usage   floorUsage    `json:"usage"`
		}{"chatcmpl-floor", "chat.completion", time.Now().Unix(), in.Model,
			[]floorChoice{{Message: &out.Message, FinishReason: &out.DoneReason}},
			floorUsage{out.PromptEvalCount, out.EvalCount, out.PromptEvalCount + out.EvalCount}})
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

type floorMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type floorUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type floorChoice struct {
	Index        int           `json:"index"`
	Message      *floorMessage `json:"message,omitempty"`
	Delta        *floorMessage `json:"delta,omitempty"`
	FinishReason *string       `json:"finish_reason"`
}

// ollamaLine is Ollama's answer, or one line of its stream.
type ollamaLine struct {
	Message         floorMessage `json:"message"`
	Done            bool         `json:"done"`
	DoneReason      string       `json:"done_reason"`
	PromptEvalCount int          `json:"prompt_eval_count"`
	EvalCount       int          `json:"eval_count"`
}

// floorStream translates Ollama's stream into OpenAI's chunks, each flushed as it comes.
func floorStream(w http.ResponseWriter, model string, upstream io.Reader) {
	h := w.Header()
	var trailers []string
	for _, kv := range floorHeaders {
		if floorStreamHeaders[kv[0]] {
			h[kv[0]] = []string{kv[1]}
		} else {
			trailers = append(trailers, kv[0])
		}
	}
	h["Content-Type"] = []string{"text/event-stream"}
	h["Cache-Control"] = []string{"no-cache"}
	h["Trailer"] = []string{strings.Join(trailers, ", ")}
	rc := http.NewResponseController(w)
	created := time.Now().Unix()
	var buf bytes.Buffer
	send := func(v any) bool {
		buf.Reset()
		buf.WriteString("data: ")
		if err := json.NewEncoder(&buf).Encode(v); err != nil {
			return false
		}
		buf.WriteString("\n")
		if _, err := w.Write(buf.Bytes()); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	type chunk struct {
		ID      string        `json:"id"`
		Object  string        `json:"object"`
		Created int64         `json:"created"`
		Model   string        `json:"model"`
		Choices []floorChoice `json:"choices"`
		Usage   *floorUsage   `json:"usage,omitempty"`
		EOC     any           `json:"eoc,omitempty"`
	}
	sc := bufio.NewScanner(upstream)
	for sc.Scan() {
		var line ollamaLine
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			panic(http.ErrAbortHandler)
		}
		c := chunk{ID: "chatcmpl-floor", Object: "chat.completion.chunk", Created: created, Model: model}
		if line.Done {
			c.Choices = []floorChoice{{Delta: &floorMessage{}, FinishReason: &line.DoneReason}}
			c.Usage = &floorUsage{line.PromptEvalCount, line.EvalCount, line.PromptEvalCount + line.EvalCount}
		} else {
			c.Choices = []floorChoice{{Delta: &line.Message}}
		}
		if !send(c) {
			return
		}
	}
	fig := map[string]string{}
	for _, kv := range floorHeaders {
		fig[kv[0]] = kv[1]
	}
	if !send(chunk{ID: "chatcmpl-floor", Object: "chat.completion.chunk", Created: created, Model: model, Choices: []floorChoice{}, EOC: fig}) {
		return
	}
	if _, err := io.WriteString(w, "data: [DONE]\n\n"); err != nil {
		return
	}
	for _, kv := range floorHeaders {
		if !floorStreamHeaders[kv[0]] {
			h[kv[0]] = []string{kv[1]}
		}
	}
}
