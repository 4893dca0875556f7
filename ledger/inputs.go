package ledger

import (
	"encoding/json"
	"strconv"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// canonicalFigure appends the figure's bounds, its prompt/completion split and its recorded
// inputs to a canonical form, one a line, each only when the record has it: a record from
// before they were kept has the canonical form it had then.
func (r *Record) canonicalFigure(b []byte) []byte {
	f := &r.Figure
	if f.Low != 0 || f.High != 0 {
		b = append(b, "bounds "...)
		b = strconv.AppendFloat(b, f.Low, 'f', -1, 64)
		b = append(b, ' ')
		b = strconv.AppendFloat(b, f.High, 'f', -1, 64)
		b = append(b, '\n')
	}
	if f.PromptTokens != 0 || f.CompletionTokens != 0 || f.Split != "" || f.PromptJoules != 0 || f.CompletionJoules != 0 {
		b = append(b, "split "...)
		b = strconv.AppendQuote(b, f.Split)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(f.PromptTokens), 10)
		b = append(b, ' ')
		b = strconv.AppendFloat(b, f.PromptJoules, 'f', -1, 64)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(f.CompletionTokens), 10)
		b = append(b, ' ')
		b = strconv.AppendFloat(b, f.CompletionJoules, 'f', -1, 64)
		b = append(b, '\n')
	}
	for _, in := range f.Inputs.All() {
		// The inputs' JSON is their canonical form: Go's encoding of a struct is deterministic
		// (fields in order, floats in shortest round-trip decimal). sanitizeFigure made sure
		// it encodes.
		j, err := json.Marshal(in)
		if err != nil {
			j = []byte(strconv.Quote(err.Error()))
		}
		b = append(b, "inputs "...)
		b = append(b, j...)
		b = append(b, '\n')
	}
	return b
}

// sanitizeFigure makes a figure whose bounds, split or inputs hold a number that is not
// finite (which JSON cannot carry) writable rather than refusing the record: a record is never
// lost. A bound that is not finite is clamped to the figure (Low to min(0, Joules), High to
// Joules), so Low ≤ Joules ≤ High still holds; a split whose joules are not finite is dropped
// (its token counts kept); and the inputs are dropped whole, since the figure as written no
// longer derives from them: recompute reports the record as having no inputs. Joules itself
// was checked by the caller.
func sanitizeFigure(r *Record) {
	f := &r.Figure
	bad := false
	if !finite(f.Low) {
		f.Low, bad = min(0, f.Joules), true
	}
	if !finite(f.High) {
		f.High, bad = max(f.Joules, f.Low), true
	}
	if !finite(f.PromptJoules) || !finite(f.CompletionJoules) {
		f.PromptJoules, f.CompletionJoules, f.Split, bad = 0, 0, "", true
	}
	for _, in := range f.Inputs.All() {
		if !in.Finite() {
			bad = true
		}
	}
	if bad {
		f.Inputs = energy.InputList{}
	}
}
