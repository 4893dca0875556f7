// Package energy is the one shape of what a call cost: the meter computes a Figure, the cascade's
// Answer carries it, the proxy renders it (headers, trailers, the eoc chunk), and the ledger
// stores it.
//
// A Receipt vouches for one Figure and hashes it. The package is a leaf: it imports nothing of
// the project's.
package energy

import (
	"math"
	"strings"
)

// Grade says whether a figure was measured by hardware counters or estimated from a model.
type Grade string

// Grades. The zero Grade means "not computed".
const (
	Measured  Grade = "measured"
	Estimated Grade = "estimated"
)

// Coverages of a Figure.
const (
	CoverageWhole   = "whole"   // every part of the work has a figure
	CoveragePartial = "partial" // a part (e.g. a shared GPU) could not be attributed
)

// Figure is what one piece of work cost. The zero value means "not computed" (IsZero).
//
// The JSON encoding is the ledger's: the field names and their order are part of its file
// format. CPUJoules and GPUJoules are the meter's breakdown and are not stored.
type Figure struct {
	Joules float64 `json:"joules"`
	// Saved is what the original answer cost, for answers served by a memoizing stage.
	Saved    float64 `json:"joules_saved"`
	Grade    Grade   `json:"grade"`
	Coverage string  `json:"coverage"` // CoverageWhole or CoveragePartial
	// Method names how the figure was obtained: rapl+nvml, rapl, nvml-zero-gpu, cpu-time-model,
	// token-model, stage-model, ...; parts are joined with "+".
	Method string `json:"method"`
	// Reason says why the figure is not measured, or not whole, in stable words joined by ";";
	// "" when it is measured and whole.
	Reason string `json:"reason"`

	// Low and High bound Joules: Low ≤ Joules ≤ High always (see meter/README.md for what each
	// part's bound is). Both are 0 for a zero figure, and equal to Joules only where the figure
	// is exact (an exact GPU zero, nothing computed).
	Low  float64 `json:"joules_low,omitempty"`
	High float64 `json:"joules_high,omitempty"`
	// PromptJoules and CompletionJoules split Joules between the prompt (prefill) and the
	// completion (decode) over PromptTokens and CompletionTokens, the tokens the figure's work
	// processed; Split says how the split was made (SplitTokenWeight, …). All zero when the
	// work reported no tokens.
	PromptJoules     float64 `json:"joules_prompt,omitempty"`
	CompletionJoules float64 `json:"joules_completion,omitempty"`
	PromptTokens     int     `json:"prompt_tokens,omitempty"`
	CompletionTokens int     `json:"completion_tokens,omitempty"`
	Split            string  `json:"split,omitempty"`
	// Inputs are the raw inputs of each metered part, in the order Plus added them, from which
	// the figure can be derived again (meter.Recompute). Empty for figures made before they
	// were recorded.
	Inputs InputList `json:"inputs,omitzero"`
	// Provisional marks a figure made before its counters settled: NVML's energy counter had not
	// yet updated past the span's end, so the GPU part since its last update is instant power ×
	// time, with Low and High that hold the settled figure. The settled figure (Provisional false)
	// follows from meter.Span.Settled. False for every figure that is final when made.
	Provisional bool `json:"provisional,omitempty"`

	CPUJoules float64 `json:"-"`
	GPUJoules float64 `json:"-"`
}

// IsZero reports whether the figure was never computed.
func (f Figure) IsZero() bool { return f.Grade == "" }

// Measured reports whether the figure is measured.
func (f Figure) Measured() bool { return f.Grade == Measured }

// Plus is the figure of two pieces of work done for one call (an embedding and the answer it
// found, a failed attempt and the next): the joules add up, the grade and coverage are the
// weaker of the two, and methods and reasons are joined without repeats. The bounds, the prompt
// and completion parts and the tokens add up; the inputs are listed f's first. A zero figure
// adds nothing. Saved is kept from f, else g.
func (f Figure) Plus(g Figure) Figure {
	switch {
	case g.IsZero():
		return f
	case f.IsZero():
		return g
	}
	out := Figure{
		Joules:           f.Joules + g.Joules,
		Saved:            f.Saved,
		Grade:            Measured,
		Coverage:         CoverageWhole,
		Method:           join(f.Method, g.Method, "+"),
		Reason:           join(f.Reason, g.Reason, ";"),
		Low:              f.Low + g.Low,
		High:             f.High + g.High,
		PromptJoules:     f.PromptJoules + g.PromptJoules,
		CompletionJoules: f.CompletionJoules + g.CompletionJoules,
		PromptTokens:     f.PromptTokens + g.PromptTokens,
		CompletionTokens: f.CompletionTokens + g.CompletionTokens,
		Split:            join(f.Split, g.Split, "+"),
		Inputs:           f.Inputs.concat(g.Inputs),
		CPUJoules:        f.CPUJoules + g.CPUJoules,
		GPUJoules:        f.GPUJoules + g.GPUJoules,
		Provisional:      f.Provisional || g.Provisional,
	}
	if out.Saved == 0 {
		out.Saved = g.Saved
	}
	if f.Grade != Measured || g.Grade != Measured {
		out.Grade = Estimated
	}
	if f.Coverage == CoveragePartial || g.Coverage == CoveragePartial {
		out.Coverage = CoveragePartial
	}
	return out
}

// join joins the sep-separated words of a and b, each once, in order of first appearance.
func join(a, b, sep string) string {
	switch {
	case b == "" || a == b:
		return a
	case a == "":
		return b
	}
	words := strings.Split(a, sep)
	for _, w := range strings.Split(b, sep) {
		if w != "" && !contains(words, w) {
			words = append(words, w)
		}
	}
	return strings.Join(words, sep)
}

func contains(ws []string, w string) bool {
	for _, x := range ws {
		if x == w {
			return true
		}
	}
	return false
}

// Rounded returns the figure with its joules rounded to nanojoules. Nanojoules are finer than
// any counter: rounding once keeps float noise out, so the header, the receipt, the ledger and
// the metrics carry the same number.
func (f Figure) Rounded() Figure {
	f.Joules = RoundNano(f.Joules)
	f.Saved = RoundNano(f.Saved)
	f.Low, f.High = RoundNano(f.Low), RoundNano(f.High) // rounding keeps Low ≤ Joules ≤ High
	f.PromptJoules, f.CompletionJoules = RoundNano(f.PromptJoules), RoundNano(f.CompletionJoules)
	f.CPUJoules = RoundNano(f.CPUJoules)
	f.GPUJoules = RoundNano(f.GPUJoules)
	return f
}

// RoundNano rounds joules to nanojoules.
func RoundNano(j float64) float64 { return math.Round(j*1e9) / 1e9 }

// View is a figure's fields as the JSON bodies that show one carry them (the calls endpoint,
// `eoc-proxy query -json`, the browser build's results): the same names as the X-EOC headers'.
type View struct {
	Joules     float64 `json:"joules"`
	JoulesLow  float64 `json:"joules_low"`
	JoulesHigh float64 `json:"joules_high"`
	Grade      string  `json:"grade"`
	Coverage   string  `json:"coverage"`
	Method     string  `json:"method"`
	Reason     string  `json:"reason"`
}

// View returns f's JSON view.
func (f Figure) View() View {
	return View{Joules: f.Joules, JoulesLow: f.Low, JoulesHigh: f.High, Grade: string(f.Grade), Coverage: f.Coverage,
		Method: f.Method, Reason: f.Reason}
}
