package proxy

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// TestEnergyHeaderValues: every value writeOK formats into its one buffer is the figure's own,
// with each optional header present exactly when its field is set.
func TestEnergyHeaderValues(t *testing.T) {
	left := 1234.5
	full := &Call{Stage: "neural", Receipt: "r", Time: time.Date(2026, 12, 5, 1, 2, 3, 456789, time.UTC),
		Energy: energy.Figure{Joules: 12.345678901, Low: 10.25, High: 15.000000001, Saved: 3.5, Grade: energy.Estimated,
			Method: "m", Coverage: "partial", Reason: "why", Provisional: true},
		remaining: &left, coverage: "whole"}
	bare := &Call{Stage: "cache", Receipt: "r2", Energy: energy.Figure{Joules: 0.001, Low: 0, High: 0.002, Grade: energy.Measured}}
	exact := &Call{Stage: "kv", Receipt: "r3", Energy: energy.Figure{Joules: 0.25, Low: 0.25, High: 0.25, Grade: energy.Estimated}}
	lowOnly := &Call{Stage: "graph", Receipt: "r4", Energy: energy.Figure{Joules: 2.5, Low: 2.5, High: 7, Grade: energy.Estimated}}
	body := []byte(`{"ok":true}`)
	for _, c := range []*Call{full, bare, exact, lowOnly} {
		w := httptest.NewRecorder()
		writeOK(w, c, body, nil)
		want := http.Header{
			HeaderJoules: {formatJoules(c.Energy.Joules)}, HeaderJoulesLow: {formatJoules(c.Energy.Low)},
			HeaderJoulesHigh: {formatJoules(c.Energy.High)}, HeaderStage: {c.Stage}, HeaderEnergy: {string(c.Energy.Grade)},
			HeaderMethod: {c.Energy.Method}, HeaderCoverage: {c.Energy.Coverage}, HeaderReceipt: {c.Receipt},
			HeaderJoulesState: {stateOf(c.Energy)}, "Content-Type": {"application/json"},
			"Content-Length": {strconv.Itoa(len(body))},
		}
		if c == full {
			want[HeaderReason] = []string{"why"}
			want[HeaderJoulesSaved] = []string{"3.5"}
			want[HeaderJoulesSavedGrade] = []string{string(energy.Estimated)}
			want[HeaderBudgetRemaining] = []string{"1234.5"}
			want[HeaderBudgetCoverage] = []string{"whole"}
			want[HeaderReceiptTime] = []string{"2026-12-05T01:02:03.000456789Z"}
		}
		got := w.Result().Header
		for k, v := range want {
			if g := got.Values(k); len(g) != 1 || g[0] != v[0] {
				t.Errorf("%s: %s = %q, want %q", c.Stage, k, g, v[0])
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("%s: unexpected header %s: %q", c.Stage, k, got.Values(k))
			}
		}
		if w.Body.String() != string(body) {
			t.Errorf("%s: body %q", c.Stage, w.Body.String())
		}
	}
}
