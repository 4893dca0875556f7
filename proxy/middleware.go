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

	"github.com/go-chi/chi/v5"
)

// ctxKey keys the one context value edge adds: the request's id and its log fields.
type ctxKey struct{}

// requestInfo is what edge keeps of a request, in one allocation: the request's context (it is
// the context layer that holds the id, the fields and the routing context, answering ctxKey and
// chi's key itself), its id and log fields, and the status writer the access log reads.
type requestInfo struct {
	context.Context
	id     string
	fields logFields
	header [1]string    // X-Request-Id's value
	route  *chi.Context // the router's, which it takes instead of adding a context of its own
	sw     statusWriter
}

// Value answers ctxKey with ri, chi.RouteCtxKey with the routing context, every other key from
// the parent context.
func (ri *requestInfo) Value(key any) any {
	switch key {
	case ctxKey{}:
		return ri
	case chi.RouteCtxKey:
		return ri.route
	}
	return ri.Context.Value(key)
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

// edge is the middleware around the router: it gives the request its id (X-Request-Id, and the
// context's RequestID), writes its access log line, turns a panic into a 500 and refuses headers
// beyond MaxHeaderBytes with a JSON 431 in the shape of the route. One function, so that a request
// pays one allocation for them all; its context carries the router's routing context (a pooled
// one, from s.routes), so that the router adds no context of its own.
func (s *Server) edge(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.handling.Add(1)
		defer s.handling.Done()
		route, _ := r.Context().Value(chi.RouteCtxKey).(*chi.Context)
		if route == nil { // else the server is mounted in a router whose routing goes on
			route = s.routes.Get().(*chi.Context)
			route.Reset()
			route.Routes = s.router
			defer s.routes.Put(route) // after the access log and the recoverer
		}
		start := time.Now()
		var b [8]byte
		_, _ = rand.Read(b[:])
		var text [len("req_") + 2*len(b)]byte
		copy(text[:], "req_")
		hex.Encode(text[len("req_"):], b[:])
		ri := &requestInfo{Context: r.Context(), id: string(text[:]), route: route}
		ri.header[0] = ri.id
		w.Header()["X-Request-Id"] = ri.header[:] // canonical already
		ri.sw.ResponseWriter = w
		r = r.WithContext(ri)
		defer s.accessLog(ri, r, start)
		defer s.recoverer(ri, r)
		if headerSize(r) > MaxHeaderBytes {
			ri.sw.Header().Set("Connection", "close")
			s.writeRouteError(&ri.sw, r, &APIError{Status: http.StatusRequestHeaderFieldsTooLarge, Type: "invalid_request_error",
				Code: "request_header_too_large", Message: fmt.Sprintf("request headers are larger than %d bytes", MaxHeaderBytes)})
			return
		}
		next.ServeHTTP(&ri.sw, r)
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
func (s *Server) accessLog(ri *requestInfo, r *http.Request, start time.Time) {
	f, sw := &ri.fields, &ri.sw
	took := time.Since(start)
	ev := s.log.Info()
	if sw.status >= 500 {
		ev = s.log.Warn()
	}
	ev = ev.Str("request_id", ri.id).Str("method", r.Method).Str("path", r.URL.Path).
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
}

// recoverer, deferred, turns a panic into a 500 in its route's shape that carries the request
// id; the stack goes to the log only. http.ErrAbortHandler passes through: it is how a broken
// stream is cut.
func (s *Server) recoverer(ri *requestInfo, r *http.Request) {
	rec := recover()
	if rec == nil {
		return
	}
	if err, ok := rec.(error); ok && errors.Is(err, http.ErrAbortHandler) {
		panic(rec)
	}
	id := ri.id
	if ri.sw.status != 0 {
		s.log.Error().Str("request_id", id).Str("panic", fmt.Sprint(rec)).Bytes("stack", debug.Stack()).Msg("panic after the response began")
		panic(http.ErrAbortHandler)
	}
	s.log.Error().Str("request_id", id).Str("panic", fmt.Sprint(rec)).Bytes("stack", debug.Stack()).Msg("panic")
	ri.fields.err = fmt.Errorf("panic: %v", rec)
	s.writeRouteError(&ri.sw, r, &APIError{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error",
		Message: "internal error; request id " + id})
}
