package proxy

import (
	"github.com/eoc-proxy/eoc-proxy/energy"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/internal/jsonx"
)

// The X-EOC headers (X-EOC-Joules, …), spelled in Go's canonical form so setting them allocates
// no canonical copy; header names are case-insensitive. On a stream they are HTTP trailers.
const (
	HeaderJoules      = "X-Eoc-Joules"
	HeaderStage       = "X-Eoc-Stage"
	HeaderEnergy      = "X-Eoc-Energy"
	HeaderReason      = "X-Eoc-Energy-Reason"
	HeaderMethod      = "X-Eoc-Energy-Method"
	HeaderCoverage    = "X-Eoc-Coverage"
	HeaderReceipt     = "X-Eoc-Receipt"
	HeaderJoulesSaved = "X-Eoc-Joules-Saved"
	// HeaderBudgetRemaining is the caller's joule budget left, on every response of a key with one.
	HeaderBudgetRemaining = "X-Eoc-Budget-Remaining"
	// HeaderBudgetCoverage goes with HeaderBudgetRemaining: "partial" when some of the period's
	// spend came from partial figures (the remaining joules are then an upper bound), else "whole".
	HeaderBudgetCoverage = "X-Eoc-Budget-Coverage"
	// HeaderBackend names the backend that answered (or failed last), HeaderAttempts the number
	// of backend attempts the call made; on a stream both go out with the first chunk.
	HeaderBackend  = "X-Eoc-Backend"
	HeaderAttempts = "X-Eoc-Attempts"
)

var trailerNames = strings.Join([]string{HeaderJoules, HeaderStage, HeaderEnergy, HeaderReason, HeaderMethod, HeaderCoverage,
	HeaderReceipt, HeaderJoulesSaved, HeaderBudgetRemaining, HeaderBudgetCoverage, boundsTrailerNames}, ", ")

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	lf := fields(r.Context())
	req, apiErr := s.decode(w, r, lf.tenant)
	if apiErr != nil {
		s.refuse(w, lf, apiErr)
		return
	}
	// The request timeout bounds the wait for an answer, admission included: a stream that has
	// begun is bounded by the backend's own timeouts instead, which cut it only when it stops
	// flowing.
	ctx := withRequestTimeout(r.Context(), s.opts.RequestTimeout)
	defer ctx.end()
	resv, ok := s.admit(ctx, w, lf, req.Chat.Model)
	if !ok {
		return
	}
	s.metrics.callIn()
	defer s.metrics.callOut()
	var res cascade.Result
	var sw *sseWriter
	var sink cascade.StageSink
	if req.Stream() {
		sw = &sseWriter{w: w, rc: http.NewResponseController(w), usage: req.IncludeUsage(), idle: s.opts.StreamIdle, onStart: ctx.stop}
		s.setBudgetHeader(w.Header(), req.Tenant)
		sink = sw
	}
	err := s.guard(req.ID, func() error { return s.cascade.Walk(ctx, req, &res, sink) })
	st := settlement{id: req.ID, tenant: req.Tenant, key: req.Key(), model: req.Chat.Model,
		stage: res.Stage, attempts: res.Attempts, wrote: res.Wrote, span: trace.SpanFromContext(ctx), settle: res.Settle}
	if res.Answer != nil {
		st.answered, st.fig, st.backend = true, res.Answer.Energy, res.Answer.Backend
		st.backendAttempts = res.Answer.Attempts
		if u := res.Answer.Usage; u != nil {
			st.tokens, st.promptTokens = u.CompletionTokens, u.PromptTokens
			if res.Answer.Backend != "" { // a backend's tokens, not a cache hit's
				s.limits.addTokens(req.Tenant, u.CompletionTokens)
			}
		}
	}
	o := s.settle(st, resv, err, start, lf)
	if sw == nil || !sw.started {
		setBackendHeaders(w.Header(), st.backend, st.backendAttempts)
	}
	switch {
	case sw != nil && (sw.started || err == nil):
		s.finishStream(w, sw, &res, o, err)
	case err != nil:
		// The walk ran: what it spent, and its receipt, go on the error response too.
		setEnergyHeaders(w.Header(), o)
		writeError(w, o.apiErr)
	default:
		s.writeAnswer(w, res.Answer, o)
	}
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

// refuse answers a request that did not decode.
func (s *Server) refuse(w http.ResponseWriter, lf *logFields, apiErr *APIError) {
	lf.err = apiErr
	s.setBudgetHeader(w.Header(), lf.tenant)
	writeError(w, apiErr)
}

// admit names the model of a decoded call for the access log and reserves its key's budget,
// waiting at most as long as ctx; when the budget refuses, it writes the answer and returns
// false.
func (s *Server) admit(ctx context.Context, w http.ResponseWriter, lf *logFields, model string) (reservation, bool) {
	lf.model = model
	if apiErr := s.limits.take(ctx, lf.tenant); apiErr != nil {
		// No budget header: a refusal by rate limit must not cost a shared-budget round trip.
		s.fail(w, model, apiErr, lf)
		return reservation{}, false
	}
	resv, err := s.budgets.admit(ctx, lf.tenant)
	if err != nil {
		if errors.Is(context.Cause(ctx), errRequestTimeout) {
			err = &APIError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "budget_wait_timeout",
				Message: "timed out waiting for this key's first call to be priced against its budget", Err: err}
		}
		s.setBudgetHeader(w.Header(), lf.tenant)
		s.fail(w, model, err, lf)
		return resv, false
	}
	return resv, true
}

// setBackendHeaders names the backend that answered and the number of attempts, when a
// backend was called.
func setBackendHeaders(h http.Header, backend string, attempts []cascade.BackendAttempt) {
	if len(attempts) == 0 {
		return
	}
	h.Set(HeaderBackend, backend)
	h.Set(HeaderAttempts, strconv.Itoa(len(attempts)))
}

func (s *Server) writeAnswer(w http.ResponseWriter, ans *cascade.Answer, o outcome) {
	body, err := json.Marshal(completion{Object: "chat.completion", Answer: ans})
	if err != nil {
		writeError(w, classify(err, ""))
		return
	}
	writeOK(w, o, body)
}

// completion is the non-streaming response body.
type completion struct {
	Object string `json:"object"`
	*cascade.Answer
}

// outcome is what one call cost, the receipt that vouches for it, and how it ended.
type outcome struct {
	stage   string
	fig     energy.Figure
	receipt string
	// receiptTime is the receipt's Time (X-EOC-Receipt-Time).
	receiptTime time.Time
	remaining   *float64 // budget left, for keys with a budget
	apiErr      *APIError

	// budgetCoverage is the coverage of the key's spend this period, with remaining.
	budgetCoverage string
}

// settlement is what settle needs to know about one call that reached the cascade, a chat
// completion or an embeddings call.
type settlement struct {
	id, tenant, key, model string
	stage                  string
	attempts               []cascade.Attempt
	answered               bool // a figure came back, with or without an error
	fig                    energy.Figure
	backend                string
	backendAttempts        []cascade.BackendAttempt
	wrote                  bool // bytes went out before an error
	tokens                 int  // the answer's completion tokens, for the page's J per token
	promptTokens           int
	span                   trace.Span         // the call's span: a no-op one when untraced
	settle                 cascade.SettleFunc // how to get fig's final figure; nil when it is final
}

// settle runs once per call that reached the cascade, success or not: it computes the receipt,
// books the cost against the budget, writes the ledger record and the metrics, and fills the
// access log's fields. When the figure is provisional and can settle, the response does not wait
// for it: the call's record is written now, with the figure the client gets, and the budget,
// the metrics and the page take the settled figure when it comes (settleLater).
func (s *Server) settle(st settlement, resv reservation, err error, start time.Time, lf *logFields) outcome {
	o := outcome{stage: st.stage}
	status := http.StatusOK
	gone := disconnected(err, st.wrote)
	if err != nil {
		o.apiErr = classify(err, st.model)
		if gone {
			// A write to a client that left (a broken pipe, seen before the request's context
			// is cancelled) is the client's doing, not an internal error: 499 either way.
			o.apiErr = clientClosed(err)
		}
		status = o.apiErr.Status
		lf.err = o.apiErr
	}
	if st.answered {
		o.fig = st.fig
		lf.backend = st.backend
	}
	o.fig = o.fig.Rounded() // the header, receipt, ledger and metrics carry the same figure
	now := time.Now()
	o.receipt = energy.Receipt{Key: st.key, Stage: o.stage, Model: st.model, Joules: o.fig.Joules,
		Grade: o.fig.Grade, Time: now}.Hash()
	o.receiptTime = now
	later := st.settle != nil && o.fig.Provisional
	var left budgetLeft
	var ok bool
	var held heldCost
	if later {
		// The budget takes the figure's High now, which holds the settled figure, and the
		// reservation ends with the response; the settlement books the difference (adjust).
		left, held, ok = s.budgets.settleHigh(resv, o.fig)
	} else {
		left, ok = s.budgets.settle(resv, o.fig)
	}
	if ok {
		joules := left.joules // allocated only for a key with a budget
		o.remaining, o.budgetCoverage = &joules, left.coverage()
	}
	model := st.model
	if errors.Is(err, cascade.ErrModelNotFound) {
		model = "" // not a model any backend serves: keep it out of metric labels
	}
	call := Call{Time: now, RequestID: st.id, KeyID: st.tenant, Key: st.key, Model: st.model, Stage: o.stage,
		Backend: lf.backend, Status: status, Energy: o.fig, Receipt: o.receipt, Attempts: st.backendAttempts,
		Disconnected: gone}
	recorded := false
	if s.opts.Record != nil {
		if rerr := s.opts.Record(call); rerr != nil {
			s.log.Error().Err(rerr).Str("request_id", st.id).Msg("ledger: record not written")
		} else {
			recorded = true
		}
	}
	if later {
		endCall(st.span, &st, o, status)
		s.settleLater(st, held, o, call, recorded, model, status, time.Since(start))
	} else {
		s.calls.put(st.tenant, st.id, o, nil)
		s.metrics.observe(st.stage, st.attempts, st.answered, o.fig, model, status, time.Since(start))
		s.observe(&st, o, model, status, now)
	}
	if n := len(st.attempts); n > 0 {
		lf.upstream = st.attempts[n-1].Duration
	}
	lf.stage, lf.joules, lf.grade, lf.method, lf.saved = o.stage, o.fig.Joules, string(o.fig.Grade), o.fig.Method, o.fig.Saved
	lf.provisional = o.fig.Provisional
	return o
}

// disconnected tells a client that went away from the other ways a call can fail: a cancelled
// context, or a write that failed after bytes went out. An upstream that failed mid-stream (a
// backend or upstream error) and a timeout are not the client's doing.
func disconnected(err error, wrote bool) bool {
	if errors.Is(err, context.Canceled) {
		return true
	}
	if err == nil || !wrote || isTimeout(err) {
		return false
	}
	var be *cascade.BackendError
	var up *cascade.UpstreamError
	return !errors.As(err, &be) && !errors.As(err, &up)
}

func (s *Server) fail(w http.ResponseWriter, model string, err error, lf *logFields) {
	e := classify(err, model)
	lf.err = e
	writeError(w, e)
}

func (s *Server) setBudgetHeader(h http.Header, tenant string) {
	if left, ok := s.budgets.remaining(tenant); ok {
		h.Set(HeaderBudgetRemaining, formatJoules(left.joules))
		h.Set(HeaderBudgetCoverage, left.coverage())
	}
}

func formatJoules(j float64) string { return strconv.FormatFloat(j, 'f', -1, 64) }

// headerVals sets headers by canonical names (constants), straight into the map, their values
// sharing one backing array: one allocation where Header.Set makes one per header and
// canonicalizes each name.
type headerVals struct {
	h    http.Header
	vals []string
}

func (hv *headerVals) set(k, v string) {
	hv.vals = append(hv.vals, v)
	n := len(hv.vals)
	hv.h[k] = hv.vals[n-1 : n : n]
}

// energy sets the X-EOC headers of o.
func (hv *headerVals) energy(o outcome) {
	hv.set(HeaderJoules, formatJoules(o.fig.Joules))
	hv.set(HeaderStage, o.stage)
	hv.set(HeaderEnergy, string(o.fig.Grade))
	hv.set(HeaderMethod, o.fig.Method)
	hv.set(HeaderCoverage, o.fig.Coverage)
	hv.set(HeaderReceipt, o.receipt)
	if o.fig.Reason != "" {
		hv.set(HeaderReason, o.fig.Reason)
	}
	if o.fig.Saved > 0 {
		hv.set(HeaderJoulesSaved, formatJoules(o.fig.Saved))
	}
	if o.remaining != nil {
		hv.set(HeaderBudgetRemaining, formatJoules(*o.remaining))
		hv.set(HeaderBudgetCoverage, o.budgetCoverage)
	}
	setBoundsHeaders(hv.set, o)
}

// energyHeaders is the most X-EOC headers one outcome sets.
const energyHeaders = 15

// setEnergyHeaders sets the X-EOC headers of o.
func setEnergyHeaders(h http.Header, o outcome) {
	hv := headerVals{h: h, vals: make([]string, 0, energyHeaders)}
	hv.energy(o)
}

// writeOK writes a JSON answer with o's X-EOC headers.
func writeOK(w http.ResponseWriter, o outcome, body []byte) {
	hv := headerVals{h: w.Header(), vals: make([]string, 0, energyHeaders+2)}
	hv.energy(o)
	hv.set("Content-Type", "application/json")
	hv.set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

var validRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true, "function": true}

// decode reads and validates the body of tenant's call, or takes what it made of the same bytes
// before (decodedChats); every failure names the field.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, tenant string) (*cascade.Request, *APIError) {
	body, e := s.readJSON(w, r)
	if e != nil {
		return nil, e
	}
	req := &cascade.Request{Tenant: tenant, Raw: body, ID: RequestID(r.Context())}
	known, h := s.decoded.get(tenant, body)
	if known != nil {
		req.Chat = *known
	} else {
		if e := scanBody(body, scanChat); e != nil {
			return nil, e
		}
		if e := unmarshal(body, &req.Chat); e != nil {
			return nil, e
		}
		if e := validate(&req.Chat); e != nil {
			return nil, e
		}
		if e := validateThink(body); e != nil {
			return nil, e
		}
		s.decoded.put(h, tenant, body, &req.Chat)
	}
	req.NoCache, req.NoStore = cacheControl(r)
	return req, nil
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
	body, err := readBody(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes), r.ContentLength)
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
	if deadline {
		// Cleared once the body is in: the connection's later reads (the next request, the
		// close watch during a stream) are not bounded by it.
		_ = rc.SetReadDeadline(time.Time{})
	}
	return body, nil
}

// readBody reads r to its end. With a declared length (the limit is checked before), its buffer
// grows fourfold at a step as bytes arrive, up to that length and no further: fewer and smaller
// copies than io.ReadAll's growth (about 1.5 times the body allocated, against up to 3), while
// a client that declares much and sends little holds little.
func readBody(r io.Reader, declared int64) ([]byte, error) {
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
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// unmarshal decodes a request body into v (internal/jsonx: encoding/json's semantics and errors,
// faster); a failure names the field.
func unmarshal(body []byte, v any) *APIError {
	if err := jsonx.Unmarshal(body, v); err != nil {
		var typeErr *json.UnmarshalTypeError
		var syntaxErr *json.SyntaxError
		switch {
		case errors.As(err, &typeErr) && typeErr.Field != "":
			return badRequest(typeErr.Field, "%s: expected %s, got %s", typeErr.Field, typeErr.Type, typeErr.Value)
		case errors.As(err, &syntaxErr):
			return badRequest("", "malformed JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)
		}
		return badRequest("", "request body must be a JSON object: %v", err)
	}
	return nil
}

// cacheControl reads the request's Cache-Control: no-cache skips lookups, no-store forbids storing.
func cacheControl(r *http.Request) (noCache, noStore bool) {
	for _, v := range r.Header.Values("Cache-Control") {
		for _, d := range strings.Split(v, ",") {
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

// validStop reports whether stop is absent, null, a string, or an array whose every element is
// a string (not a number, not null).
func validStop(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return true
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return raw[0] == '"'
	}
	var many []json.RawMessage
	if json.Unmarshal(raw, &many) != nil {
		return false
	}
	for _, e := range many {
		if len(e) == 0 || e[0] != '"' || json.Unmarshal(e, &one) != nil {
			return false
		}
	}
	return true
}

func validate(c *cascade.ChatRequest) *APIError {
	if c.Model == "" {
		return badRequest("model", "model: required")
	}
	if len(c.Messages) == 0 {
		return badRequest("messages", "messages: at least one message is required")
	}
	for i, m := range c.Messages {
		if !validRoles[m.Role] {
			return badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role: %q is not one of system, developer, user, assistant, tool", i, m.Role)
		}
		// Only an assistant message (one with tool calls) may leave its content out or null it.
		null := len(m.Content) == 0 || string(m.Content) == "null"
		if !null {
			switch m.Content[0] {
			case '"':
			case '[':
				if e := validateParts(m.Content, i); e != nil {
					return e
				}
			default:
				return badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content: must be a string or an array of content parts", i)
			}
		} else if m.Role != "assistant" {
			return badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content: required", i)
		}
		if m.Role == "tool" && m.ToolCallID == "" {
			return badRequest(fmt.Sprintf("messages[%d].tool_call_id", i), "messages[%d].tool_call_id: required for role tool", i)
		}
	}
	switch {
	case c.Temperature != nil && (*c.Temperature < 0 || *c.Temperature > 2):
		return badRequest("temperature", "temperature: %v is not in [0, 2]", *c.Temperature)
	case c.TopP != nil && (*c.TopP < 0 || *c.TopP > 1):
		return badRequest("top_p", "top_p: %v is not in [0, 1]", *c.TopP)
	case c.N != nil && (*c.N < 1 || *c.N > 128):
		return badRequest("n", "n: %d is not in [1, 128]", *c.N)
	case c.MaxTokens != nil && *c.MaxTokens < 1:
		return badRequest("max_tokens", "max_tokens: must be at least 1")
	case c.MaxCompletionTokens != nil && *c.MaxCompletionTokens < 1:
		return badRequest("max_completion_tokens", "max_completion_tokens: must be at least 1")
	case c.StreamOptions != nil && !c.Stream:
		return badRequest("stream_options", "stream_options: only allowed when stream is true")
	}
	if !validStop(c.Stop) {
		return badRequest("stop", "stop: must be a string or an array of strings")
	}
	for i, t := range c.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			return badRequest(fmt.Sprintf("tools[%d]", i), "tools[%d]: type must be function and function.name is required", i)
		}
	}
	return nil
}

// validateParts checks an array content: every part an object whose type is a string, and a
// text part's text a string. Types it does not know pass: a backend that knows them may take
// them.
func validateParts(content json.RawMessage, msg int) *APIError {
	var parts []json.RawMessage
	if json.Unmarshal(content, &parts) != nil {
		return badRequest(fmt.Sprintf("messages[%d].content", msg), "messages[%d].content: must be a string or an array of content parts", msg)
	}
	for j, raw := range parts {
		param := fmt.Sprintf("messages[%d].content[%d]", msg, j)
		var p struct {
			Type *string         `json:"type"`
			Text json.RawMessage `json:"text"`
		}
		if raw[0] != '{' || json.Unmarshal(raw, &p) != nil || p.Type == nil || *p.Type == "" {
			return badRequest(param, "%s: must be a content part, an object with a type", param)
		}
		if *p.Type == "text" && (len(p.Text) == 0 || p.Text[0] != '"') {
			return badRequest(param+".text", "%s.text: must be a string", param)
		}
	}
	return nil
}

// thinkFields are the request's reasoning switches, which the proxy passes on but does not
// otherwise read: Ollama's think and OpenAI's reasoning_effort.
type thinkFields struct {
	Think           json.RawMessage `json:"think"`
	ReasoningEffort json.RawMessage `json:"reasoning_effort"`
}

var (
	thinkKey           = []byte(`"think"`)
	reasoningEffortKey = []byte(`"reasoning_effort"`)
)

// validateThink refuses a think that is not true, false, "low", "medium" or "high" (Ollama's
// values) and a reasoning_effort that is not a string, whichever backend the call goes to: an
// earlier stage (the cache) may answer without a backend ever reading them. Which efforts a
// backend takes is the backend's to say.
func validateThink(body []byte) *APIError {
	if !bytes.Contains(body, thinkKey) && !bytes.Contains(body, reasoningEffortKey) {
		return nil // the names as a client spells them; the backends look for the same
	}
	var f thinkFields
	if jsonx.Unmarshal(body, &f) != nil {
		return nil // decoded before: unreachable
	}
	switch string(bytes.TrimSpace(f.Think)) {
	case "", "null", "true", "false", `"low"`, `"medium"`, `"high"`:
	default:
		return badRequest("think", `think: must be true, false, "low", "medium" or "high"`)
	}
	if e := bytes.TrimSpace(f.ReasoningEffort); len(e) > 0 && e[0] != '"' && string(e) != "null" {
		return badRequest("reasoning_effort", "reasoning_effort: must be a string")
	}
	return nil
}
