package proxy

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// StatusClientClosed is nginx's and Caddy's status for a client that went away before the answer.
const StatusClientClosed = 499

// APIError is the one error type at the edge. Message goes to the client in OpenAI's shape; Err
// only to the log.
type APIError struct {
	Status  int
	Message string
	Type    string
	Code    string
	Param   string
	Err     error
	// RetryAfter, when positive, goes out as the Retry-After header (an upstream's 429).
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%d %s: %v", e.Status, e.Message, e.Err)
	}
	return fmt.Sprintf("%d %s", e.Status, e.Message)
}

func (e *APIError) Unwrap() error { return e.Err }

// errorRenderer renders an edge error in a wire format's shape (dialect.Dialect.Error).
type errorRenderer interface {
	Error(e *dialect.Error) []byte
}

// openAIErrors renders OpenAI's error object, the shape of every route without a dialect of its
// own (embeddings, models, the calls endpoint, the page) and of the chat dialect.
type openAIErrors struct{}

func (openAIErrors) Error(e *dialect.Error) []byte { return dialect.OpenAIError(e) }

// wire is e as the seam's dialects take it: what the client may see, without Err.
func (e *APIError) wire() *dialect.Error {
	return &dialect.Error{Status: e.Status, Type: e.Type, Code: e.Code, Param: e.Param, Message: e.Message, RetryAfter: e.RetryAfter}
}

// fromWire is a dialect's refusal as the edge's error.
func fromWire(e *dialect.Error) *APIError {
	return &APIError{Status: e.Status, Type: e.Type, Code: e.Code, Param: e.Param, Message: e.Message, RetryAfter: e.RetryAfter}
}

// writeError writes e as OpenAI's error object.
func writeError(w http.ResponseWriter, e *APIError) { writeErrorAs(w, openAIErrors{}, e) }

// writeErrorAs writes e in d's shape, with its status and Retry-After.
func writeErrorAs(w http.ResponseWriter, d errorRenderer, e *APIError) {
	b := d.Error(e.wire())
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(e.RetryAfter.Seconds())), 10))
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(b)
}

func badRequest(param, format string, a ...any) *APIError {
	return &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Message: fmt.Sprintf(format, a...)}
}

// classify maps a walk's error to the status and message the client sees, by its failure
// (cascade.Classify): upstream 4xx pass through, a timeout is 504, an unreachable or failing
// backend 502, a client that left 499. The edge's own errors (APIError) stand as they are.
func classify(err error, model string) *APIError {
	var api *APIError
	if errors.As(err, &api) {
		return api
	}
	var up *cascade.UpstreamError
	errors.As(err, &up) // set for every upstream failure
	switch cascade.Classify(err) {
	case cascade.ModelNotFound:
		return &APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "model_not_found", Param: "model",
			Message: fmt.Sprintf("The model %q does not exist: no backend serves it.", model), Err: err}
	case cascade.NoEmbeddings:
		return &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "embeddings_not_supported", Param: "model",
			Message: fmt.Sprintf("The model %q is served by a backend that does not serve embeddings.", model), Err: err}
	case cascade.UpstreamAuth:
		// The upstream refused the proxy's own credentials: nothing the client can fix, and a
		// 401 would read as the client's key being wrong.
		return &APIError{Status: http.StatusBadGateway, Type: "upstream_error", Code: "upstream_auth_failed",
			Message: fmt.Sprintf("backend %q refused the proxy's credentials (status %d): %s", up.Backend, up.Status, up.Message), Err: err}
	case cascade.Upstream4xx, cascade.UpstreamRateLimited:
		typ := up.Type
		if typ == "" {
			typ = "invalid_request_error"
		}
		return &APIError{Status: up.Status, Type: typ, Code: up.Code, Param: up.Param, Message: up.Message, Err: err, RetryAfter: up.RetryAfter}
	case cascade.Upstream5xx:
		return &APIError{Status: http.StatusBadGateway, Type: "upstream_error", Code: "bad_gateway",
			Message: fmt.Sprintf("backend %q failed with status %d: %s", up.Backend, up.Status, up.Message), Err: err}
	case cascade.ClientGone:
		return clientClosed(err)
	case cascade.Timeout:
		return &APIError{Status: http.StatusGatewayTimeout, Type: "upstream_error", Code: "timeout",
			Message: fmt.Sprintf("backend %q timed out", backendOf(err)), Err: err}
	case cascade.Unreachable:
		return &APIError{Status: http.StatusBadGateway, Type: "upstream_error", Code: "bad_gateway",
			Message: fmt.Sprintf("backend %q is unreachable", backendOf(err)), Err: err}
	case cascade.BrokenTransport:
		return &APIError{Status: http.StatusBadGateway, Type: "upstream_error", Code: "bad_gateway",
			Message: fmt.Sprintf("backend %q failed", backendOf(err)), Err: err}
	case cascade.Miss:
		return &APIError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "no_stage_answered",
			Message: "no cascade stage could answer, and the neural stage is off", Err: err}
	}
	return &APIError{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error", Message: "internal error", Err: err}
}

// isTimeout reports whether err is a deadline's (a body read's, or a walk's).
func isTimeout(err error) bool { return cascade.Classify(err) == cascade.Timeout }

func backendOf(err error) string {
	var be *cascade.BackendError
	if errors.As(err, &be) {
		return be.Backend
	}
	var up *cascade.UpstreamError
	if errors.As(err, &up) {
		return up.Backend
	}
	return "?"
}

// clientClosed is the error of a call whose client went away (499).
func clientClosed(err error) *APIError {
	return &APIError{Status: StatusClientClosed, Type: "invalid_request_error", Code: "client_closed", Message: "client closed the request", Err: err}
}
