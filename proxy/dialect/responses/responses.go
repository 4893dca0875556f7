// Package responses is OpenAI's Responses API (POST /v1/responses) as a dialect: it decodes a request into the cascade's chat request, renders the answer as a Response object or its typed stream events, and keeps stored responses so that previous_response_id continues a conversation.
//
// The package knows no HTTP: the edge reads the body, walks the cascade and writes what the
// dialect renders; the retrieve and delete endpoints are the functions Retrieve and Delete.
package responses

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// HTTP statuses the dialect answers with; the package knows no net/http.
const (
	statusBadRequest  = 400
	statusNotFound    = 404
	statusServerError = 500
	statusUnavailable = 503
)

// Options configure a Dialect. The zero value is usable: responses are kept in memory with
// MemoryOptions' defaults.
type Options struct {
	// Store keeps stored responses; nil means NewMemory(MemoryOptions{}).
	Store Store
	// Now is the clock of created_at and completed_at (time.Now when nil).
	Now func() time.Time
	// NewID returns the random part of the ids the dialect makes (resp_…, msg_…, fc_…, call_…);
	// tests make it deterministic. nil means 16 random bytes in hex.
	NewID func() string
}

// Dialect is the Responses API. It is safe for concurrent use.
type Dialect struct {
	store Store
	now   func() time.Time
	newID func() string
}

var _ dialect.Dialect = (*Dialect)(nil)

// New returns the Responses dialect.
func New(o Options) *Dialect {
	d := &Dialect{store: o.Store, now: o.Now, newID: o.NewID}
	if d.store == nil {
		d.store = NewMemory(MemoryOptions{})
	}
	if d.now == nil {
		d.now = time.Now
	}
	if d.newID == nil {
		d.newID = randomID
	}
	return d
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Error renders e in OpenAI's shape (dialect.OpenAIError), its type invalid_request_error when
// it has none.
func (d *Dialect) Error(e *dialect.Error) []byte {
	if e.Type == "" {
		c := *e
		c.Type = "invalid_request_error"
		e = &c
	}
	return dialect.OpenAIError(e)
}

func badRequest(param, format string, a ...any) *dialect.Error {
	return &dialect.Error{Status: statusBadRequest, Type: "invalid_request_error", Param: param, Message: fmt.Sprintf(format, a...)}
}

// unsupported refuses a field that would change the answer and that the proxy cannot honour.
func unsupported(param, format string, a ...any) *dialect.Error {
	e := badRequest(param, format, a...)
	e.Code = "unsupported_parameter"
	return e
}

func notFound(param, id string) *dialect.Error {
	if len(id) > maxIDLen {
		id = id[:maxIDLen] + "…"
	}
	return &dialect.Error{Status: statusNotFound, Type: "invalid_request_error", Param: param,
		Message: fmt.Sprintf("Response with id '%s' not found.", id)}
}

// storeError is a store that failed (Redis unreachable): the call cannot go on without it.
func storeError(err error) *dialect.Error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &dialect.Error{Status: statusUnavailable, Type: "server_error", Code: "store_timeout",
			Message: "stored responses did not answer in time"}
	}
	return &dialect.Error{Status: statusUnavailable, Type: "server_error", Code: "store_unavailable",
		Message: "stored responses are unavailable right now; try again"}
}

// Retrieve returns tenant's stored response id as the Response object's JSON
// (GET /v1/responses/{id}); an unknown id, or another tenant's, is a 404.
func (d *Dialect) Retrieve(ctx context.Context, tenant, id string) ([]byte, *dialect.Error) {
	rec, e := d.load(ctx, tenant, id, "")
	if e != nil {
		return nil, e
	}
	return rec.Response, nil
}

// Delete removes tenant's stored response id (DELETE /v1/responses/{id}) and returns the
// deletion's JSON; an unknown id, or another tenant's, is a 404.
func (d *Dialect) Delete(ctx context.Context, tenant, id string) ([]byte, *dialect.Error) {
	if !validID(id) {
		return nil, notFound("", id)
	}
	found, err := d.store.Delete(ctx, tenant, id)
	if err != nil {
		return nil, storeError(err)
	}
	if !found {
		return nil, notFound("", id)
	}
	out, _ := json.Marshal(struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Deleted bool   `json:"deleted"`
	}{id, "response", true})
	return out, nil
}

// validID reports whether id could be one this dialect made: anything else is not looked up.
func validID(id string) bool {
	if len(id) < len("resp_")+1 || len(id) > maxIDLen || id[:5] != "resp_" {
		return false
	}
	for i := 5; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// maxIDLen bounds the ids looked up in the store.
const maxIDLen = 128

// load returns tenant's stored record id; param names the request field that asked for it.
func (d *Dialect) load(ctx context.Context, tenant, id, param string) (*record, *dialect.Error) {
	if !validID(id) {
		return nil, notFound(param, id)
	}
	b, found, err := d.store.Get(ctx, tenant, id)
	if err != nil {
		return nil, storeError(err)
	}
	if !found {
		return nil, notFound(param, id)
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil || rec.Version != recordVersion || len(rec.Response) == 0 {
		// Not a record this version wrote: as good as absent.
		return nil, notFound(param, id)
	}
	return &rec, nil
}
