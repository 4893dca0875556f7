// Package fakes serves loopback fakes of Ollama, OpenAI and llama.cpp for tests and benchmarks.
//
// Each fake is an httptest.Server that speaks one upstream dialect well enough for the proxy: chat
// completions whole and streamed (with the usage chunk and timings where the real server sends
// them), embeddings (deterministic vectors from a hash of each text), model listing and health. Knobs in Config make it fail, stall, block or cut a stream, and
// the Server records what it saw: the number of chat calls, the last request, and whether a client
// went away mid-call. Responses are written straight to the wire without reflection, so a fake is
// cheap enough to stand in as the fast upstream in overhead benchmarks.
package fakes

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// Dialect is the upstream API a fake speaks.
type Dialect string

// Dialects.
const (
	Ollama   Dialect = "ollama"   // native /api/chat (NDJSON), /api/embed, /api/tags, /api/version
	OpenAI   Dialect = "openai"   // /v1/chat/completions (JSON and SSE), /v1/embeddings, /v1/models
	LlamaCpp Dialect = "llamacpp" // OpenAI's dialect plus llama-server's timings and /health
)

// Defaults used when a Config field is left zero.
const (
	DefaultReply  = "Hello from the fake upstream."
	DefaultChunks = 4
	DefaultModel  = "fake-model"
	// DefaultErrorMessage is the message of the error body sent with Config.Status.
	DefaultErrorMessage = "fake upstream error"
	// Created is the fixed creation time the OpenAI-style fakes report.
	Created = 1700000000
	// ID is the completion id the OpenAI-style fakes report.
	ID = "chatcmpl-fake"
)

// DefaultTimings is what the Ollama and llama.cpp fakes report about their own work when
// Config.Timings is nil. PromptN and PredictedN follow the usage.
var DefaultTimings = cascade.Timings{
	CacheN:     3,
	Load:       time.Millisecond,
	PromptEval: 2 * time.Millisecond,
	Eval:       3 * time.Millisecond,
	Total:      7 * time.Millisecond,
}

// Config is what a fake answers. The zero value answers DefaultReply in DefaultChunks chunks with
// finish reason "stop".
type Config struct {
	// Reply is the assistant's text; it is split into Chunks stream chunks (some may be empty
	// when Chunks exceeds its length in runes).
	Reply string
	// Chunks is the number of content chunks a stream carries.
	Chunks int
	// Usage is the token count reported; default 12 prompt tokens and one completion token per
	// chunk.
	Usage *cascade.Usage
	// FinishReason is the finish reason (Ollama: done_reason); default "stop", or "tool_calls"
	// (Ollama: "stop") when ToolCalls are set.
	FinishReason string
	// ToolCalls, when set, are called by the model instead of replying with text. Arguments
	// must be a JSON object (or empty for {}).
	ToolCalls []cascade.ToolCall
	// Timings is what Ollama (durations) and llama.cpp (timings) report; default DefaultTimings.
	Timings *cascade.Timings
	// Models are listed by /api/tags and /v1/models; default [DefaultModel].
	Models []string

	// Status, when non-zero, makes every chat and embeddings call fail with this HTTP status.
	Status int
	// ErrorBody is sent with Status; default the dialect's error shape with DefaultErrorMessage.
	ErrorBody string
	// Delay is waited before answering a chat call (cut short when the client goes away).
	Delay time.Duration
	// ChunkDelay is waited between stream chunks.
	ChunkDelay time.Duration
	// Block makes a chat call wait, before sending any byte, until the client goes away.
	Block bool
	// BlockAfter > 0 streams that many content chunks, then waits until the client goes away.
	BlockAfter int
	// TruncateAfter > 0 streams that many content chunks, then closes the connection without the
	// final chunk, done or [DONE]; a negative value closes it right after the headers. A whole
	// (non-stream) answer is cut halfway through its body instead.
	TruncateAfter int
	// HealthStatus is the status of llama.cpp's /health; default 200.
	HealthStatus int
}

// Request is what a fake recorded of a chat call.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// Server is a running fake. Its knobs change through Configure; it is safe for concurrent use.
type Server struct {
	*httptest.Server
	Dialect Dialect

	mu   sync.Mutex
	cfg  Config // as configured
	eff  Config // cfg with defaults, shared read-only by the handlers
	last Request

	requests   atomic.Int64
	embeds     atomic.Int64
	conns      atomic.Int64
	cancels    atomic.Int64
	canceled   chan struct{}
	cancelOnce sync.Once
}

// NewOllama starts an Ollama fake, closed when the test ends. cfg is optional; only the first is used.
func NewOllama(t testing.TB, cfg ...Config) *Server { return New(t, Ollama, cfg...) }

// NewOpenAI starts an OpenAI fake, closed when the test ends. cfg is optional; only the first is used.
func NewOpenAI(t testing.TB, cfg ...Config) *Server { return New(t, OpenAI, cfg...) }

// NewLlamaCpp starts a llama.cpp fake, closed when the test ends. cfg is optional; only the first is used.
func NewLlamaCpp(t testing.TB, cfg ...Config) *Server { return New(t, LlamaCpp, cfg...) }

// New starts a fake of dialect d, closed when the test ends.
func New(t testing.TB, d Dialect, cfg ...Config) *Server {
	t.Helper()
	s := &Server{Dialect: d, canceled: make(chan struct{})}
	if len(cfg) > 0 {
		s.cfg = cfg[0]
	}
	s.eff = s.cfg.withDefaults()
	mux := http.NewServeMux()
	switch d {
	case Ollama:
		mux.HandleFunc("POST /api/chat", s.ollamaChat)
		mux.HandleFunc("POST /api/embed", s.ollamaEmbed)
		mux.HandleFunc("GET /api/tags", s.ollamaTags)
		mux.HandleFunc("GET /api/version", s.ollamaVersion)
		mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "Ollama is running") })
	case OpenAI, LlamaCpp:
		mux.HandleFunc("POST /v1/chat/completions", s.openaiChat)
		mux.HandleFunc("GET /v1/models", s.openaiModels)
		mux.HandleFunc("POST /v1/embeddings", s.openaiEmbed)
		if d == LlamaCpp {
			mux.HandleFunc("POST /chat/completions", s.openaiChat)
			mux.HandleFunc("POST /embeddings", s.openaiEmbed)
			mux.HandleFunc("GET /models", s.openaiModels)
			mux.HandleFunc("GET /health", s.llamaHealth)
		}
	default:
		t.Fatalf("fakes: unknown dialect %q", d)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, http.StatusNotFound, "not found: "+r.Method+" "+r.URL.Path)
	})
	s.Server = httptest.NewUnstartedServer(mux)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(func() {
		// Blocked handlers return once their connection is gone.
		s.CloseClientConnections()
		s.Close()
	})
	return s
}

// BaseURL is the URL a backend is configured with: the root for Ollama, the root plus /v1 for
// OpenAI and llama.cpp.
func (s *Server) BaseURL() string {
	if s.Dialect == Ollama {
		return s.URL
	}
	return s.URL + "/v1"
}

// Configure changes the knobs for the calls that start after it returns.
func (s *Server) Configure(f func(*Config)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.cfg)
	s.eff = s.cfg.withDefaults()
}

// Requests is the number of chat calls received.
func (s *Server) Requests() int { return int(s.requests.Load()) }

// Embeds is the number of embeddings calls received (/api/embed, /v1/embeddings).
func (s *Server) Embeds() int { return int(s.embeds.Load()) }

// Conns is the number of connections clients opened, to check that they keep connections alive.
func (s *Server) Conns() int { return int(s.conns.Load()) }

// LastRequest is the last chat or embeddings call received (zero before the first). Its fields must not be
// modified.
func (s *Server) LastRequest() Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// LastBody is the body of the last chat call received.
func (s *Server) LastBody() []byte { return s.LastRequest().Body }

// Cancels is the number of chat calls whose client went away before the fake finished answering.
func (s *Server) Cancels() int { return int(s.cancels.Load()) }

// Canceled is closed once the first client goes away before the fake finished answering.
func (s *Server) Canceled() <-chan struct{} { return s.canceled }

// WaitCanceled reports whether a client went away mid-call within d.
func (s *Server) WaitCanceled(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.canceled:
		return true
	case <-t.C:
		return false
	}
}

// begin records a chat call and returns the knobs it runs under, with defaults filled in.
func (s *Server) begin(r *http.Request) ([]byte, Config, error) {
	s.requests.Add(1)
	return s.record(r)
}

// record keeps r as the last request and returns its body and the knobs it runs under.
func (s *Server) record(r *http.Request) ([]byte, Config, error) {
	body, err := io.ReadAll(r.Body)
	s.mu.Lock()
	// The server builds a new header map per request and the handlers never change it.
	s.last = Request{Method: r.Method, Path: r.URL.Path, Header: r.Header, Body: body}
	cfg := s.eff
	s.mu.Unlock()
	if err != nil {
		// The client went away while sending its body (its timeout can fire that early on a
		// loaded machine): a call cut before the fake answered, as much as one cut later.
		s.sawCancel()
	}
	return body, cfg, err
}

// config is the knobs in effect, with defaults.
func (s *Server) config() Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eff
}

func (c Config) withDefaults() Config {
	if c.Reply == "" {
		c.Reply = DefaultReply
	}
	if c.Chunks <= 0 {
		c.Chunks = DefaultChunks
	}
	if c.Usage == nil {
		c.Usage = &cascade.Usage{PromptTokens: 12, CompletionTokens: c.Chunks, TotalTokens: 12 + c.Chunks}
	}
	if c.Timings == nil {
		t := DefaultTimings
		c.Timings = &t
	}
	if c.Timings.PromptN == 0 {
		t := *c.Timings
		t.PromptN = c.Usage.PromptTokens
		c.Timings = &t
	}
	if c.Timings.PredictedN == 0 {
		t := *c.Timings
		t.PredictedN = c.Usage.CompletionTokens
		c.Timings = &t
	}
	if len(c.Models) == 0 {
		c.Models = []string{DefaultModel}
	}
	if c.HealthStatus == 0 {
		c.HealthStatus = http.StatusOK
	}
	return c
}

// sawCancel records a client that went away mid-call.
func (s *Server) sawCancel() {
	s.cancels.Add(1)
	s.cancelOnce.Do(func() { close(s.canceled) })
}

// prelude applies Delay, Block and Status. It reports false when the call is over.
func (s *Server) prelude(w http.ResponseWriter, r *http.Request, cfg *Config) bool {
	if cfg.Delay > 0 && !s.wait(r, cfg.Delay) {
		return false
	}
	if cfg.Block {
		s.block(r)
		return false
	}
	if cfg.Status != 0 {
		if cfg.ErrorBody != "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(cfg.Status)
			_, _ = io.WriteString(w, cfg.ErrorBody)
			return false
		}
		s.writeError(w, cfg.Status, DefaultErrorMessage)
		return false
	}
	return true
}

// wait sleeps for d unless the client goes away first; it reports whether the call goes on.
func (s *Server) wait(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		s.sawCancel()
		return false
	}
}

func (s *Server) block(r *http.Request) {
	<-r.Context().Done()
	s.sawCancel()
}

// between runs between two stream chunks: the chunk delay, and a check that the client is still
// there. It reports whether the stream goes on.
func (s *Server) between(r *http.Request, cfg *Config) bool {
	if cfg.ChunkDelay > 0 {
		return s.wait(r, cfg.ChunkDelay)
	}
	if r.Context().Err() != nil {
		s.sawCancel()
		return false
	}
	return true
}

// cut closes the connection under a response without ending it properly.
func cut(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	conn, _, err := rc.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

// writeWhole writes a whole JSON answer, or half of it before cutting the connection.
func writeWhole(w http.ResponseWriter, body []byte, truncate bool) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if truncate {
		h.Set("Content-Length", itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body[:len(body)/2])
		cut(w)
		return
	}
	_, _ = w.Write(body)
}

// writeError writes the dialect's error body.
func (s *Server) writeError(w http.ResponseWriter, status int, msg string) {
	var b []byte
	if s.Dialect == Ollama {
		b = append(b, `{"error":`...)
		b = appendString(b, msg)
		b = append(b, '}')
	} else {
		b = appendOpenAIError(b, status, msg)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func appendOpenAIError(b []byte, status int, msg string) []byte {
	typ := "invalid_request_error"
	switch {
	case status == http.StatusUnauthorized:
		typ = "authentication_error"
	case status == http.StatusNotFound:
		typ = "not_found_error"
	case status == http.StatusServiceUnavailable:
		typ = "unavailable_error"
	case status >= 500:
		typ = "server_error"
	}
	b = append(b, `{"error":{"message":`...)
	b = appendString(b, msg)
	b = append(b, `,"type":`...)
	b = appendString(b, typ)
	b = append(b, `,"param":null,"code":"fake_error"}}`...)
	return b
}

// split cuts s into n pieces of about equal length in runes.
func split(s string, n int) []string {
	runes := []rune(s)
	out := make([]string, n)
	for i := range n {
		lo, hi := i*len(runes)/n, (i+1)*len(runes)/n
		out[i] = string(runes[lo:hi])
	}
	return out
}

func toolArgs(tc cascade.ToolCall) string {
	if tc.Function.Arguments == "" {
		return "{}"
	}
	return tc.Function.Arguments
}
