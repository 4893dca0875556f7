//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The misbehaving upstream. It speaks Ollama's native API and the OpenAI-compatible one, answers
// any model, and misbehaves per prompt (the last message's text):
//
//   - a prompt with a fault set through POST /control/fault?p=PROMPT&f=FAULT gets that fault until
//     DELETE /control/fault?p=PROMPT clears it (the fault matrix);
//   - "fail500 ..." always gets a 500; "slowstream ..." streams 20 chunks 50 ms apart (the load's
//     injected failures and disconnects).
//
// GET /control/count?p=PROMPT is how many chat calls carried PROMPT; GET /control/cancels how
// many calls the client left before the answer ended.

// faults the matrix injects.
var faultNames = []string{"500", "503", "429", "400", "slow", "reset", "badjson", "badstream", "endless"}

type upstream struct {
	mu      sync.Mutex
	faults  map[string]string
	counts  map[string]int
	cancels atomic.Int64
}

func newUpstream() *upstream {
	return &upstream{faults: map[string]string{}, counts: map[string]int{}}
}

// chatIn is the part of a chat call the upstream reads, in either dialect.
type chatIn struct {
	Model    string `json:"model"`
	Stream   *bool  `json:"stream"`
	Messages []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

func (c *chatIn) prompt() string {
	if len(c.Messages) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(c.Messages[len(c.Messages)-1].Content, &s) == nil {
		return s
	}
	return string(c.Messages[len(c.Messages)-1].Content)
}

func (u *upstream) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/chat", func(w http.ResponseWriter, r *http.Request) { u.chat(w, r, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { u.chat(w, r, true) })
	mux.HandleFunc("GET /api/tags", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, `{"models":[{"name":"m","model":"m","modified_at":"2025-01-01T00:00:00Z","size":1,"digest":"0"}]}`)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, `{"object":"list","data":[{"id":"oa-m","object":"model","created":1700000000,"owned_by":"up"}]}`)
	})
	mux.HandleFunc("GET /api/version", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, `{"version":"0.17.4"}`) })
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "Ollama is running") })
	mux.HandleFunc("POST /control/fault", func(_ http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.faults[r.URL.Query().Get("p")] = r.URL.Query().Get("f")
		u.mu.Unlock()
	})
	mux.HandleFunc("DELETE /control/fault", func(_ http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		delete(u.faults, r.URL.Query().Get("p"))
		u.mu.Unlock()
	})
	mux.HandleFunc("GET /control/count", func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		n := u.counts[r.URL.Query().Get("p")]
		u.mu.Unlock()
		_, _ = io.WriteString(w, strconv.Itoa(n))
	})
	mux.HandleFunc("GET /control/cancels", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, strconv.FormatInt(u.cancels.Load(), 10))
	})
	return mux
}

func writeJSON(w http.ResponseWriter, s string) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, s)
}

func (u *upstream) chat(w http.ResponseWriter, r *http.Request, openai bool) {
	body, _ := io.ReadAll(r.Body)
	var in chatIn
	_ = json.Unmarshal(body, &in)
	p := in.prompt()
	// Ollama streams unless told not to; the OpenAI dialect only when told to.
	stream := in.Stream == nil && !openai || in.Stream != nil && *in.Stream
	u.mu.Lock()
	u.counts[p]++
	fault := u.faults[p]
	u.mu.Unlock()
	switch {
	case strings.HasPrefix(p, "fail500"):
		fault = "500"
	case strings.HasPrefix(p, "slowstream") && fault == "":
		fault = "slowstream"
	}
	d := dialect{openai: openai, model: in.Model}
	if u.storeFault(w, r, d, fault, stream) { // store.go's
		return
	}
	switch fault {
	case "":
		if stream {
			u.stream(w, r, d, 2, 0, false)
		} else {
			writeJSON(w, d.whole("Hello from the upstream."))
		}
	case "500", "503", "429", "400":
		st, _ := strconv.Atoi(fault)
		if st == 429 {
			w.Header().Set("Retry-After", "7")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(st)
		if openai {
			_, _ = fmt.Fprintf(w, `{"error":{"message":"injected %d","type":"server_error","code":null}}`, st)
		} else {
			_, _ = fmt.Fprintf(w, `{"error":"injected %d"}`, st)
		}
	case "slow": // the first byte comes after the backend's timeout
		select {
		case <-time.After(4 * time.Second):
			writeJSON(w, d.whole("late"))
		case <-r.Context().Done():
			u.cancels.Add(1)
		}
	case "reset": // part of the answer, then a TCP reset
		w.Header().Set("Content-Type", d.ctype(stream))
		if stream {
			_, _ = io.WriteString(w, d.chunk("part", false))
		} else {
			_, _ = io.WriteString(w, d.whole("part")[:20])
		}
		w.(http.Flusher).Flush()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = conn.Close()
			return
		}
		panic(http.ErrAbortHandler)
	case "badjson":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"model":"m","message":{"role":"assistant","content":"x"},"done":tru`)
	case "badstream":
		w.Header().Set("Content-Type", d.ctype(true))
		_, _ = io.WriteString(w, d.chunk("ok", false))
		if openai {
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\n\n")
		} else {
			_, _ = io.WriteString(w, "{\"message\":{\"content\":\"x\"},\"done\":\n")
		}
	case "endless":
		u.stream(w, r, d, 1<<30, 100*time.Millisecond, true)
	case "slowstream":
		u.stream(w, r, d, 20, 50*time.Millisecond, false)
	}
}

// stream writes n content chunks gap apart, then the end (unless endless), counting a client
// that leaves before the end.
func (u *upstream) stream(w http.ResponseWriter, r *http.Request, d dialect, n int, gap time.Duration, endless bool) {
	w.Header().Set("Content-Type", d.ctype(true))
	f := w.(http.Flusher)
	for i := range n {
		if i > 0 && gap > 0 {
			select {
			case <-time.After(gap):
			case <-r.Context().Done():
				u.cancels.Add(1)
				return
			}
		}
		if _, err := io.WriteString(w, d.chunk(fmt.Sprintf("w%d ", i), false)); err != nil {
			u.cancels.Add(1)
			return
		}
		f.Flush()
	}
	if !endless {
		_, _ = io.WriteString(w, d.chunk("", true))
	}
}

type dialect struct {
	openai bool
	model  string
}

func (d dialect) ctype(stream bool) string {
	switch {
	case !stream:
		return "application/json"
	case d.openai:
		return "text/event-stream"
	}
	return "application/x-ndjson"
}

func (d dialect) whole(text string) string {
	m, _ := json.Marshal(d.model)
	t, _ := json.Marshal(text)
	if d.openai {
		return `{"id":"chatcmpl-up","object":"chat.completion","created":1700000000,"model":` + string(m) +
			`,"choices":[{"index":0,"message":{"role":"assistant","content":` + string(t) + `},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":4,"total_tokens":16}}`
	}
	return `{"model":` + string(m) + `,"created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":` + string(t) +
		`},"done":true,"done_reason":"stop","prompt_eval_count":12,"eval_count":4,"eval_duration":3000000}`
}

func (d dialect) chunk(text string, last bool) string {
	m, _ := json.Marshal(d.model)
	t, _ := json.Marshal(text)
	var b bytes.Buffer
	if d.openai {
		if last {
			b.WriteString(`data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1700000000,"model":` + string(m) +
				`,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":4,"total_tokens":16}}` + "\n\ndata: [DONE]\n\n")
		} else {
			b.WriteString(`data: {"id":"chatcmpl-up","object":"chat.completion.chunk","created":1700000000,"model":` + string(m) +
				`,"choices":[{"index":0,"delta":{"role":"assistant","content":` + string(t) + `},"finish_reason":null}]}` + "\n\n")
		}
		return b.String()
	}
	if last {
		return `{"model":` + string(m) + `,"created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":12,"eval_count":4}` + "\n"
	}
	return `{"model":` + string(m) + `,"created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":` + string(t) + `},"done":false}` + "\n"
}
