package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"time"
)

// ctxKey keys the one context value requestID adds: the request's id and its log fields, in
// one allocation and one context layer (every ctx.Value lookup walks the layers).
type ctxKey struct{}

type requestInfo struct {
	id     string
	fields logFields
	header [1]string // X-Request-Id's value, in the same allocation
}

// logFields is what a handler tells the access log about a request. It is written by the one
// goroutine serving the request.
type logFields struct {
	tenant string
	model  string // the model of a decoded call, also one refused before the walk
	call   *Call  // the call, once settled
	err    error
}

func fields(ctx context.Context) *logFields {
	if ri, ok := ctx.Value(ctxKey{}).(*requestInfo); ok {
		return &ri.fields
	}
	return &logFields{}
}

// RequestID returns the request's id.
func RequestID(ctx context.Context) string {
	if ri, ok := ctx.Value(ctxKey{}).(*requestInfo); ok {
		return ri.id
	}
	return ""
}

// MaxHeaderBytes is the request-header size the proxy answers itself, with OpenAI's JSON error
// (431); Envoy's default limit is 60 KiB. HardMaxHeaderBytes is net/http's own limit
// (http.Server.MaxHeaderBytes), past which net/http answers 431 in plain text before any
// handler runs; between the two, this middleware answers.
const (
	MaxHeaderBytes     = 64 << 10
	HardMaxHeaderBytes = http.DefaultMaxHeaderBytes
)

// headerSize is the request line and headers as sent, give or take the line ends' spelling.
func headerSize(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4 + len("Host: ") + len(r.Host) + 2
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// limitHeaders refuses a request whose headers exceed MaxHeaderBytes with a JSON 431, in the
// shape of its route.
func (s *Server) limitHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if headerSize(r) > MaxHeaderBytes {
			w.Header().Set("Connection", "close")
			s.writeRouteError(w, r, &APIError{Status: http.StatusRequestHeaderFieldsTooLarge, Type: "invalid_request_error",
				Code: "request_header_too_large", Message: fmt.Sprintf("request headers are larger than %d bytes", MaxHeaderBytes)})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.handling.Add(1)
		defer s.handling.Done()
		var b [8]byte
		_, _ = rand.Read(b[:])
		var text [len("req_") + 2*len(b)]byte
		copy(text[:], "req_")
		hex.Encode(text[len("req_"):], b[:])
		ri := &requestInfo{id: string(text[:])}
		ri.header[0] = ri.id
		w.Header()["X-Request-Id"] = ri.header[:] // canonical already
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, ri)))
	})
}

// statusWriter records the status and size for the access log. It keeps Flush and the
// ResponseController's deadlines reachable through Unwrap.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// accessLog writes one JSON line per request: id, route, status, stage, model, joules, latency.
// It never logs a prompt, a completion or a key.
func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			f := fields(r.Context())
			took := time.Since(start)
			ev := s.log.Info()
			if sw.status >= 500 {
				ev = s.log.Warn()
			}
			ev = ev.Str("request_id", RequestID(r.Context())).Str("method", r.Method).Str("path", r.URL.Path).
				Int("status", sw.status).Int64("bytes", sw.bytes).Dur("latency_ms", took)
			c := f.call
			if c == nil {
				c = &Call{} // a call refused before the walk
			}
			if c.Stage != "" || f.model != "" {
				ev = ev.Str("stage", c.Stage).Str("model", f.model).Float64("joules", c.Energy.Joules).Str("grade", string(c.Energy.Grade)).
					Str("energy_method", c.Energy.Method)
				if c.Backend != "" {
					ev = ev.Str("backend", c.Backend)
				}
				if c.Energy.Saved > 0 {
					ev = ev.Float64("joules_saved", c.Energy.Saved)
				}
				if c.Energy.Provisional {
					ev = ev.Str("joules_state", StateProvisional)
				}
				var upstream time.Duration // the time spent in the answering stage
				if n := len(c.stages); n > 0 {
					upstream = c.stages[n-1].Duration
				}
				ev = ev.Dur("overhead_ms", took-upstream)
			}
			if f.tenant != "" {
				ev = ev.Str("key_id", f.tenant)
			}
			if f.err != nil {
				ev = ev.AnErr("error", f.err)
			}
			ev.Msg("request")
		}()
		next.ServeHTTP(sw, r)
	})
}

// recoverer turns a panic into a 500 in its route's shape that carries the request id; the stack goes
// to the log only. http.ErrAbortHandler passes through: it is how a broken stream is cut.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			rec := recover()
			if rec == nil {
				return
			}
			if err, ok := rec.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(rec)
			}
			id := RequestID(r.Context())
			if sw, ok := w.(*statusWriter); ok && sw.status != 0 {
				s.log.Error().Str("request_id", id).Str("panic", fmt.Sprint(rec)).Bytes("stack", debug.Stack()).Msg("panic after the response began")
				panic(http.ErrAbortHandler)
			}
			s.log.Error().Str("request_id", id).Str("panic", fmt.Sprint(rec)).Bytes("stack", debug.Stack()).Msg("panic")
			fields(r.Context()).err = fmt.Errorf("panic: %v", rec)
			s.writeRouteError(w, r, &APIError{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error",
				Message: "internal error; request id " + id})
		}()
		next.ServeHTTP(w, r)
	})
}
