package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
	"github.com/eoc-proxy/eoc-proxy/telemetry/genai"
)

// route serves the chat-like dialect d at POST path: the shared admission, walk and settlement,
// with every error, those before the body is decoded included, in d's shape. New calls it
// before building the handler tree.
func (s *Server) route(path string, d dialect.Dialect) {
	if _, dup := s.dialects[path]; dup {
		panic("proxy: two dialects at " + path)
	}
	s.dialects[path] = d
	s.paths = append(s.paths, path)
}

// errorsFor is the shape of r's errors: its route's dialect, OpenAI's for the other routes.
// A path under a dialect's (its stored answers, its count_tokens) takes that dialect's shape.
func (s *Server) errorsFor(r *http.Request) errorRenderer {
	for p := r.URL.Path; p != ""; p = p[:strings.LastIndexByte(p, '/')] {
		if d, ok := s.dialects[p]; ok {
			return d
		}
	}
	return openAIErrors{}
}

// writeRouteError writes e in the shape of r's route.
func (s *Server) writeRouteError(w http.ResponseWriter, r *http.Request, e *APIError) {
	writeErrorAs(w, s.errorsFor(r), e)
}

// serve is the one handler of every chat-like dialect: read the body, decode it with d, admit
// the call (rate limit, budget), walk the cascade, settle, then render the answer (whole, or a
// stream of d's events) with the X-EOC headers or trailers; every error in d's shape. Once the
// response is flushed, the call is reported and the answer learned (report).
func (s *Server) serve(d dialect.Dialect) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		lf := fields(r.Context())
		st := new(callState)
		req := &st.req
		x, apiErr := s.decode(w, r, d, lf.tenant, req)
		if apiErr != nil {
			s.refuse(w, d, lf, apiErr)
			return
		}
		// The request timeout bounds the wait for an answer, admission included: a stream that
		// has begun is bounded by the backend's own timeouts instead, which cut it only when it
		// stops flowing.
		bound := &st.bound
		bound.init(r.Context(), s.opts.RequestTimeout, x.Stream())
		defer bound.end()
		var ctx context.Context = bound
		resv, ok := s.admit(ctx, w, d, lf, req.Chat.Model)
		if !ok {
			return
		}
		s.metrics.callIn()
		defer s.metrics.callOut()
		res := &st.res
		var sw *sseWriter
		var sink cascade.StageSink
		if x.Stream() {
			sw = newSSEWriter(w, x.Encoder(), s.opts.StreamIdle, bound.stop)
			s.setBudgetHeader(w.Header(), req.Tenant)
			sink = sw
		}
		var learn func()
		err := s.guard(req.ID, func() (werr error) {
			learn, werr = s.cascade.WalkLearnLater(ctx, req, res, sink)
			return werr
		})
		// A whole answer is rendered before the call is settled, so the record holds the status
		// the client gets, also when the dialect cannot render it (an error, or a panic).
		var whole []byte
		if sw == nil && err == nil {
			err = s.guard(req.ID, func() (werr error) {
				whole, werr = x.Whole(res.Answer)
				return werr
			})
		}
		c := &st.call
		c.begin(req.ID, req.Tenant, req.Key(), req.Chat.Model, start, s.span(ctx))
		c.wrote = res.Wrote
		c.op, c.streamed = operation(r.URL.Path), sw != nil
		if sw != nil && !sw.first.IsZero() {
			c.firstToken = sw.first.Sub(start)
		}
		if ans := res.Answer; ans != nil {
			c.answer(res.Stage, res.Attempts, true, ans.Energy, ans.Backend, ans.Attempts, res.Settle)
			c.timings = ans.Timings
			if u := ans.Usage; u != nil {
				c.tokens, c.promptTokens = u.CompletionTokens, u.PromptTokens
				if ans.Backend != "" { // a backend's tokens, not a cache hit's
					s.limits.addTokens(req.Tenant, u.CompletionTokens)
				}
			}
		} else {
			c.answer(res.Stage, res.Attempts, false, energy.Figure{}, "", nil, res.Settle)
		}
		c.learn = learn
		s.settle(c, resv, err, lf)
		defer s.report(c) // after the response, also one cut by a panic
		if sw == nil || !sw.started {
			setBackendHeaders(w.Header(), c.Backend, c.Attempts, st.hdr[okHeaders:okHeaders])
		}
		switch {
		case sw != nil && (sw.started || err == nil):
			if s.finishStream(w, sw, res.Answer, c, err) != nil {
				return
			}
		case err != nil:
			// The walk ran: what it spent, and its receipt, go on the error response too.
			setEnergyHeaders(w.Header(), c)
			writeErrorAs(w, d, c.err)
			flush(w)
			return
		default:
			writeOK(w, c, whole, st.hdr[:0:okHeaders])
		}
		// Before a whole answer is flushed: a stored response (Responses' previous_response_id) is
		// there for the client's next call.
		if derr := x.Done(ctx, res.Answer); derr != nil {
			s.log.Warn().Err(derr).Str("request_id", req.ID).Msg("dialect: after the answer")
		}
		flush(w)
	}
}

// callState is what serve keeps of one call, in one allocation: the cascade's request, its
// context bounded by the request timeout, the walk's result, the call as it is settled and its
// headers' values.
type callState struct {
	req   cascade.Request
	bound requestTimeout
	res   cascade.Result
	call  Call
	// hdr backs the values of a whole answer's headers (writeOK), then the backend's
	// (setBackendHeaders).
	hdr [okHeaders + backendHeaders]string
}

// guard runs a cascade walk, turning a panic in a stage or backend into an error (500,
// internal_error) so the call is still settled and recorded; the stack goes to the log only.
func (s *Server) guard(id string, walk func() error) (err error) {
	defer func() {
		rec := recover()
		if rec == nil {
			return
		}
		// A runtime error says what went wrong; any other value may carry request data, so only
		// its type is kept.
		what := fmt.Sprintf("%T", rec)
		if re, ok := rec.(runtime.Error); ok {
			what = re.Error()
		}
		s.log.Error().Str("request_id", id).Str("panic", what).Bytes("stack", debug.Stack()).Msg("panic in the cascade")
		err = &APIError{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error",
			Message: "internal error; request id " + id, Err: errors.New("panic: " + what)}
	}()
	return walk()
}

// decode reads the body of tenant's call and decodes it with d into req, the cascade's request.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, d dialect.Dialect, tenant string, req *cascade.Request) (dialect.Exchange, *APIError) {
	body, apiErr := s.readJSON(w, r)
	if apiErr != nil {
		return nil, apiErr
	}
	x, derr := d.Decode(r.Context(), tenant, body)
	if derr != nil {
		return nil, fromWire(derr)
	}
	if cx, ok := x.(*chatExchange); ok && cx.req != nil {
		*req = *cx.req // the memo's, its key computed once for the calls with these bytes
	} else {
		*req = cascade.Request{Tenant: tenant, Chat: *x.Chat(), Raw: x.RawChat()}
	}
	req.ID, req.Tracer = RequestID(r.Context()), s.stages
	req.NoCache, req.NoStore = cacheControl(r)
	return x, nil
}

// refuse answers a request that did not decode.
func (s *Server) refuse(w http.ResponseWriter, d errorRenderer, lf *logFields, apiErr *APIError) {
	lf.err = apiErr
	s.setBudgetHeader(w.Header(), lf.tenant)
	writeErrorAs(w, d, apiErr)
}

// admit names the model of a decoded call for the access log, takes its key's rate limit and
// reserves its budget, waiting at most as long as ctx; when either refuses, it writes the answer
// in d's shape and returns false.
func (s *Server) admit(ctx context.Context, w http.ResponseWriter, d errorRenderer, lf *logFields, model string) (reservation, bool) {
	lf.model = model
	if apiErr := s.limits.take(ctx, lf.tenant); apiErr != nil {
		// No budget header: a refusal by rate limit must not cost a shared-budget round trip.
		s.fail(w, d, model, apiErr, lf)
		return reservation{}, false
	}
	resv, err := s.budgets.admit(ctx, lf.tenant)
	if err != nil {
		if errors.Is(context.Cause(ctx), errRequestTimeout) {
			err = &APIError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "budget_wait_timeout",
				Message: "timed out waiting for this key's first call to be priced against its budget", Err: err}
		}
		s.setBudgetHeader(w.Header(), lf.tenant)
		s.fail(w, d, model, err, lf)
		return resv, false
	}
	return resv, true
}

// fail answers a call that was refused before the walk, in d's shape.
func (s *Server) fail(w http.ResponseWriter, d errorRenderer, model string, err error, lf *logFields) {
	e := classify(err, model)
	lf.err = e
	writeErrorAs(w, d, e)
}

// readJSON reads the body up to MaxBodyBytes within BodyTimeout. A declared Content-Length
// beyond the limit is refused before anything is read. A body that is refused leaves the read
// deadline in place (passed, for a body that stays unread), so that the server's drain of the
// rest of the body after the answer ends at once and the connection is closed (Connection:
// close) instead of waiting on a client that stalls.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request) ([]byte, *APIError) {
	tooLarge := func(limit int64) *APIError {
		return &APIError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
			Message: fmt.Sprintf("request body is larger than %d bytes", limit)}
	}
	rc := http.NewResponseController(w)
	if r.ContentLength > s.opts.MaxBodyBytes {
		w.Header().Set("Connection", "close") // the body stays unread
		_ = rc.SetReadDeadline(time.Now())
		return nil, tooLarge(s.opts.MaxBodyBytes)
	}
	deadline := rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout)) == nil
	var in io.Reader = r.Body
	if r.ContentLength <= 0 {
		// Undeclared: cut at the limit. A declared length, within it, is where net/http ends
		// the body, and readBody stops past the limit all the same.
		in = http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
	}
	body, err := readBody(in, r.ContentLength, s.opts.MaxBodyBytes)
	if err != nil {
		w.Header().Set("Connection", "close")
		_ = rc.SetReadDeadline(time.Now())
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			return nil, tooLarge(tooBig.Limit)
		case isTimeout(err):
			return nil, &APIError{Status: http.StatusRequestTimeout, Type: "invalid_request_error", Code: "request_timeout",
				Message: fmt.Sprintf("request body not received within %s", s.opts.BodyTimeout)}
		}
		return nil, badRequest("", "reading request body: %v", err)
	}
	if deadline && (r.ProtoMajor != 1 || r.ContentLength == 0) {
		// Cleared once the body is in: the connection's later reads (the next request, the
		// close watch during a stream) are not bounded by it. An HTTP/1 server clears it
		// itself when a body that was there to read reaches its end (net/http's background
		// read, which begins there), so only a request without one is left to clear.
		_ = rc.SetReadDeadline(time.Time{})
	}
	return body, nil
}

// readBody reads r to its end. With a declared length (the limit is checked before), its buffer
// grows fourfold at a step as bytes arrive, up to that length and no further: fewer and smaller
// copies than io.ReadAll's growth (about 1.5 times the body allocated, against up to 3), while
// a client that declares much and sends little holds little; more than limit bytes is an
// *http.MaxBytesError.
func readBody(r io.Reader, declared, limit int64) ([]byte, error) {
	if declared <= 0 {
		return io.ReadAll(r)
	}
	buf := make([]byte, 0, min(declared+1, 64<<10))
	for {
		if len(buf) == cap(buf) {
			next := make([]byte, len(buf), max(min(int64(cap(buf))*4, declared+1), int64(cap(buf))+bytes.MinRead))
			copy(next, buf)
			buf = next
		}
		n, err := r.Read(buf[len(buf):min(int64(cap(buf)), limit+1)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return buf, &http.MaxBytesError{Limit: limit}
		}
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// cacheControl reads the request's Cache-Control: no-cache skips lookups, no-store forbids storing.
func cacheControl(r *http.Request) (noCache, noStore bool) {
	for _, v := range r.Header.Values("Cache-Control") {
		for d := range strings.SplitSeq(v, ",") {
			switch strings.ToLower(strings.TrimSpace(d)) {
			case "no-cache":
				noCache = true
			case "no-store":
				noStore = true
			}
		}
	}
	return noCache, noStore
}

// operation is the GenAI operation of a chat-like dialect's path: legacy completions are text
// completions, every other dialect is a chat.
func operation(path string) genai.Operation {
	if path == "/v1/completions" {
		return genai.TextCompletion
	}
	return genai.Chat
}
