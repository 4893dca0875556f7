package proxy

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/eoc-proxy/eoc-proxy/cascade"
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

// setBackendHeaders names the backend that answered and the number of attempts, when a
// backend was called.
func setBackendHeaders(h http.Header, backend string, attempts []cascade.BackendAttempt) {
	if len(attempts) == 0 {
		return
	}
	h.Set(HeaderBackend, backend)
	h.Set(HeaderAttempts, strconv.Itoa(len(attempts)))
}
func (s *Server) setBudgetHeader(h http.Header, tenant string) {
	if left, ok := s.budgets.remaining(tenant); ok {
		h.Set(HeaderBudgetRemaining, formatJoules(left.joules))
		h.Set(HeaderBudgetCoverage, left.coverage())
	}
}

func formatJoules(j float64) string { return strconv.FormatFloat(j, 'f', -1, 64) }

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

// energy sets the X-EOC headers of c.
func (hv *headerVals) energy(c *Call) {
	hv.set(HeaderJoules, formatJoules(c.Energy.Joules))
	hv.set(HeaderStage, c.Stage)
	hv.set(HeaderEnergy, string(c.Energy.Grade))
	hv.set(HeaderMethod, c.Energy.Method)
	hv.set(HeaderCoverage, c.Energy.Coverage)
	hv.set(HeaderReceipt, c.Receipt)
	if c.Energy.Reason != "" {
		hv.set(HeaderReason, c.Energy.Reason)
	}
	if c.Energy.Saved > 0 {
		hv.set(HeaderJoulesSaved, formatJoules(c.Energy.Saved))
	}
	if c.remaining != nil {
		hv.set(HeaderBudgetRemaining, formatJoules(*c.remaining))
		hv.set(HeaderBudgetCoverage, c.coverage)
	}
	setBoundsHeaders(hv.set, c)
}

// energyHeaders is the most X-EOC headers one call sets.
const energyHeaders = 15

// setEnergyHeaders sets the X-EOC headers of c.
func setEnergyHeaders(h http.Header, c *Call) {
	hv := headerVals{h: h, vals: make([]string, 0, energyHeaders)}
	hv.energy(c)
}

// writeOK writes a JSON answer with c's X-EOC headers.
func writeOK(w http.ResponseWriter, c *Call, body []byte) {
	hv := headerVals{h: w.Header(), vals: make([]string, 0, energyHeaders+2)}
	hv.energy(c)
	hv.set("Content-Type", "application/json")
	hv.set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}
