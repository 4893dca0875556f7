package energy

import (
	"encoding/json"
	"math"
	"time"
)

// Kinds of Inputs.
const (
	// KindSpan: a meter span's counter movements, priced by the meter's rules (meter.Recompute).
	KindSpan = "span"
	// KindStage: an in-process stage's wall time × its watts (StageModel).
	KindStage = "stage"
)

// StageVersion is the version of StageModel's rule and range; a change to either changes it, so
// that a receipt is re-derived by the rule that made it.
const StageVersion = "stage-1"

// MethodStageModel names StageModel's figures.
const MethodStageModel = "stage-model"

// The CPU power model's stated range around its watts per busy core: a busy core of a desktop
// or server part draws 5–15 W around the default 10 W (its TDP over its cores, 125 W / 12 or
// 280 W / 32 at the top of the range, less with idle siblings and low clocks). A configured
// figure gets the same relative range.
const (
	CPUModelLow  = 0.5
	CPUModelHigh = 1.5
)

// Splits name how a figure's joules were split between prompt and completion.
const (
	// SplitTokenWeight: in proportion to the tokens, a prompt token weighing the meter's prompt
	// ratio of a completion token (prefill runs a prompt's tokens in parallel). An estimate.
	SplitTokenWeight = "token-weight"
)

// Inputs are the raw inputs of one metered part of a figure: what the counters moved over its
// span, the wall time, the tree's and the host's CPU time, the prices and constants used, and
// the constants' Version. Errors are kept as the reason words the rules gave them. The JSON
// encoding is part of the ledger's file format; every field but Kind and Version is omitted
// when zero.
type Inputs struct {
	Kind    string `json:"kind"`
	Version string `json:"version"`

	Local   bool  `json:"local,omitempty"`
	Overlap bool  `json:"overlap,omitempty"`
	WallNS  int64 `json:"wall_ns,omitempty"`

	PromptTokens     int     `json:"prompt_tokens,omitempty"`
	CompletionTokens int     `json:"completion_tokens,omitempty"`
	JPerPrompt       float64 `json:"j_per_prompt,omitempty"`
	JPerCompletion   float64 `json:"j_per_completion,omitempty"`
	HostJPerToken    float64 `json:"host_j_per_token,omitempty"`
	PromptRatio      float64 `json:"prompt_ratio,omitempty"`

	TreeFound bool  `json:"tree_found,omitempty"`
	TreeShort bool  `json:"tree_short,omitempty"`
	TreeCPUNS int64 `json:"tree_cpu_ns,omitempty"`
	// TreeAloneNS is the tree's CPU time while the span was its backend's only one open;
	// TreeUnionNS the tree's whole CPU time while the span was open (shared or not).
	TreeAloneNS int64 `json:"tree_alone_ns,omitempty"`
	// Marked: the span was marked at a stream's first chunk and the mark read the tree;
	// MarkCPUNS is the tree's CPU time (the span's share) up to then. MarkUnread: the span was
	// marked but the mark could not read the tree.
	Marked      bool    `json:"marked,omitempty"`
	MarkCPUNS   int64   `json:"mark_cpu_ns,omitempty"`
	MarkUnread  bool    `json:"mark_unread,omitempty"`
	TreeUnionNS int64   `json:"tree_union_ns,omitempty"`
	Split       bool    `json:"split,omitempty"`
	WallShareNS int64   `json:"wall_share_ns,omitempty"`
	ProxyCPUNS  int64   `json:"proxy_cpu_ns,omitempty"`
	HostBusyNS  int64   `json:"host_busy_ns,omitempty"`
	HostErr     string  `json:"host_err,omitempty"`
	CPUWatts    float64 `json:"cpu_watts,omitempty"`

	RAPLJoules float64 `json:"rapl_joules,omitempty"`
	RAPLErr    string  `json:"rapl_err,omitempty"`
	// RAPLGapNS is the time the counter's window ran past the span: from the Begin read to the
	// span's start plus from its end to the End read.
	RAPLGapNS  int64 `json:"rapl_gap_ns,omitempty"`
	PerProcess bool  `json:"per_process,omitempty"`

	GPUNoData   string  `json:"gpu_no_data,omitempty"`
	GPUMethod   string  `json:"gpu_method,omitempty"`
	GPUUsed     bool    `json:"gpu_used,omitempty"`
	GPUUnknown  bool    `json:"gpu_unknown,omitempty"`
	GPUErr      string  `json:"gpu_err,omitempty"`
	GPUJoules   float64 `json:"gpu_joules,omitempty"`
	GPUShare    float64 `json:"gpu_share,omitempty"`
	GPUVanished bool    `json:"gpu_vanished,omitempty"`
	GPUBusy     float64 `json:"gpu_busy,omitempty"`
	GPUWatts    float64 `json:"gpu_watts,omitempty"`
	// GPULimitW is the used boards' enforced power limits, summed, in W (meter-1 records: their
	// GPU bounds were ± one NVML period at it; meter-2 records carry GPULow and GPUHigh).
	GPULimitW float64 `json:"gpu_limit_w,omitempty"`
	// GPULow and GPUHigh: what NVML's counters moved inside the span and over the brackets
	// that hold its ends, in J. GPUSubPeriod: no counter updated inside the span.
	GPULow       float64 `json:"gpu_low,omitempty"`
	GPUHigh      float64 `json:"gpu_high,omitempty"`
	GPUSubPeriod bool    `json:"gpu_sub_period,omitempty"`
	// meter-3: Cores is how many cores the tree may run on (its CPU time over a span is capped
	// at Cores × the wall time); CPUSlackNS is what the CPU clocks' tick quantisation can move
	// the tree's CPU time (a tick per process read, each end). GPULimitW is then the used boards'
	// enforced power limits, summed (the GPU part's ceiling is 1.5 × it × the wall time).
	// GPUProvisional: NVML's counter had not updated past the span's end when the figure was
	// made; its GPU part since the last update is instant power × time.
	Cores          float64 `json:"cores,omitempty"`
	CPUSlackNS     int64   `json:"cpu_slack_ns,omitempty"`
	GPUProvisional bool    `json:"gpu_provisional,omitempty"`

	// A stage's watts and the reason its figure carries.
	Watts  float64 `json:"watts,omitempty"`
	Reason string  `json:"reason,omitempty"`
}

// Finite reports whether every number of in is finite, as JSON needs.
func (in *Inputs) Finite() bool {
	for _, f := range [...]float64{in.JPerPrompt, in.JPerCompletion, in.HostJPerToken, in.PromptRatio, in.CPUWatts,
		in.RAPLJoules, in.GPUJoules, in.GPUShare, in.GPUBusy, in.GPUWatts, in.GPULimitW, in.GPULow, in.GPUHigh, in.Watts, in.Cores} {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return false
		}
	}
	return true
}

// InputList is a figure's inputs, in order. It is immutable once made, so Figures that share
// one stay comparable and safe to copy; the zero value is empty.
type InputList struct{ p *[]Inputs }

// ListOf returns a list of ins (copied), in one allocation.
func ListOf(ins ...Inputs) InputList {
	switch len(ins) {
	case 0:
		return InputList{}
	case 1:
		return One(ins[0])
	}
	s := append([]Inputs(nil), ins...)
	return InputList{p: &s}
}

// One returns a list of one input, in one allocation (a span's, on every call).
func One(in Inputs) InputList { return OneIn(new(InputBox), in) }

// InputBox is the storage of a list of one input, for a caller that holds it inside an
// allocation it makes anyway (OneIn).
type InputBox struct {
	s   []Inputs
	one [1]Inputs
}

// OneIn is One with the list held in box, which must not be used for another list: the list is
// immutable, and every figure made with it shares box.
func OneIn(box *InputBox, in Inputs) InputList {
	box.one[0] = in
	box.s = box.one[:]
	return InputList{p: &box.s}
}

// All returns the inputs; the slice must not be modified.
func (l InputList) All() []Inputs {
	if l.p == nil {
		return nil
	}
	return *l.p
}

// Len is the number of inputs.
func (l InputList) Len() int { return len(l.All()) }

// IsZero reports whether the list is empty (the ledger omits it then).
func (l InputList) IsZero() bool { return l.Len() == 0 }

func (l InputList) concat(m InputList) InputList {
	switch {
	case m.IsZero():
		return l
	case l.IsZero():
		return m
	}
	s := make([]Inputs, 0, l.Len()+m.Len())
	s = append(append(s, l.All()...), m.All()...)
	return InputList{p: &s}
}

// MarshalJSON encodes the list as an array.
func (l InputList) MarshalJSON() ([]byte, error) {
	if l.IsZero() {
		return []byte("[]"), nil
	}
	return json.Marshal(l.All())
}

// UnmarshalJSON decodes an array of inputs.
func (l *InputList) UnmarshalJSON(b []byte) error {
	var s []Inputs
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*l = ListOf(s...)
	return nil
}

// StageModel is the stated model for in-process stages (cache, kv, graph): wall time × watts,
// an estimate of whole coverage. Its bounds are 0 (the stage may have waited rather than
// computed) to CPUModelHigh × the figure (a core at the top of the per-core range). reason is
// the figure's reason.
func StageModel(took time.Duration, watts float64, reason string) Figure {
	return StageModelIn(new(InputBox), took, watts, reason)
}

// StageModelIn is StageModel with the figure's inputs held in box (OneIn), which must not be used
// again.
func StageModelIn(box *InputBox, took time.Duration, watts float64, reason string) Figure {
	j := took.Seconds() * watts
	return Figure{
		Joules:   j,
		Grade:    Estimated,
		Coverage: CoverageWhole,
		Method:   MethodStageModel,
		Reason:   reason,
		Low:      0,
		High:     j * CPUModelHigh,
		Inputs:   OneIn(box, Inputs{Kind: KindStage, Version: StageVersion, WallNS: int64(took), Watts: watts, Reason: reason}),
	}
}

// SplitTokens returns f with its joules split between its prompt and completion tokens in
// proportion to the tokens, a prompt token weighing ratio of a completion token (SplitTokenWeight).
// A figure with no tokens is returned unsplit.
func SplitTokens(f Figure, prompt, completion int, ratio float64) Figure {
	w := float64(completion) + ratio*float64(prompt)
	if prompt < 0 || completion < 0 || !(w > 0) {
		return f
	}
	f.PromptTokens, f.CompletionTokens = prompt, completion
	f.PromptJoules = f.Joules * ratio * float64(prompt) / w
	f.CompletionJoules = f.Joules - f.PromptJoules
	f.Split = SplitTokenWeight
	return f
}

// PerToken returns the figure's joules per prompt token and per completion token; each is 0
// when the figure has no such tokens.
func (f Figure) PerToken() (prompt, completion float64) {
	if f.PromptTokens > 0 {
		prompt = f.PromptJoules / float64(f.PromptTokens)
	}
	if f.CompletionTokens > 0 {
		completion = f.CompletionJoules / float64(f.CompletionTokens)
	}
	return prompt, completion
}
