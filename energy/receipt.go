package energy

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"
)

// Receipt is the canonical record behind X-EOC-Receipt.
type Receipt struct {
	Key    string    `json:"key"`
	Stage  string    `json:"stage"`
	Model  string    `json:"model"`
	Joules float64   `json:"joules"`
	Grade  Grade     `json:"grade"`
	Time   time.Time `json:"time"`
}

// Hash is the hex SHA-256 of the receipt's canonical form: one field a line, in a fixed order,
// joules in shortest round-trip decimal and time in RFC 3339 UTC with nanoseconds.
func (r Receipt) Hash() string {
	b := make([]byte, 0, 256)
	b = append(b, "eoc-receipt-v1\n"...)
	b = append(b, r.Key...)
	b = append(b, '\n')
	b = append(b, r.Stage...)
	b = append(b, '\n')
	b = strconv.AppendQuote(b, r.Model)
	b = append(b, '\n')
	b = strconv.AppendFloat(b, r.Joules, 'f', -1, 64)
	b = append(b, '\n')
	b = append(b, r.Grade...)
	b = append(b, '\n')
	b = r.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	sum := sha256.Sum256(b)
	var text [2 * sha256.Size]byte
	hex.Encode(text[:], sum[:])
	return string(text[:])
}
