//go:build unix

package backends

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// countingServer is an HTTP server that counts the connections its clients opened.
type countingServer struct {
	*httptest.Server
	conns atomic.Int64
}

func newCountingServer(t *testing.T, h http.HandlerFunc) *countingServer {
	t.Helper()
	s := &countingServer{}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func newInlineClient(t *testing.T) (*http.Client, *inlineTransport) {
	t.Helper()
	tr := newInlineTransport(newTransport())
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}, tr
}

// post sends body to url and reads the answer to its end.
func post(t *testing.T, c *http.Client, url, body string) string {
	t.Helper()
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return string(b)
}

func echo(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	_, _ = w.Write(b)
}

// TestInlineReusesConnections: calls one after another share one connection, whole answers and
// chunked ones alike.
func TestInlineReusesConnections(t *testing.T) {
	s := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/chunked" {
			for _, c := range bytes.Split(b, []byte(" ")) {
				_, _ = w.Write(append(c, '\n'))
				w.(http.Flusher).Flush()
			}
			return
		}
		_, _ = w.Write(b)
	})
	c, _ := newInlineClient(t)
	for i := range 5 {
		if got := post(t, c, s.URL+"/whole", "hello"); got != "hello" {
			t.Fatalf("call %d: %q", i, got)
		}
		if got := post(t, c, s.URL+"/chunked", "a b c"); got != "a\nb\nc\n" {
			t.Fatalf("call %d: %q", i, got)
		}
	}
	if n := s.conns.Load(); n != 1 {
		t.Fatalf("%d connections for 10 calls in a row, want 1", n)
	}
}

// TestInlineServerClosedIdle: a connection the server closed while it sat in the pool is not
// used again: the next call goes out on a new one and succeeds.
func TestInlineServerClosedIdle(t *testing.T) {
	s := newCountingServer(t, echo)
	c, _ := newInlineClient(t)
	post(t, c, s.URL, "one")
	s.CloseClientConnections()
	// The close reaches the pooled connection's socket asynchronously; a call may still find it
	// open, which is not this test's case, so wait until the socket says so.
	waitClosed(t, c)
	if got := post(t, c, s.URL, "two"); got != "two" {
		t.Fatalf("got %q", got)
	}
	if n := s.conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// waitClosed waits until the pooled connection of c's transport reads as closed.
func waitClosed(t *testing.T, c *http.Client) {
	t.Helper()
	tr := c.Transport.(*inlineTransport)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		tr.mu.Lock()
		var ic *inlineConn
		for _, conns := range tr.idle {
			ic = conns[0]
		}
		tr.mu.Unlock()
		if ic == nil {
			t.Fatal("no pooled connection")
		}
		if peekEOF(t, ic.c) {
			return
		}
	}
	t.Fatal("the pooled connection never read as closed")
}

// peekEOF reports whether c's socket has reached the end of its stream, without taking a byte.
func peekEOF(t *testing.T, c net.Conn) bool {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var rerr error
	var buf [1]byte
	if err := rc.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return n == 0 && rerr == nil
}

// TestInlineNoReuse: a connection goes back to the pool after an answer read to its end, not
// after one that says Connection: close, nor after a body closed before its end.
func TestInlineNoReuse(t *testing.T) {
	s := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		_, _ = w.Write(bytes.Repeat([]byte("x"), 64<<10))
	})
	c, tr := newInlineClient(t)
	pooled := func() int {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		n := 0
		for _, conns := range tr.idle {
			n += len(conns)
		}
		return n
	}
	post(t, c, s.URL+"/close", "")
	if n := pooled(); n != 0 {
		t.Fatalf("%d pooled after Connection: close, want 0", n)
	}
	resp, err := c.Post(s.URL+"/early", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadFull(resp.Body, make([]byte, 10))
	_ = resp.Body.Close()
	if n := pooled(); n != 0 {
		t.Fatalf("%d pooled after a body closed early, want 0", n)
	}
	post(t, c, s.URL+"/whole", "")
	if n := pooled(); n != 1 {
		t.Fatalf("%d pooled after an answer read to its end, want 1", n)
	}
	if n := s.conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3", n)
	}
}

// TestInlineEarlyHints: an informational answer before the final one is skipped.
func TestInlineEarlyHints(t *testing.T) {
	s := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		echo(w, r)
	})
	c, _ := newInlineClient(t)
	if got := post(t, c, s.URL, "final"); got != "final" {
		t.Fatalf("got %q", got)
	}
}

// TestInlineCancel: a call cancelled while it waits for the answer returns the context's cause
// at once, and the server sees its connection close.
func TestInlineCancel(t *testing.T) {
	gone, over := make(chan struct{}), make(chan struct{})
	s := newCountingServer(t, func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // the server watches the connection from the body's end
		select {
		case <-r.Context().Done():
			close(gone)
		case <-over: // the test failed: let the server close
		}
	})
	t.Cleanup(func() { close(over) }) // before the server's Close
	c, _ := newInlineClient(t)
	cause := errors.New("the caller left")
	ctx, cancel := context.WithCancelCause(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, strings.NewReader("x"))
	errc := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond) // usually in the wait for the answer; either way the call ends
	cancel(cause)
	select {
	case err := <-errc:
		if !errors.Is(err, cause) {
			t.Fatalf("err %v, want the cause", err)
		}
	case <-time.After(cancelSeen):
		t.Fatal("the call did not end when it was cancelled")
	}
	select {
	case <-gone:
	case <-time.After(cancelSeen):
		t.Fatal("the server never saw the connection close")
	}
}

// TestInlineRetriesUnsentRequest: a request that a reused connection took none of goes out
// again on a new one; one that it took is not sent again.
func TestInlineRetriesUnsentRequest(t *testing.T) {
	s := newCountingServer(t, echo)
	c, tr := newInlineClient(t)
	addr := strings.TrimPrefix(s.URL, "http://")
	tr.put(tr.newConn(&brokenConn{write: false}, addr))
	if got := post(t, c, s.URL, "again"); got != "again" {
		t.Fatalf("got %q", got)
	}
	for _, took := range []int{10, 1 << 20} { // a part of the request, or all of it
		tr.CloseIdleConnections()
		tr.put(tr.newConn(&brokenConn{write: true, takes: took}, addr))
		resp, err := c.Post(s.URL, "text/plain", strings.NewReader("once"))
		if err == nil {
			_ = resp.Body.Close()
			t.Fatalf("a request the connection took %d bytes of was sent again", took)
		}
	}
	if n := s.conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

// brokenConn fails its reads, and its writes unless write is set: then it takes up to takes
// bytes of a write before it fails.
type brokenConn struct {
	net.Conn
	write bool
	takes int
}

func (c *brokenConn) Write(p []byte) (int, error) {
	if !c.write {
		return 0, errors.New("broken pipe")
	}
	if len(p) > c.takes {
		return c.takes, errors.New("connection reset")
	}
	return len(p), nil
}
func (*brokenConn) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }
func (*brokenConn) Close() error             { return nil }

// TestInlinePool: a connection idle beyond the idle timeout is closed instead of used, and the
// pool keeps at most maxIdle per host.
func TestInlinePool(t *testing.T) {
	s := newCountingServer(t, echo)
	c, tr := newInlineClient(t)
	post(t, c, s.URL, "one")
	tr.mu.Lock()
	for _, conns := range tr.idle {
		conns[0].since = time.Now().Add(-2 * tr.idleFor)
	}
	tr.mu.Unlock()
	post(t, c, s.URL, "two")
	if n := s.conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: the stale one was used", n)
	}
	tr.mu.Lock()
	for _, conns := range tr.idle {
		conns[0].since = time.Now().Add(-2 * tr.idleFor)
	}
	tr.mu.Unlock()
	tr.sweep()
	tr.mu.Lock()
	if len(tr.idle) != 0 {
		t.Errorf("%d hosts with idle connections after a sweep of stale ones, want none", len(tr.idle))
	}
	tr.mu.Unlock()
	tr.maxIdle = 2
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() { post(t, c, s.URL, "x") })
	}
	wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for addr, conns := range tr.idle {
		if len(conns) > tr.maxIdle {
			t.Fatalf("%s: %d idle, want at most %d", addr, len(conns), tr.maxIdle)
		}
	}
}

// TestInlineFallback: https and a proxied URL go to the stock transport.
func TestInlineFallback(t *testing.T) {
	tr := newInlineTransport(newTransport())
	proxied := newTransport()
	proxied.Proxy = func(*http.Request) (*url.URL, error) { return url.Parse("http://proxy:3128") }
	viaProxy := newInlineTransport(proxied)
	for _, tc := range []struct {
		tr   *inlineTransport
		url  string
		body io.Reader
		want bool
	}{
		{tr, "http://127.0.0.1:11434/api/chat", strings.NewReader("{}"), true},
		{tr, "http://localhost/api/chat", nil, true},
		{tr, "https://api.example.com/v1/chat/completions", nil, false},
		{viaProxy, "http://10.0.0.2:8000/v1/chat/completions", nil, false},
		{tr, "http://127.0.0.1:11434/api/chat", bytes.NewReader(make([]byte, maxInlineBody)), true},
		{tr, "http://127.0.0.1:11434/api/chat", bytes.NewReader(make([]byte, maxInlineBody+1)), false},
		{tr, "http://127.0.0.1:11434/api/chat", io.MultiReader(strings.NewReader("{}")), false}, // length unknown
	} {
		req, _ := http.NewRequest(http.MethodPost, tc.url, tc.body)
		if got := tc.tr.inline(req); got != tc.want {
			t.Errorf("%s, %d bytes: inline %v, want %v", tc.url, req.ContentLength, got, tc.want)
		}
	}
}

// rawServer answers every request on its connections with answer, then keeps the connection.
func rawServer(t *testing.T, answer func(w io.Writer)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					answer(c)
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestInlineHostileHead: an answer's headers beyond the transport's bound, and informational
// answers without end, are errors, not memory.
func TestInlineHostileHead(t *testing.T) {
	c, tr := newInlineClient(t)
	tr.maxHead = 64 << 10
	big := rawServer(t, func(w io.Writer) {
		_, _ = io.WriteString(w, "HTTP/1.1 200 OK\r\nX-Big: ")
		_, _ = w.Write(bytes.Repeat([]byte("a"), 1<<20))
		_, _ = io.WriteString(w, "\r\nContent-Length: 0\r\n\r\n")
	})
	resp, err := c.Post(big, "text/plain", strings.NewReader("x"))
	if err == nil {
		_ = resp.Body.Close()
		t.Fatal("a 1 MiB header passed a 64 KiB bound")
	}
	hints := rawServer(t, func(w io.Writer) {
		for range 100 {
			_, _ = io.WriteString(w, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n")
		}
		_, _ = io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	resp, err = c.Post(hints, "text/plain", strings.NewReader("x"))
	if err == nil {
		_ = resp.Body.Close()
		t.Fatal("100 informational answers were taken")
	}
	fine := rawServer(t, func(w io.Writer) {
		_, _ = io.WriteString(w, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n")
		_, _ = io.WriteString(w, "HTTP/1.1 200 OK\r\nX-Big: ")
		_, _ = w.Write(bytes.Repeat([]byte("a"), 32<<10))
		_, _ = io.WriteString(w, "\r\nContent-Length: 131072\r\n\r\n")
		_, _ = w.Write(bytes.Repeat([]byte("b"), 128<<10))
	})
	for range 2 { // the bound is the head's, not the body's; a second answer has its own
		if got := post(t, c, fine, "x"); len(got) != 128<<10 {
			t.Fatalf("got %d bytes, want 128 KiB", len(got))
		}
	}
}

// TestInlineTakesTheFallbacksSettings: connections are dialled by the fallback's DialContext
// and buffered as it says; a fallback that leaves a setting to net/http gets net/http's default.
func TestInlineTakesTheFallbacksSettings(t *testing.T) {
	s := newCountingServer(t, echo)
	fallback := newTransport()
	var dials atomic.Int64
	dial := fallback.DialContext
	fallback.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dial(ctx, network, addr)
	}
	fallback.ReadBufferSize, fallback.WriteBufferSize = 8<<10, 2<<10
	tr := newInlineTransport(fallback)
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	for range 2 {
		if got := post(t, c, s.URL, "hi"); got != "hi" {
			t.Fatalf("answer %q", got)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("the fallback's dialer made %d connections for two calls, want 1", n)
	}
	tr.mu.Lock()
	ic := tr.idle[strings.TrimPrefix(s.URL, "http://")][0]
	tr.mu.Unlock()
	if ic.br.Size() != 8<<10 || ic.bw.Size() != 2<<10 {
		t.Fatalf("buffers %d / %d, want the fallback's %d / %d", ic.br.Size(), ic.bw.Size(), 8<<10, 2<<10)
	}
	bare := newInlineTransport(&http.Transport{})
	if bare.dial == nil || bare.readBuf != 4<<10 || bare.writeBuf != 4<<10 || bare.maxHead != 10<<20 {
		t.Fatalf("net/http's defaults: dial set %v, buffers %d / %d, head %d", bare.dial != nil, bare.readBuf, bare.writeBuf, bare.maxHead)
	}
}
