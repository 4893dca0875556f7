package cascade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"
)

// refusedDial is a real dial to a loopback port nothing listens on: a *net.OpError "dial"
// wrapping ECONNREFUSED.
func refusedDial(t *testing.T) error {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	c, err := net.Dial("tcp", addr)
	if err == nil {
		_ = c.Close()
		t.Skip("something listens on a port just closed")
	}
	return err
}

// readTimeout is a real read past its deadline: a *net.OpError "read" whose Timeout() is true.
func readTimeout(t *testing.T) error {
	t.Helper()
	a, b := net.Pipe()
	defer func() { _ = a.Close(); _ = b.Close() }()
	_ = a.SetReadDeadline(time.Now().Add(-time.Second))
	_, err := a.Read(make([]byte, 1))
	if err == nil {
		t.Fatal("read past its deadline returned no error")
	}
	return err
}

func TestClassify(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	dns := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "gpu-box", IsNotFound: true}}
	be := func(err error) error { return &BackendError{Backend: "b", Err: err} }
	up := func(status int) error { return &UpstreamError{Backend: "b", Status: status, Message: "m"} }
	tests := []struct {
		name      string
		err       error
		want      Failure
		retryable bool
		outcome   string
	}{
		{"nil", nil, NoFailure, false, "ok"},
		{"dial refused", be(&url.Error{Op: "Post", URL: "http://b", Err: refusedDial(t)}), Unreachable, true, "unreachable"},
		{"dial refused, bare", refusedDial(t), Unreachable, true, "unreachable"},
		{"dns failure", be(dns), Unreachable, true, "unreachable"},
		{"host unreachable", be(os.NewSyscallError("connect", syscall.EHOSTUNREACH)), Unreachable, true, "unreachable"},
		{"connection reset", be(&url.Error{Op: "Post", URL: "http://b", Err: reset}), BrokenTransport, true, "error"},
		{"stream cut", be(io.ErrUnexpectedEOF), BrokenTransport, true, "error"},
		{"read timeout", be(readTimeout(t)), Timeout, true, "timeout"},
		{"deadline", be(&url.Error{Op: "Post", URL: "http://b", Err: context.DeadlineExceeded}), Timeout, true, "timeout"},
		{"deadline, bare", fmt.Errorf("waiting: %w", context.DeadlineExceeded), Timeout, true, "timeout"},
		{"client cancelled", be(&url.Error{Op: "Post", URL: "http://b", Err: context.Canceled}), ClientGone, false, "canceled"},
		{"client cancelled, bare", context.Canceled, ClientGone, false, "canceled"},
		{"upstream 401", up(401), UpstreamAuth, false, "status"},
		{"upstream 403", up(403), UpstreamAuth, false, "status"},
		{"upstream 429", up(429), UpstreamRateLimited, true, "status"},
		{"upstream 400", up(400), Upstream4xx, false, "status"},
		{"upstream 404", fmt.Errorf("neural: %w", up(404)), Upstream4xx, false, "status"},
		{"upstream 500", up(500), Upstream5xx, true, "status"},
		{"upstream 503 spent", &SpentError{Err: up(503)}, Upstream5xx, true, "status"},
		{"model not found", fmt.Errorf("routing: %w", ErrModelNotFound), ModelNotFound, false, "error"},
		{"no embeddings", ErrNoEmbeddings, NoEmbeddings, false, "error"},
		{"miss", &SpentError{Err: ErrMiss}, Miss, false, "error"},
		{"ours", errors.New("write: broken pipe"), Internal, false, "error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := Classify(tc.err)
			if f != tc.want {
				t.Fatalf("Classify(%v) = %v, want %v", tc.err, f, tc.want)
			}
			if f.Retryable() != tc.retryable {
				t.Errorf("%v.Retryable() = %v, want %v", f, f.Retryable(), tc.retryable)
			}
			if f.Outcome() != tc.outcome {
				t.Errorf("%v.Outcome() = %q, want %q", f, f.Outcome(), tc.outcome)
			}
		})
	}
}

// After bytes went to the client, an error of this process was the client's connection; a
// backend's failure stays the backend's.
func TestAfterWrite(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Failure
	}{
		{errors.New("write: broken pipe"), ClientGone},
		{&BackendError{Backend: "b", Err: io.ErrUnexpectedEOF}, BrokenTransport},
		{&UpstreamError{Backend: "b", Status: 500}, Upstream5xx},
		{context.DeadlineExceeded, Timeout},
	} {
		if got := Classify(tc.err).AfterWrite(); got != tc.want {
			t.Errorf("Classify(%v).AfterWrite() = %v, want %v", tc.err, got, tc.want)
		}
	}
}
