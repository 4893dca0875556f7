package proxy

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

// The X-EOC headers (X-EOC-Joules, …), spelled in Go's canonical form so setting them allocates
// no canonical copy; header names are case-insensitive. On a stream they are HTTP trailers.
const (
	HeaderJoules      = "X-Eoc-Joules"
	HeaderStage       = "X-Eoc-Stage"
	HeaderEnergy      = "X-Eoc-Energy"
	HeaderReason      = "X-Eoc-Energy-Reason"
	HeaderMethod      = "X-Eoc-Energy-Method"
	HeaderCoverage    = "X-Eoc-Coverage"
	HeaderReceipt     = "X-Eoc-Receipt"
	HeaderJoulesSaved = "X-Eoc-Joules-Saved"
	// HeaderBudgetRemaining is the caller's joule budget left, on every response of a key with one.
	HeaderBudgetRemaining = "X-Eoc-Budget-Remaining"
	// HeaderBudgetCoverage goes with HeaderBudgetRemaining: "partial" when some of the period's
	// spend came from partial figures (the remaining joules are then an upper bound), else "whole".
	HeaderBudgetCoverage = "X-Eoc-Budget-Coverage"
	// HeaderBackend names the backend that answered (or failed last), HeaderAttempts the number
	// of backend attempts the call made; on a stream both go out with the first chunk.
	HeaderBackend  = "X-Eoc-Backend"
	HeaderAttempts = "X-Eoc-Attempts"
)

var trailerNames = strings.Join([]string{HeaderJoules, HeaderStage, HeaderEnergy, HeaderReason, HeaderMethod, HeaderCoverage,
	HeaderReceipt, HeaderJoulesSaved, HeaderBudgetRemaining, HeaderBudgetCoverage, boundsTrailerNames}, ", ")

// backendHeaders is how many headers setBackendHeaders sets.
const backendHeaders = 2

// setBackendHeaders names the backend that answered and the number of attempts, when a
// backend was called. vals, when it has room for backendHeaders, backs the headers' values.
func setBackendHeaders(h http.Header, backend string, attempts []cascade.BackendAttempt, vals []string) {
	if len(attempts) == 0 {
		return
	}
	if cap(vals) < backendHeaders {
		vals = make([]string, 0, backendHeaders)
	}
	hv := headerVals{h: h, vals: vals[:0]}
	hv.set(HeaderBackend, backend)
	hv.set(HeaderAttempts, strconv.Itoa(len(attempts)))
}

func (s *Server) setBudgetHeader(h http.Header, tenant string) {
	if left, ok := s.budgets.remaining(tenant); ok {
		h.Set(HeaderBudgetRemaining, formatJoules(left.joules))
		h.Set(HeaderBudgetCoverage, left.coverage())
	}
}

// sameFloat reports whether a and b format the same: the same bits.
func sameFloat(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }

func formatJoules(j float64) string { return strconv.FormatFloat(j, 'f', -1, 64) }

func appendJoules(b []byte, j float64) []byte { return strconv.AppendFloat(b, j, 'f', -1, 64) }

// headerVals sets headers by canonical names (constants), straight into the map, their values
// sharing one backing array: one allocation where Header.Set makes one per header and
// canonicalizes each name.
type headerVals struct {
	h    http.Header
	vals []string
}

func (hv *headerVals) set(k, v string) {
	hv.vals = append(hv.vals, v)
	n := len(hv.vals)
	hv.h[k] = hv.vals[n-1 : n : n]
}

// energy sets the X-EOC headers of c, and Content-Length when length is not negative. The
// values it formats are appended to one buffer that becomes one string, each value a part of it:
// one allocation for all of them.
func (hv *headerVals) energy(c *Call, length int) {
	var buf [256]byte
	b := appendJoules(buf[:0], c.Energy.Joules)
	endJoules := len(b)
	// A bound equal to the joules (an exact figure) is formatted once.
	lowSame, highSame := sameFloat(c.Energy.Low, c.Energy.Joules), sameFloat(c.Energy.High, c.Energy.Joules)
	if !lowSame {
		b = appendJoules(b, c.Energy.Low)
	}
	endLow := len(b)
	if !highSame {
		b = appendJoules(b, c.Energy.High)
	}
	endHigh := len(b)
	endSaved := endHigh
	if c.Energy.Saved > 0 {
		b = appendJoules(b, c.Energy.Saved)
		endSaved = len(b)
	}
	endRemaining := endSaved
	if c.remaining != nil {
		b = appendJoules(b, *c.remaining)
		endRemaining = len(b)
	}
	endTime := endRemaining
	if !c.Time.IsZero() {
		b = c.Time.UTC().AppendFormat(b, time.RFC3339Nano)
		endTime = len(b)
	}
	if length >= 0 {
		b = strconv.AppendInt(b, int64(length), 10)
	}
	v := string(b)
	hv.set(HeaderJoules, v[:endJoules])
	hv.set(HeaderStage, c.Stage)
	hv.set(HeaderEnergy, string(c.Energy.Grade))
	hv.set(HeaderMethod, c.Energy.Method)
	hv.set(HeaderCoverage, c.Energy.Coverage)
	hv.set(HeaderReceipt, c.Receipt)
	if c.Energy.Reason != "" {
		hv.set(HeaderReason, c.Energy.Reason)
	}
	if c.Energy.Saved > 0 {
		hv.set(HeaderJoulesSaved, v[endHigh:endSaved])
	}
	if c.remaining != nil {
		hv.set(HeaderBudgetRemaining, v[endSaved:endRemaining])
		hv.set(HeaderBudgetCoverage, c.coverage)
	}
	// The bounds, the figure's state, the receipt time and the saving's grade.
	joules, low, high := v[:endJoules], v[endJoules:endLow], v[endLow:endHigh]
	if lowSame {
		low = joules
	}
	if highSame {
		high = joules
	}
	hv.set(HeaderJoulesLow, low)
	hv.set(HeaderJoulesHigh, high)
	hv.set(HeaderJoulesState, stateOf(c.Energy))
	if !c.Time.IsZero() {
		hv.set(HeaderReceiptTime, v[endRemaining:endTime])
	}
	if c.Energy.Saved > 0 {
		hv.set(HeaderJoulesSavedGrade, string(energy.Estimated))
	}
	if length >= 0 {
		hv.set("Content-Length", v[endTime:])
	}
}

// energyHeaders is the most X-EOC headers one call sets.
const energyHeaders = 15

// setEnergyHeaders sets the X-EOC headers of c.
func setEnergyHeaders(h http.Header, c *Call) {
	hv := headerVals{h: h, vals: make([]string, 0, energyHeaders)}
	hv.energy(c, -1)
}

// okHeaders is the most headers writeOK sets.
const okHeaders = energyHeaders + 2

// writeOK writes a JSON answer with c's X-EOC headers. vals, when it has room for okHeaders,
// backs the headers' values.
func writeOK(w http.ResponseWriter, c *Call, body []byte, vals []string) {
	if cap(vals) < okHeaders {
		vals = make([]string, 0, okHeaders)
	}
	hv := headerVals{h: w.Header(), vals: vals[:0]}
	hv.set("Content-Type", "application/json")
	hv.energy(c, len(body))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}
