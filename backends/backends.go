// Package backends implements cascade.Backend for Ollama, OpenAI-compatible and llama.cpp upstreams.
package backends

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	jsonv1 "github.com/go-json-experiment/json/v1"
	openai "github.com/sashabaranov/go-openai"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// Options configure one backend. Name, Type and URL are required.
type Options struct {
	// Name identifies the backend in errors, answers and logs.
	Name string
	// Type picks the dialect: "ollama", "openai" or "llamacpp".
	Type string
	// URL is Ollama's root (http://127.0.0.1:11434), or for openai and llamacpp the base URL as
	// the OpenAI SDKs take it, /v1 included (https://api.openai.com/v1).
	URL string
	// APIKey, when set, is sent as "Authorization: Bearer <key>".
	APIKey string
	// Timeout bounds each silence of the upstream: the wait for the reply's first byte and
	// every gap between two reads of its body, never a reply that keeps flowing; 0 means no
	// limit beyond the caller's context.
	Timeout time.Duration
	// MaxDuration, when positive, bounds one whole upstream call, stream included.
	MaxDuration time.Duration
	// Client replaces the backend's own tuned client (tests, custom TLS).
	Client *http.Client
}

// Factory builds a backend from its options.
type Factory func(Options) (cascade.Backend, error)

var factories = map[string]Factory{}

// register adds a backend type; a duplicate type panics.
func register(typ string, f Factory) {
	if _, dup := factories[typ]; dup {
		panic("backends: type " + typ + " registered twice")
	}
	factories[typ] = f
}

// New builds the backend of o.Type.
func New(o Options) (cascade.Backend, error) {
	f, ok := factories[o.Type]
	if !ok {
		return nil, fmt.Errorf("backend %s: unknown type %q (want one of %s)", o.Name, o.Type, strings.Join(Types(), ", "))
	}
	return f(o)
}

// Types lists the registered backend types, sorted.
func Types() []string {
	ts := make([]string, 0, len(factories))
	for t := range factories {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	return ts
}

// Size limits on what an upstream sends.
const (
	maxBody     = 64 << 20 // a whole answer
	maxLine     = 16 << 20 // one stream line or event
	maxErrBody  = 64 << 10 // an error body, of which the message is kept
	maxErrText  = 512      // a non-JSON error body kept as the message
	readBufSize = 32 << 10 // the stream reader's buffer
)

// base is what every dialect shares: name, URL, API key, timeout and the HTTP client.
type base struct {
	name    string
	url     string   // without a trailing slash
	auth    []string // the Authorization header value, nil without an API key
	apiKey  string
	timeout time.Duration
	maxDur  time.Duration
	overrun error // why a call that outlived maxDur was cut: one value for every call
	client  *http.Client
	// own says client is the backend's own, with no cookie jar: it only reads a request's headers
	// (it copies them before it adds a URL's user), so its calls share their endpoint's.
	own bool
}

func newBase(o Options) (base, error) {
	if o.Name == "" {
		return base{}, errors.New("backend: a name is required")
	}
	u, err := url.Parse(o.URL)
	if err != nil {
		return base{}, fmt.Errorf("backend %s: url: %w", o.Name, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return base{}, fmt.Errorf("backend %s: url %q: want http(s)://host[:port][/path]", o.Name, u.Redacted())
	}
	if o.Timeout < 0 || o.MaxDuration < 0 {
		return base{}, fmt.Errorf("backend %s: negative timeout %v or max duration %v", o.Name, o.Timeout, o.MaxDuration)
	}
	b := base{name: o.Name, url: strings.TrimRight(o.URL, "/"), apiKey: o.APIKey, timeout: o.Timeout, maxDur: o.MaxDuration, client: o.Client,
		overrun: &timeoutError{what: "the call did not end", d: o.MaxDuration}}
	if o.APIKey != "" {
		b.auth = []string{"Bearer " + o.APIKey}
	}
	if b.client == nil {
		b.client, b.own = &http.Client{Transport: newInlineTransport(newTransport())}, true
	}
	return b, nil
}

// endpoint is one upstream URL with its method, parsed once, and the headers of every call to
// it: a call's request is a copy of tmpl with the call's context and body.
type endpoint struct {
	url    string        // as configured, for errors
	tmpl   *http.Request // nil when the URL did not make a request (err)
	err    error
	header [2]http.Header // a whole answer's, a stream's; shared by calls, never written
}

// endpoint makes the endpoint of method at u; stream is the Accept of a streamed answer (nil:
// the endpoint never streams). A URL that does not make a request fails each call, as before.
func (b *base) endpoint(method, u string, stream []string) endpoint {
	ep := endpoint{url: u}
	ep.tmpl, ep.err = http.NewRequest(method, u, nil)
	for i, accept := range [2][]string{hdrJSON, stream} {
		if accept == nil {
			continue
		}
		h := http.Header{"Accept": accept, "User-Agent": hdrUA}
		if method != http.MethodGet {
			h["Content-Type"] = hdrJSON
		}
		if b.auth != nil {
			h["Authorization"] = b.auth
		}
		ep.header[i] = h
	}
	return ep
}

// newTransport is the stock transport a backend's own client keeps for what inlineTransport
// does not send itself (https, a proxy, a large body), and whose pool bounds inlineTransport's:
// keep-alive with a deep idle pool, since a proxy in front of a local model sends many
// concurrent calls to one host; no transparent gzip, which would only add work on loopback and
// delay stream chunks; an answer's headers bounded at 1 MiB.
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:     true, // for https upstreams; loopback http stays HTTP/1.1
		MaxIdleConns:          0,    // no global limit
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		WriteBufferSize:       16 << 10,
		ReadBufferSize:        16 << 10,
		// An answer's status line and headers: a model server's take a few hundred bytes; the
		// stock default is 10 MiB a connection.
		MaxResponseHeaderBytes: 1 << 20,
	}
}

// Name is the backend's name.
func (b *base) Name() string { return b.name }

// CloseIdleConnections closes the backend's idle upstream connections.
func (b *base) CloseIdleConnections() { b.client.CloseIdleConnections() }

// attempt bounds one upstream call: by the backend's max duration as a whole, and by its
// timeout for each silence of the upstream. One timer serves both: it is armed now for the wait
// on the reply's headers, and do hands the call to the reply's body, whose reads mark each wait.
// Stop the call when it is over.
func (b *base) attempt(ctx context.Context) (context.Context, *call) {
	c := &call{d: b.timeout, overrun: b.overrun}
	ctx, c.cancel = context.WithCancelCause(ctx)
	if b.maxDur <= 0 && b.timeout <= 0 {
		return ctx, c
	}
	c.start = time.Now()
	c.end = b.maxDur
	c.waiting = b.timeout > 0
	c.armed = b.timeout
	if c.armed <= 0 || (b.maxDur > 0 && b.maxDur < c.armed) {
		c.armed = b.maxDur
	}
	c.t = time.AfterFunc(c.armed, c.fire)
	return ctx, c
}

// call is one upstream call's bounds: a silence timeout d (0: none) and an end (0: none), kept
// by one timer that cancels the call's context with the bound it broke as the cause. The
// silence is timed while the call waits on the upstream, not while the caller handles what it
// read (a slow client is not the upstream's silence).
//
// A wait does not move the timer when it is armed as soon as the wait's bound or sooner: it
// fires then, finds the bound not reached, and re-arms for it. So a whole answer arms and stops
// the timer once, and a stream moves it only after a silence of the client's; every move of a
// timer may wake a thread of the runtime's.
type call struct {
	cancel  context.CancelCauseFunc
	t       *time.Timer // nil without bounds
	d       time.Duration
	start   time.Time     // on the monotonic clock; the times below are since start
	end     time.Duration // 0: none
	overrun error

	mu      sync.Mutex
	waiting bool          // on the upstream, since wait
	wait    time.Duration //
	armed   time.Duration // when t fires; 0: not armed
	done    bool          // stopped

	req  bytes.Reader // the request's body
	body watchedBody
}

// fire cuts the call past its end for overrunning it, or past the bound of the wait in progress
// for the upstream's silence; else it re-arms the timer.
func (c *call) fire() {
	now := time.Since(c.start)
	var cause error
	c.mu.Lock()
	c.armed = 0
	switch {
	case c.done:
	case c.end > 0 && now >= c.end:
		cause = c.overrun
	case c.waiting && now-c.wait >= c.d:
		cause = &timeoutError{what: "the upstream sent nothing", d: c.d}
	default:
		c.arm(now)
	}
	c.mu.Unlock()
	if cause != nil {
		c.cancel(cause)
	}
}

// arm sets the timer for the sooner of the call's end and the bound of the wait in progress;
// c.mu is held.
func (c *call) arm(now time.Duration) {
	next := c.end
	if c.waiting && (next == 0 || c.wait+c.d < next) {
		next = c.wait + c.d
	}
	if next == 0 || c.done {
		return
	}
	c.armed = next
	c.t.Reset(next - now)
}

// watch marks a wait on the upstream, and arms the timer for its bound unless it fires as soon.
func (c *call) watch() {
	now := time.Since(c.start)
	c.mu.Lock()
	c.waiting, c.wait = true, now
	if c.armed == 0 || c.armed > now+c.d {
		c.arm(now)
	}
	c.mu.Unlock()
}

// unwatch ends a wait, once the upstream sent something; the timer, when it fires, re-arms for
// the call's end alone.
func (c *call) unwatch() {
	c.mu.Lock()
	c.waiting = false
	c.mu.Unlock()
}

// stop ends the call: its timer and its context. A stream stops it early when its client went
// away or the reply broke a bound, to stop the upstream at once.
func (c *call) stop() {
	if c.t != nil {
		c.mu.Lock()
		c.done = true
		c.t.Stop()
		c.mu.Unlock()
	}
	c.cancel(nil)
}

// timeoutError is why a call was cut by its own bounds. It is a timeout (net.Error) and wraps
// context.DeadlineExceeded, so the edge answers 504 and the neural stage tries the next backend.
type timeoutError struct {
	what string
	d    time.Duration
}

func (e *timeoutError) Error() string   { return fmt.Sprintf("%s within %v", e.what, e.d) }
func (e *timeoutError) Unwrap() error   { return context.DeadlineExceeded }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return false }

// watchedBody times the upstream's silence at each read of the reply's body.
type watchedBody struct {
	io.ReadCloser
	c *call
}

func (wb *watchedBody) Read(p []byte) (int, error) {
	wb.c.watch()
	n, err := wb.ReadCloser.Read(p)
	if n > 0 || err != nil {
		wb.c.unwatch()
	}
	return n, err
}

var (
	hdrJSON   = []string{"application/json"}
	hdrSSE    = []string{"text/event-stream"}
	hdrNDJSON = []string{"application/x-ndjson"}
	hdrUA     = []string{"eoc-proxy"}
)

// do sends one request to ep (body nil: none; stream picks the Accept of a stream) and hands the
// reply's body to the call c, which times its silences. A transport failure comes back as a
// *cascade.BackendError and a non-2xx reply as a *cascade.UpstreamError, with the body closed;
// otherwise the caller closes it.
func (b *base) do(ctx context.Context, c *call, ep *endpoint, body []byte, stream bool) (*http.Response, error) {
	if ep.err != nil {
		return nil, &cascade.BackendError{Backend: b.name, Err: ep.err}
	}
	resp, err := b.client.Do(b.request(ctx, c, ep, body, stream))
	if err != nil {
		return nil, b.transportError(ctx, err)
	}
	if c.d > 0 {
		c.body = watchedBody{ReadCloser: resp.Body, c: c}
		resp.Body = &c.body
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer func() { _ = resp.Body.Close() }()
		return nil, b.upstreamError(resp)
	}
	return resp, nil
}

// request is the call's request to ep: a copy of its template with ctx, body (nil: none) in c,
// and the headers of a whole answer or a stream.
func (b *base) request(ctx context.Context, c *call, ep *endpoint, body []byte, stream bool) *http.Request {
	req := ep.tmpl.WithContext(ctx)
	if len(body) > 0 {
		// A body of bytes, as http.NewRequest makes it: the transport sends a bytes.Reader's in
		// the headers' write (another reader's after them, in a write of its own), and rewinds it
		// with GetBody to send the request again on another connection.
		c.req.Reset(body)
		req.Body, req.ContentLength = io.NopCloser(&c.req), int64(len(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	h := ep.header[0]
	if stream && ep.header[1] != nil { // an endpoint that never streams has a whole answer's only
		h = ep.header[1]
	}
	if !b.own {
		// A given client's cookie jar or transport may write to the headers or the URL, which
		// the template's copies share.
		h = h.Clone()
		u := *req.URL
		req.URL = &u
	}
	req.Header = withTrace(ctx, h)
	return req
}

// getJSON GETs ep and decodes the reply into v.
func (b *base) getJSON(ctx context.Context, ep *endpoint, v any) error {
	return b.callJSON(ctx, ep, nil, v)
}

// callJSON sends body (nil: none) to ep and decodes the whole reply into v (nil: read and
// dropped), with the backend's timeout, auth and error mapping.
func (b *base) callJSON(ctx context.Context, ep *endpoint, body []byte, v any) error {
	ctx, c := b.attempt(ctx)
	defer c.stop()
	resp, err := b.do(ctx, c, ep, body, false)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	buf, err := readBody(resp.Body, resp.ContentLength)
	defer putBuf(buf)
	if err != nil {
		return b.transportError(ctx, fmt.Errorf("reading %s: %w", ep.url, err))
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(buf.Bytes(), v); err != nil {
		return &cascade.BackendError{Backend: b.name, Err: fmt.Errorf("decoding %s: %w", ep.url, err)}
	}
	return nil
}

// transportError wraps a failure to talk to the upstream. When the call's context is done, its
// error is kept in the chain, so errors.Is finds context.Canceled or DeadlineExceeded even where
// the transport reported something vaguer.
//
// A call cut by a deadline (its own bounds, or the caller's) keeps only the deadline in the
// chain: the transport's context.Canceled would read as a client that went away.
func (b *base) transportError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		switch cause := context.Cause(ctx); {
		case errors.Is(cause, context.DeadlineExceeded):
			err = fmt.Errorf("%w: %v", cause, err) //nolint:errorlint // the transport's context.Canceled must leave the chain
		case !errors.Is(err, cause):
			err = fmt.Errorf("%w: %w", cause, err)
		}
	}
	return &cascade.BackendError{Backend: b.name, Err: err}
}

// upstreamError turns a non-2xx reply into an UpstreamError carrying the upstream's own message.
func (b *base) upstreamError(resp *http.Response) *cascade.UpstreamError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrBody))
	e := &cascade.UpstreamError{Backend: b.name, Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now())}
	parseErrorBody(body, e)
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	e.Message = b.redact(e.Message)
	return e
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date; 0 when absent or bad.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		if n < 0 {
			return 0
		}
		return time.Duration(min(n, 86400)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// midStreamError is an error the upstream reported inside a 200 stream.
func (b *base) midStreamError(data []byte) *cascade.UpstreamError {
	e := &cascade.UpstreamError{Backend: b.name, Status: http.StatusBadGateway}
	parseErrorBody(data, e)
	if e.Message == "" {
		e.Message = "upstream reported an error mid-stream"
	}
	e.Message = b.redact(e.Message)
	return e
}

// redact removes the backend's own API key from text that goes to a client.
func (b *base) redact(s string) string {
	if b.apiKey != "" && strings.Contains(s, b.apiKey) {
		s = strings.ReplaceAll(s, b.apiKey, "[redacted]")
	}
	return s
}

// errorEnvelope covers the error bodies upstreams send: OpenAI's and llama.cpp's
// {"error":{...}}, Ollama's {"error":"..."}, vLLM's top-level message and FastAPI's detail.
type errorEnvelope struct {
	Error   json.RawMessage `json:"error"`
	Message json.RawMessage `json:"message"`
	Detail  json.RawMessage `json:"detail"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
	Param   json.RawMessage `json:"param"`
}

func parseErrorBody(body []byte, e *cascade.UpstreamError) {
	body = bytes.TrimSpace(body)
	var env errorEnvelope
	if len(body) == 0 || body[0] != '{' || json.Unmarshal(body, &env) != nil {
		e.Message = textMessage(body)
		return
	}
	switch {
	case len(env.Error) > 0 && env.Error[0] == '{':
		var ae openai.APIError
		if json.Unmarshal(env.Error, &ae) == nil {
			e.Message, e.Type = ae.Message, ae.Type
			e.Code = codeString(ae.Code)
			if ae.Param != nil {
				e.Param = *ae.Param
			}
			return
		}
	case len(env.Error) > 0 && env.Error[0] == '"':
		_ = json.Unmarshal(env.Error, &e.Message)
		return
	}
	e.Message = rawText(env.Message)
	if e.Message == "" {
		e.Message = rawText(env.Detail)
	}
	e.Type = env.Type
	var code any
	if json.Unmarshal(env.Code, &code) == nil {
		e.Code = codeString(code)
	}
	e.Param = rawText(env.Param)
	if e.Message == "" && len(env.Error) > 0 {
		e.Message = textMessage(env.Error)
	}
}

// rawText is a JSON string's value, or the compact JSON of anything else but null.
func rawText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return textMessage(raw)
}

func codeString(c any) string {
	switch v := c.(type) {
	case nil:
		return ""
	case string:
		return v
	case int:
		return strconv.Itoa(v)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return fmt.Sprint(c)
}

// textMessage keeps a short, printable prefix of a non-JSON error body.
func textMessage(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > maxErrText {
		b = b[:maxErrText]
		for len(b) > 0 && !utf8.Valid(b) {
			b = b[:len(b)-1]
		}
	}
	if !utf8.Valid(b) {
		return ""
	}
	return string(b)
}

// bufPool holds the buffers whole answers are read into.
var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// readBody reads a whole reply (up to maxBody) into a pooled buffer; give it back with putBuf.
// A reply of known length (size, -1 when unknown) is read into room made for it at once;
// net/http's body of a known length ends there, so it needs no limit of its own.
func readBody(r io.Reader, size int64) (*bytes.Buffer, error) {
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	if size > maxBody {
		return buf, fmt.Errorf("reply larger than %d bytes", maxBody)
	}
	if size < 0 {
		r = io.LimitReader(r, maxBody+1)
	} else {
		buf.Grow(int(size) + bytes.MinRead) // ReadFrom wants MinRead spare bytes to read into
	}
	n, err := buf.ReadFrom(r)
	if err == nil && n > maxBody {
		err = fmt.Errorf("reply larger than %d bytes", maxBody)
	}
	return buf, err
}

func putBuf(buf *bytes.Buffer) {
	if buf.Cap() <= 1<<20 {
		bufPool.Put(buf)
	}
}

// drainWait bounds the wait for the end of a reply after its last event.
const drainWait = 100 * time.Millisecond

// drain reads what is left of a finished stream (normally nothing but the end of the chunked
// encoding), so the connection goes back to the idle pool instead of being closed. An upstream
// that keeps the reply open after its last event is cut off by cancel after drainWait.
func drain(r io.Reader, cancel context.CancelFunc) {
	t := time.AfterFunc(drainWait, cancel)
	_, _ = io.CopyN(io.Discard, r, 4<<10)
	t.Stop()
}

// idEncoding spells ids in rand.Text's alphabet.
var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// decodeAnswer decodes an upstream's answer, or one line or event of its stream, into v with
// encoding/json's semantics, by go-json-experiment's v1 package: its pooled decoder allocates a
// fraction of what encoding/json does (BenchmarkOllamaDecode).
// FuzzDecodeAnswer holds the two equal.
func decodeAnswer(data []byte, v any) error {
	return jsonv1.Unmarshal(data, v)
}

// newID returns prefix followed by 24 random characters, in one allocation (the string).
func newID(prefix string) string {
	var b [15]byte // 120 bits: 24 characters of 5 bits
	_, _ = rand.Read(b[:])
	var buf [48]byte
	return string(idEncoding.AppendEncode(append(buf[:0], prefix...), b[:]))
}

// complete reports whether every choice of ans has a finish reason.
func complete(ans *cascade.Answer) bool {
	if len(ans.Choices) == 0 {
		return false
	}
	for _, c := range ans.Choices {
		if c.FinishReason == "" {
			return false
		}
	}
	return true
}
