package ledger

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// ZeroHash is the prev of the first record of a chain.
const ZeroHash = "0000000000000000000000000000000000000000000000000000000000000000"

// Record is one line of the ledger: what one call cost, the receipt that vouches for it, and the
// links that chain it to the record before. A call whose figure was provisional (its GPU part
// made before NVML's counter updated) is followed, once it settles, by a settlement record
// (Settles set) that carries the settled figure; the call's own record stays as the client's
// receipt vouches for it. The caller fills the call's fields; Append fills
// Seq, Receipt, Prev and Hash (and Time when it is zero).
//
// The JSON encoding is the file format: one record a line, the fields in this order, none
// omitted. Verify rejects a line that is not byte for byte the encoding of its own record.
type Record struct {
	// Seq numbers the records from 1, without gaps, across rotations.
	Seq uint64 `json:"seq"`
	// Time is when the call was settled, in UTC. It is the Time of the receipt.
	Time time.Time `json:"time"`
	// RequestID is the proxy's request id.
	RequestID string `json:"request_id"`
	// KeyID names the proxy API key that made the call, never the key itself; "" when auth is off.
	KeyID string `json:"key_id"`
	// Key is the request's canonical key hash (cascade.Request.Key), not a secret.
	Key     string `json:"key"`
	Model   string `json:"model"`
	Stage   string `json:"stage"`
	Backend string `json:"backend"`
	Status  int    `json:"status"`
	// Figure is the call's energy, as the client was told it.
	energy.Figure
	Disconnected bool `json:"disconnected"`
	// Attempts are the backend calls the call made, in order, the answering one last; absent
	// when no backend was called (a cache hit). The Figure is their sum plus what earlier
	// stages spent (a kv embedding).
	Attempts []Attempt `json:"attempts,omitempty"`
	// Replica names the replica that served the call, when several share a Redis (config
	// replica_id); absent for a lone proxy.
	Replica string `json:"replica,omitempty"`
	// Settles, on a settlement record, is the Receipt of the call record it settles, which
	// came before it in the chain with the same RequestID and a provisional Figure: this
	// record's Figure is that call's settled figure (its receipt, in Receipt, is of this
	// record's fields). Absent on a call's record.
	Settles string `json:"settles,omitempty"`
	// Receipt is Receipt{Key, Stage, Model, Joules, Grade, Time}.Hash(): the X-EOC-Receipt the
	// client was sent.
	Receipt string `json:"receipt"`
	// Prev is the Hash of the record before, ZeroHash for the first record of a chain.
	Prev string `json:"prev"`
	// Hash is the hex SHA-256 (HMAC-SHA256 when the ledger has a key) of the record's canonical
	// form, which covers every other field, Prev included.
	Hash string `json:"hash"`
}

// Attempt is one backend call of a record's call: which backend, how it ended ("ok", "status"
// with the upstream's Status, "unreachable", "timeout", "canceled", "error") and what it cost.
type Attempt struct {
	Backend string       `json:"backend"`
	Outcome string       `json:"outcome"`
	Status  int          `json:"status"`
	Joules  float64      `json:"joules"`
	Grade   energy.Grade `json:"grade"`
}

// receipt returns the receipt behind the record's Receipt field.
func (r Record) receipt() energy.Receipt {
	return energy.Receipt{Key: r.Key, Stage: r.Stage, Model: r.Model, Joules: r.Joules, Grade: r.Grade, Time: r.Time}
}

// ErrInvalid is wrapped by Append for a record that cannot be written as given.
var ErrInvalid = errors.New("ledger: invalid record")

// normalize readies a caller's record for the chain: time in UTC (now when zero) without a
// monotonic reading, strings valid UTF-8 (as JSON will carry them), finite joules, the receipt.
func normalize(r *Record, now func() time.Time) error {
	if r.Time.IsZero() {
		r.Time = now()
	}
	r.Time = r.Time.UTC() // also strips the monotonic reading
	if y := r.Time.Year(); y < 1 || y > 9999 {
		return fmt.Errorf("%w: time %v is outside years 1-9999", ErrInvalid, r.Time)
	}
	for _, s := range []*string{&r.RequestID, &r.KeyID, &r.Key, &r.Model, &r.Stage, &r.Backend,
		&r.Coverage, &r.Method, &r.Reason, &r.Replica, &r.Settles} {
		if !utf8.ValidString(*s) {
			*s = strings.ToValidUTF8(*s, "\uFFFD")
		}
	}
	for i := range r.Attempts {
		a := &r.Attempts[i]
		a.Backend, a.Outcome = strings.ToValidUTF8(a.Backend, "\uFFFD"), strings.ToValidUTF8(a.Outcome, "\uFFFD")
		a.Grade = energy.Grade(strings.ToValidUTF8(string(a.Grade), "\uFFFD"))
		if !finite(a.Joules) {
			return fmt.Errorf("%w: attempt %d: joules %v are not finite", ErrInvalid, i, a.Joules)
		}
	}
	if !utf8.ValidString(string(r.Grade)) {
		r.Grade = energy.Grade(strings.ToValidUTF8(string(r.Grade), "\uFFFD"))
	}
	if !finite(r.Joules) || !finite(r.Saved) {
		return fmt.Errorf("%w: joules %v, joules_saved %v are not finite", ErrInvalid, r.Joules, r.Saved)
	}
	sanitizeFigure(r)
	want := r.receipt().Hash()
	if r.Receipt != "" && r.Receipt != want {
		return fmt.Errorf("%w: receipt %s does not match its fields (want %s)", ErrInvalid, r.Receipt, want)
	}
	r.Receipt = want
	return nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// canonical appends the record's canonical form to b: a version line, then every field but Hash,
// one a line in a fixed order; strings quoted, floats in shortest round-trip decimal, time in
// RFC 3339 UTC with nanoseconds.
func (r *Record) canonical(b []byte) []byte {
	b = append(b, "eoc-ledger-v1\n"...)
	b = strconv.AppendUint(b, r.Seq, 10)
	b = append(b, '\n')
	b = r.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '\n')
	for _, s := range []string{r.RequestID, r.KeyID, r.Key, r.Model, r.Stage, r.Backend} {
		b = strconv.AppendQuote(b, s)
		b = append(b, '\n')
	}
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, '\n')
	b = strconv.AppendFloat(b, r.Joules, 'f', -1, 64)
	b = append(b, '\n')
	b = strconv.AppendFloat(b, r.Saved, 'f', -1, 64)
	b = append(b, '\n')
	for _, s := range []string{string(r.Grade), r.Coverage, r.Method, r.Reason} {
		b = strconv.AppendQuote(b, s)
		b = append(b, '\n')
	}
	b = strconv.AppendBool(b, r.Disconnected)
	b = append(b, '\n')
	b = r.canonicalFigure(b)
	// A record without attempts has the canonical form it had before attempts were recorded.
	for _, a := range r.Attempts {
		b = append(b, "attempt "...)
		b = strconv.AppendQuote(b, a.Backend)
		b = append(b, ' ')
		b = strconv.AppendQuote(b, a.Outcome)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(a.Status), 10)
		b = append(b, ' ')
		b = strconv.AppendFloat(b, a.Joules, 'f', -1, 64)
		b = append(b, ' ')
		b = strconv.AppendQuote(b, string(a.Grade))
		b = append(b, '\n')
	}
	// Likewise, a record without a replica has the form it had before replicas were named.
	if r.Replica != "" {
		b = append(b, "replica "...)
		b = strconv.AppendQuote(b, r.Replica)
		b = append(b, '\n')
	}
	// And a call's record has the form it had before settlements were recorded.
	if r.Settles != "" {
		b = append(b, "settles "...)
		b = strconv.AppendQuote(b, r.Settles)
		b = append(b, '\n')
	}
	b = append(b, r.Receipt...)
	b = append(b, '\n')
	b = append(b, r.Prev...)
	return b
}

// sealer computes record hashes: SHA-256, or HMAC-SHA256 with a key. Not safe for concurrent use.
type sealer struct {
	h   hash.Hash
	buf []byte
	sum []byte
}

func newSealer(key []byte) *sealer {
	if len(key) > 0 {
		return &sealer{h: hmac.New(sha256.New, key)}
	}
	return &sealer{h: sha256.New()}
}

// seal returns the record's hash in hex.
func (s *sealer) seal(r *Record) string {
	s.buf = r.canonical(s.buf[:0])
	s.h.Reset()
	s.h.Write(s.buf)
	s.sum = s.h.Sum(s.sum[:0])
	return hex.EncodeToString(s.sum)
}
