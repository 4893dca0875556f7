package ledger

import (
	"encoding/json"
	"fmt"
	"strconv"
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
		// (fields in order, floats in shortest round-trip decimal). checkFigure made sure it
		// encodes.
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

// checkFigure refuses a figure whose bounds, split or inputs cannot be written as JSON.
func checkFigure(r *Record) error {
	f := &r.Figure
	for _, x := range []float64{f.Low, f.High, f.PromptJoules, f.CompletionJoules} {
		if !finite(x) {
			return fmt.Errorf("%w: bounds [%v, %v] or split %v+%v are not finite", ErrInvalid, f.Low, f.High, f.PromptJoules, f.CompletionJoules)
		}
	}
	for i, in := range f.Inputs.All() {
		if !in.Finite() {
			return fmt.Errorf("%w: inputs %d hold a number that is not finite", ErrInvalid, i)
		}
	}
	return nil
}
