package cascade

import (
	"errors"
	"fmt"
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
