package proxy

import (
	"strings"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect"
)

// The X-EOC headers of a figure's bounds and receipt time (issue 10), in Go's canonical form.
const (
	// HeaderJoulesLow and HeaderJoulesHigh bound X-EOC-Joules: Low ≤ Joules ≤ High.
	HeaderJoulesLow  = "X-Eoc-Joules-Low"
	HeaderJoulesHigh = "X-Eoc-Joules-High"
	// HeaderReceiptTime is the receipt's time, RFC 3339 UTC with nanoseconds as the receipt
	// hashes it, so a client can check X-EOC-Receipt without the ledger.
	HeaderReceiptTime = "X-Eoc-Receipt-Time"
	// HeaderJoulesSavedGrade is the grade of X-EOC-Joules-Saved: always estimated (a saving is
	// what a call that was not made would have cost); its basis is in X-EOC-Energy-Reason.
	HeaderJoulesSavedGrade = "X-Eoc-Joules-Saved-Grade"
	// HeaderJoulesState says whether X-EOC-Joules is final: "settled", or "provisional" when its
	// GPU part was made before NVML's counter updated past the call (Low and High then hold the
	// settled figure, which GET /v1/eoc/calls/{request_id} gives once known).
	HeaderJoulesState = "X-Eoc-Joules-State"
)

// The states of a figure (X-EOC-Joules-State).
const (
	StateProvisional = "provisional"
	StateSettled     = "settled"
)

// stateOf is fig's X-EOC-Joules-State.
func stateOf(fig energy.Figure) string {
	if fig.Provisional {
		return StateProvisional
	}
	return StateSettled
}

// boundsTrailerNames are the trailers a stream adds for them.
var boundsTrailerNames = strings.Join([]string{HeaderJoulesLow, HeaderJoulesHigh, HeaderReceiptTime, HeaderJoulesSavedGrade,
	HeaderJoulesState}, ", ")

// eocBounds are the final eoc chunk's bounds, state, receipt time, saving's grade and joules per
// token (the figure's prompt and completion parts over the tokens its work processed).
type eocBounds struct {
	JoulesLow  float64 `json:"joules_low"`
	JoulesHigh float64 `json:"joules_high"`
	// State is X-EOC-Joules-State: provisional or settled.
	State                    string  `json:"state"`
	ReceiptTime              string  `json:"receipt_time,omitempty"`
	JoulesSavedGrade         string  `json:"joules_saved_grade,omitempty"`
	JoulesPerPromptToken     float64 `json:"joules_per_prompt_token,omitempty"`
	JoulesPerCompletionToken float64 `json:"joules_per_completion_token,omitempty"`
	// TokenSplit says how the joules were split between prompt and completion (token-weight).
	TokenSplit string `json:"token_split,omitempty"`
}

// figures is what a stream's final event says of c: the X-EOC values.
func figures(c *Call) dialect.Figures {
	f := dialect.Figures{View: c.Energy.View(), Stage: c.Stage, Receipt: c.Receipt, State: stateOf(c.Energy), JoulesSaved: c.Energy.Saved,
		TokenSplit: c.Energy.Split}
	if c.remaining != nil {
		f.BudgetRemaining, f.BudgetCoverage = c.remaining, c.coverage
	}
	if !c.Time.IsZero() {
		f.ReceiptTime = c.Time.UTC().Format(time.RFC3339Nano)
	}
	if c.Energy.Saved > 0 {
		f.JoulesSavedGrade = string(energy.Estimated)
	}
	f.JoulesPerPromptToken, f.JoulesPerCompletionToken = c.Energy.PerToken()
	return f
}
