package cascade

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// ErrModelNotFound means no backend's patterns match the requested model.
var ErrModelNotFound = errors.New("model not found")

// UpstreamError is an error response from a backend. Backends return it for any non-2xx reply so
// the edge can pass a 4xx through with its status and message.
type UpstreamError struct {
	Backend string
	Status  int    // the upstream's HTTP status
	Message string // the upstream's message, safe for the client
	Type    string
	Code    string
	Param   string
	// RetryAfter is the upstream's Retry-After (a 429 or 503), 0 when it sent none.
	RetryAfter time.Duration
}

func (e *UpstreamError) Error() string {
	return fmt.Sprintf("backend %s: status %d: %s", e.Backend, e.Status, e.Message)
}

// BackendError wraps a transport failure (unreachable, timeout, broken stream) with the backend's name.
type BackendError struct {
	Backend string
	Err     error
}

func (e *BackendError) Error() string { return fmt.Sprintf("backend %s: %v", e.Backend, e.Err) }
func (e *BackendError) Unwrap() error { return e.Err }

// SpentError is a stage's error, a miss included, after which the stage had already spent energy
// outside this process (an embedding call). The walk adds Energy to the figure of the answer
// that ends the walk, so what a miss cost is billed to the call that caused it.
type SpentError struct {
	Err    error
	Energy energy.Figure
	// Settle is how to get Energy's final figure, nil when it is final or has no settlement.
	Settle SettleFunc
}

func (e *SpentError) Error() string { return e.Err.Error() }
func (e *SpentError) Unwrap() error { return e.Err }

// Spent returns err carrying f, or err itself when f is zero or err is nil.
func Spent(err error, f energy.Figure) error {
	if err == nil || f.IsZero() {
		return err
	}
	return &SpentError{Err: err, Energy: f}
}

// SpentSettle is Spent with settle, how to get f's final figure (nil when f is final).
func SpentSettle(err error, f energy.Figure, settle SettleFunc) error {
	if err == nil || f.IsZero() {
		return err
	}
	return &SpentError{Err: err, Energy: f, Settle: settle}
}

// Failure is what an error from a walk, a stage or a backend means, decided once (Classify):
// the client's status, whether another backend may answer, the router's view of the backend's
// health and the ledger's outcome all read it, as Caddy's statusError and tryAgain do.
type Failure int

// The failures, in the order Classify tests for them.
const (
	// NoFailure is a nil error.
	NoFailure Failure = iota
	// UpstreamAuth: the upstream refused the proxy's own credentials (401, 403).
	UpstreamAuth
	// UpstreamRateLimited: the upstream limited the rate (429).
	UpstreamRateLimited
	// Upstream4xx: any other 4xx, the request's fault, the same at any backend.
	Upstream4xx
	// Upstream5xx: the upstream answered with a failure status (5xx, or any other non-2xx).
	Upstream5xx
	// ModelNotFound: no backend serves the model (ErrModelNotFound).
	ModelNotFound
	// NoEmbeddings: the model's backend cannot embed (ErrNoEmbeddings).
	NoEmbeddings
	// Miss: no stage answered and none failed (ErrMiss).
	Miss
	// ClientGone: the call's context was cancelled: the client went away.
	ClientGone
	// Timeout: a deadline passed (context.DeadlineExceeded, or a net.Error that timed out).
	Timeout
	// Unreachable: the backend could not be reached (refused, no route, a failed dial).
	Unreachable
	// BrokenTransport: the backend was reached, then the exchange broke (a reset, a cut
	// stream, a reply that did not parse): any other BackendError.
	BrokenTransport
	// Internal: an error of this process, not a backend's nor the cascade's; one that ends a
	// call after it wrote to its client is the client's connection (AfterWrite).
	Internal
)

var failureNames = [...]string{"none", "upstream auth", "upstream rate limit", "upstream 4xx", "upstream 5xx",
	"model not found", "no embeddings", "miss", "client gone", "timeout", "unreachable", "broken transport", "internal"}

func (f Failure) String() string {
	if f < 0 || int(f) >= len(failureNames) {
		return "unknown"
	}
	return failureNames[f]
}

// Classify returns what err means. An UpstreamError decides by its status wherever it sits in
// the chain; then the cascade's sentinels; then a cancelled context, a deadline, an unreachable
// backend, any other BackendError; anything else is Internal.
func Classify(err error) Failure {
	if err == nil {
		return NoFailure
	}
	var up *UpstreamError
	if errors.As(err, &up) {
		switch {
		case up.Status == 401 || up.Status == 403:
			return UpstreamAuth
		case up.Status == 429:
			return UpstreamRateLimited
		case up.Status >= 400 && up.Status < 500:
			return Upstream4xx
		}
		return Upstream5xx
	}
	var be *BackendError
	switch {
	case errors.Is(err, ErrModelNotFound):
		return ModelNotFound
	case errors.Is(err, ErrNoEmbeddings):
		return NoEmbeddings
	case errors.Is(err, ErrMiss):
		return Miss
	case errors.Is(err, context.Canceled):
		return ClientGone
	case isTimeout(err):
		return Timeout
	case isUnreachable(err):
		return Unreachable
	case errors.As(err, &be):
		return BrokenTransport
	}
	return Internal
}

func isTimeout(err error) bool {
	var ne interface{ Timeout() bool } // net.Error's test
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func isUnreachable(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || (errors.As(err, &op) && op.Op == "dial")
}

// AfterWrite is f for a call that had written to its client when it failed: an Internal error
// was then the sink's own, the client's connection, so the client is gone.
func (f Failure) AfterWrite() Failure {
	if f == Internal {
		return ClientGone
	}
	return f
}

// Retryable reports whether another backend, or the same one later, may answer after f: the
// upstream was unreachable, broke, timed out, failed (5xx) or limited the rate (429). A 4xx
// other than 429 is the request's, and would be the same elsewhere; a client that went away
// wants no answer.
func (f Failure) Retryable() bool {
	switch f {
	case Unreachable, BrokenTransport, Timeout, Upstream5xx, UpstreamRateLimited:
		return true
	}
	return false
}

// Upstream reports whether f is an upstream's status (BackendAttempt.Status says which).
func (f Failure) Upstream() bool {
	return f == UpstreamAuth || f == UpstreamRateLimited || f == Upstream4xx || f == Upstream5xx
}

// Outcome is f's name in BackendAttempt.Outcome and the ledger: "ok", "status", "unreachable",
// "timeout", "canceled" or "error".
func (f Failure) Outcome() string {
	switch {
	case f == NoFailure:
		return "ok"
	case f.Upstream():
		return "status"
	case f == Unreachable:
		return "unreachable"
	case f == Timeout:
		return "timeout"
	case f == ClientGone:
		return "canceled"
	}
	return "error"
}
