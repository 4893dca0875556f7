package backends

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"
)

// inlineTransport is the round tripper of a backend's own client: for a plain-HTTP upstream
// reached without a proxy (a model server on loopback or the LAN), it writes the request and
// reads the answer on the caller's goroutine, over a pool of keep-alive connections, with
// net/http's own request writer (Request.Write) and response reader (ReadResponse). Every other
// request goes to the stock transport, fallback: https, a proxy from the environment, and a body
// over maxInlineBody or of unknown length, since a server that answers before it has read the
// whole body is only heard by a transport that reads while it writes.
//
// What it saves is http.Transport's two goroutines per connection: each call hands its request
// to one (writeLoop) and takes the answer from the other (readLoop), and on a small host each
// handoff wakes a thread on another core, where the call's memory is cold. scripts/bench-ab.sh
// measures it; the commit that added it has the figures.
//
// What the stock transport's idle reader catches (a server that closed a keep-alive connection
// while it sat in the pool), open checks before the connection is used again. A request whose
// write fails on a reused connection is sent again on a new one, as the stock transport does for
// a request it wrote nothing of; one whose answer fails is not, since the server may have acted
// on it.
type inlineTransport struct {
	fallback *http.Transport
	// The rest is the fallback's, so that one transport's settings hold for both.
	dial              func(ctx context.Context, network, addr string) (net.Conn, error)
	readBuf, writeBuf int           // each connection's buffers
	maxIdle           int           // idle connections kept per host
	idleFor           time.Duration // an idle connection older than this is closed instead of used
	maxHead           int64         // the most bytes an answer's status line and headers may take

	mu       sync.Mutex
	idle     map[string][]*inlineConn // by host:port, the most recently used last
	sweeping bool                     // a sweep of the idle connections is due
}

// maxInlineBody is the largest request body sent inline: one that the connection's socket
// buffers take whole, so that its write does not wait on a server that has stopped reading (one
// that answered early); a write that waits all the same ends with the backend's silence timeout.
const maxInlineBody = 64 << 10

// max1xx is how many informational answers may come before the final one, as in the stock
// transport.
const max1xx = 5

// inlineConn is one keep-alive connection to an upstream, with its buffers.
type inlineConn struct {
	c     net.Conn
	addr  string        // the pool's key
	br    *bufio.Reader // onto r
	r     headLimit
	bw    *bufio.Writer // onto w
	w     countingWriter
	since time.Time // when it went idle
}

func (t *inlineTransport) newConn(c net.Conn, addr string) *inlineConn {
	ic := &inlineConn{c: c, addr: addr, r: headLimit{r: c, n: -1}, w: countingWriter{w: c}}
	ic.br = bufio.NewReaderSize(&ic.r, t.readBuf)
	ic.bw = bufio.NewWriterSize(&ic.w, t.writeBuf)
	return ic
}

// headLimit bounds what is read from a connection while an answer's head is read: n bytes
// left, or no bound when n is negative.
type headLimit struct {
	r io.Reader
	n int64
}

var errHeadTooLarge = errors.New("the upstream's answer headers exceed the limit")

func (l *headLimit) Read(p []byte) (int, error) {
	if l.n == 0 {
		return 0, errHeadTooLarge
	}
	if l.n > 0 && int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	if l.n > 0 {
		l.n -= int64(n)
	}
	return n, err
}

// countingWriter counts the bytes written through it: whether any of a request reached the
// connection.
type countingWriter struct {
	w io.Writer
	n int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	w.n += int64(n)
	return n, err
}

func newInlineTransport(fallback *http.Transport) *inlineTransport {
	t := &inlineTransport{
		fallback: fallback,
		dial:     fallback.DialContext,
		readBuf:  fallback.ReadBufferSize,
		writeBuf: fallback.WriteBufferSize,
		maxIdle:  fallback.MaxIdleConnsPerHost,
		idleFor:  fallback.IdleConnTimeout,
		maxHead:  fallback.MaxResponseHeaderBytes,
		idle:     map[string][]*inlineConn{},
	}
	// Where the fallback leaves a setting to net/http, its default.
	if t.dial == nil {
		t.dial = (&net.Dialer{}).DialContext
	}
	if t.readBuf <= 0 {
		t.readBuf = 4 << 10
	}
	if t.writeBuf <= 0 {
		t.writeBuf = 4 << 10
	}
	if t.maxHead <= 0 {
		t.maxHead = 10 << 20
	}
	return t
}

// inline reports whether t serves req itself: plain HTTP, no proxy for its URL, a body of known
// length up to maxInlineBody.
func (t *inlineTransport) inline(req *http.Request) bool {
	if req.URL.Scheme != "http" || req.URL.Host == "" || req.ContentLength > maxInlineBody ||
		(req.ContentLength < 0 || req.ContentLength == 0 && req.Body != nil && req.Body != http.NoBody) {
		return false
	}
	if t.fallback.Proxy != nil {
		if p, err := t.fallback.Proxy(req); err != nil || p != nil {
			return false
		}
	}
	return true
}

// RoundTrip implements http.RoundTripper.
func (t *inlineTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.inline(req) {
		return t.fallback.RoundTrip(req)
	}
	ctx := req.Context()
	addr := hostPort(req)
	ic, reused := t.get(addr), true
	for {
		if ic == nil {
			c, err := t.dial(ctx, "tcp", addr)
			if err != nil {
				if req.Body != nil {
					_ = req.Body.Close() // a round tripper closes the body, also on an error
				}
				return nil, ctxCause(ctx, err)
			}
			ic, reused = t.newConn(c, addr), false
		}
		resp, wrote, err := t.exchange(ctx, ic, req)
		if err == nil {
			return resp, nil
		}
		_ = ic.c.Close()
		if !reused || wrote || ctx.Err() != nil {
			return nil, ctxCause(ctx, err)
		}
		// A reused connection that took none of the request: send it again on a new one.
		if req.Body != nil && req.GetBody != nil {
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, err
			}
			r := *req
			r.Body = body
			req = &r
		} else if req.Body != nil && req.Body != http.NoBody {
			return nil, err
		}
		ic = nil
	}
}

// exchange writes req on ic and reads the answer's head; the body, read by the caller, hands ic
// back to the pool at its end. wrote says the request, or part of it, may have reached the
// server.
func (t *inlineTransport) exchange(ctx context.Context, ic *inlineConn, req *http.Request) (_ *http.Response, wrote bool, _ error) {
	// A cancelled call closes its connection at once, as the stock transport does: the server
	// sees the call end, and a read or write that waits returns.
	stop := context.AfterFunc(ctx, func() { _ = ic.c.Close() })
	ic.w.n = 0
	err := req.Write(ic.bw)
	if err == nil {
		err = ic.bw.Flush()
	}
	if err != nil {
		stop()
		return nil, ic.w.n > 0, err
	}
	ic.r.n = t.maxHead // lifted once the head is read: the body is bounded by its readers
	for n1xx := 0; ; n1xx++ {
		resp, err := http.ReadResponse(ic.br, req)
		if err != nil {
			stop()
			return nil, true, err
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			// An informational answer (103 Early Hints): the final one follows.
			if n1xx == max1xx {
				stop()
				return nil, true, errors.New("the upstream sent too many informational answers")
			}
			continue
		}
		ic.r.n = -1
		resp.Body = &inlineBody{body: resp.Body, t: t, ic: ic, ctx: ctx, stop: stop, keep: !resp.Close && !req.Close}
		return resp, true, nil
	}
}

// inlineBody is an answer's body: at its end its connection goes back to the pool, when the
// answer allows keep-alive and the call was not cancelled; closed early, the connection is
// closed.
type inlineBody struct {
	body io.ReadCloser
	t    *inlineTransport
	ic   *inlineConn
	ctx  context.Context
	stop func() bool
	keep bool
	done bool
}

func (b *inlineBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.body.Read(p)
	switch {
	case errors.Is(err, io.EOF):
		b.finish(true)
	case err != nil:
		b.finish(false)
		err = ctxCause(b.ctx, err)
	}
	return n, err
}

func (b *inlineBody) Close() error {
	if !b.done {
		b.finish(false)
	}
	return nil
}

// finish ends the body: whole says it was read to its end.
func (b *inlineBody) finish(whole bool) {
	b.done = true
	if b.stop() && whole && b.keep {
		_ = b.body.Close() // a read to its end: no network
		b.t.put(b.ic)
		return
	}
	_ = b.ic.c.Close()
}

// get takes addr's most recently used idle connection that is still open, or nil.
func (t *inlineTransport) get(addr string) *inlineConn {
	now := time.Now()
	for {
		t.mu.Lock()
		conns := t.idle[addr]
		if len(conns) == 0 {
			t.mu.Unlock()
			return nil
		}
		ic := conns[len(conns)-1]
		conns[len(conns)-1] = nil
		t.idle[addr] = conns[:len(conns)-1]
		t.mu.Unlock()
		if now.Sub(ic.since) < t.idleFor && ic.br.Buffered() == 0 && open(ic.c) {
			return ic
		}
		_ = ic.c.Close()
	}
}

// put keeps ic for its host's next call, unless the pool is full.
func (t *inlineTransport) put(ic *inlineConn) {
	ic.since = time.Now()
	ic.bw.Reset(&ic.w)
	t.mu.Lock()
	if conns := t.idle[ic.addr]; len(conns) < t.maxIdle {
		t.idle[ic.addr] = append(conns, ic)
		if !t.sweeping {
			t.sweeping = true
			time.AfterFunc(t.idleFor, t.sweep)
		}
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	_ = ic.c.Close()
}

// sweep closes the connections idle for idleFor or longer, and comes again while any are left.
func (t *inlineTransport) sweep() {
	var stale []*inlineConn
	now := time.Now()
	t.mu.Lock()
	for addr, conns := range t.idle {
		i := 0
		for i < len(conns) && now.Sub(conns[i].since) >= t.idleFor { // the oldest first
			i++
		}
		stale = append(stale, conns[:i]...)
		t.idle[addr] = slices.Delete(conns, 0, i)
		if len(t.idle[addr]) == 0 {
			delete(t.idle, addr)
		}
	}
	if t.sweeping = len(t.idle) > 0; t.sweeping {
		time.AfterFunc(t.idleFor, t.sweep)
	}
	t.mu.Unlock()
	for _, ic := range stale {
		_ = ic.c.Close()
	}
}

// CloseIdleConnections closes the idle connections, the fallback's too.
func (t *inlineTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = map[string][]*inlineConn{}
	t.mu.Unlock()
	for _, conns := range idle {
		for _, ic := range conns {
			_ = ic.c.Close()
		}
	}
	t.fallback.CloseIdleConnections()
}

// hostPort is req's host:port, port 80 when the URL has none.
func hostPort(req *http.Request) string {
	port := req.URL.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(req.URL.Hostname(), port)
}

// ctxCause is err, or the cause of ctx's end when ctx ended (the stock transport's error then).
func ctxCause(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}
