package meter

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// finish turns a closed span's sample into its Figure by way of its recorded inputs: the sample
// is written down as energy.Inputs, and the figure is what the rules make of those, split
// between prompt and completion, with the inputs attached. So a receipt's figure is, by
// construction, the one Recompute derives from its ledger record.
func finish(s spanSample) energy.Figure {
	in := toInputs(s)
	if !in.Finite() {
		// Not recordable (JSON has no NaN): the figure stands without its inputs.
		f := attribute(s)
		return energy.SplitTokens(f, s.PromptTokens, s.CompletionTokens, DefaultPromptRatio)
	}
	f, _ := spanFigure(in) // the version is this build's
	return f
}

// spanFigure is the figure of one span's inputs: the rules, the token split, the inputs.
func spanFigure(in energy.Inputs) (energy.Figure, error) {
	// meter-2 added the NVML counters' bounds and sub-period spans, each keyed on inputs that
	// meter-1 did not record: meter-1's figures come out as they did.
	// meter-3 caps the CPU time at the cores' and every GPU part at the boards' ceiling, widens
	// the CPU bounds by the clocks' ticks, and makes provisional GPU figures: meter-2's figures,
	// which recorded none of that, come out as they did.
	legacy, ok := legacyOf(in.Version)
	if !ok {
		return energy.Figure{}, fmt.Errorf("inputs made under constants %q; this build has %q", in.Version, ConstantsVersion)
	}
	s := fromInputs(in)
	s.Legacy = legacy
	f := attribute(s)
	f = splitParts(f, in)
	f.Inputs = energy.One(in)
	return f, nil
}

// legacyOf is the rules' generation of each constants version this build recomputes (a switch,
// not a map: every span's figure asks it, and a map's lookup hashes the string).
func legacyOf(version string) (int, bool) {
	switch version {
	case ConstantsVersion:
		return 0, true
	case "meter-1":
		return 1, true
	case "meter-2":
		return 2, true
	}
	return 0, false
}

// cpuNoData names a missing CPU counter's reason.
func cpuNoData(perProcess bool) string {
	if perProcess {
		return ReasonNoProcEnergy
	}
	return ReasonNoRAPL
}

// toInputs writes a sample down: durations in ns, errors as the reason words the rules give them.
func toInputs(s spanSample) energy.Inputs {
	return energy.Inputs{
		Kind: energy.KindSpan, Version: ConstantsVersion,
		Local: s.Local, Overlap: s.Overlap, WallNS: int64(s.Wall),
		PromptTokens: s.PromptTokens, CompletionTokens: s.CompletionTokens,
		JPerPrompt: s.JPerPrompt, JPerCompletion: s.JPerCompletion, HostJPerToken: s.HostJPerToken,
		PromptRatio: DefaultPromptRatio,
		TreeFound:   s.TreeFound, TreeShort: s.TreeShort, TreeCPUNS: int64(s.TreeCPU),
		TreeAloneNS: int64(s.TreeAlone), TreeUnionNS: int64(s.TreeUnion), Marked: s.Marked, MarkCPUNS: int64(s.MarkCPU), MarkUnread: s.MarkUnread,
		Split: s.Split, WallShareNS: int64(s.WallShare), ProxyCPUNS: int64(s.ProxyCPU), HostBusyNS: int64(s.HostBusy),
		HostErr: reasonFor(s.HostErr, ReasonCounterError), CPUWatts: s.CPUWatts,
		RAPLJoules: s.RAPLJoules, RAPLErr: reasonFor(s.RAPLErr, cpuNoData(s.PerProcess)), RAPLGapNS: int64(s.RAPLGap),
		PerProcess: s.PerProcess,
		GPUNoData:  s.GPUNoData, GPUMethod: s.GPUMethod, GPUUsed: s.GPUUsed, GPUUnknown: s.GPUUnknown,
		GPUErr:    reasonFor(s.GPUErr, cmp.Or(s.GPUNoData, ReasonNoNVML)),
		GPUJoules: s.GPUJoules, GPUShare: s.GPUShare, GPUVanished: s.GPUVanished, GPUBusy: s.GPUBusy,
		GPUWatts: s.GPUWatts, GPULimitW: s.GPULimitW, GPULow: s.GPULow, GPUHigh: s.GPUHigh, GPUSubPeriod: s.GPUSubPeriod,
		GPUProvisional: s.GPUProvisional, Cores: s.Cores, CPUSlackNS: int64(s.CPUSlack),
	}
}

// reasonError is an error read back from inputs: reasonFor gives its word back.
type reasonError string

func (e reasonError) Error() string { return "meter: recorded reason " + string(e) }

// errOf is the error a recorded reason word stands for. The words a counter's state gives every
// span of a host (no-rapl, no-nvml, ...) come boxed once: boxing a word allocates.
func errOf(reason string) error {
	switch reason {
	case "":
		return nil
	case ReasonNoRAPL:
		return reasonError(ReasonNoRAPL)
	case ReasonNoNVML:
		return reasonError(ReasonNoNVML)
	case ReasonNoProcEnergy:
		return reasonError(ReasonNoProcEnergy)
	case ReasonNoGPURail:
		return reasonError(ReasonNoGPURail)
	case ReasonCounterDead:
		return reasonError(ReasonCounterDead)
	case ReasonPermission:
		return reasonError(ReasonPermission)
	}
	return reasonError(reason)
}

// fromInputs reads a sample back from its inputs.
func fromInputs(in energy.Inputs) spanSample {
	return spanSample{
		Local: in.Local, Overlap: in.Overlap, Wall: time.Duration(in.WallNS),
		PromptTokens: in.PromptTokens, CompletionTokens: in.CompletionTokens,
		JPerPrompt: in.JPerPrompt, JPerCompletion: in.JPerCompletion, HostJPerToken: in.HostJPerToken,
		TreeFound: in.TreeFound, TreeShort: in.TreeShort, TreeCPU: time.Duration(in.TreeCPUNS),
		TreeAlone: time.Duration(in.TreeAloneNS), TreeUnion: time.Duration(in.TreeUnionNS),
		Marked: in.Marked, MarkCPU: time.Duration(in.MarkCPUNS), MarkUnread: in.MarkUnread,
		Split: in.Split, WallShare: time.Duration(in.WallShareNS), ProxyCPU: time.Duration(in.ProxyCPUNS),
		HostBusy: time.Duration(in.HostBusyNS), HostErr: errOf(in.HostErr), CPUWatts: in.CPUWatts,
		RAPLJoules: in.RAPLJoules, RAPLErr: errOf(in.RAPLErr), RAPLGap: time.Duration(in.RAPLGapNS),
		PerProcess: in.PerProcess,
		GPUNoData:  in.GPUNoData, GPUMethod: in.GPUMethod, GPUUsed: in.GPUUsed, GPUUnknown: in.GPUUnknown,
		GPUErr: errOf(in.GPUErr), GPUJoules: in.GPUJoules, GPUShare: in.GPUShare, GPUVanished: in.GPUVanished,
		GPUBusy: in.GPUBusy, GPUWatts: in.GPUWatts, GPULimitW: in.GPULimitW,
		GPULow: in.GPULow, GPUHigh: in.GPUHigh, GPUSubPeriod: in.GPUSubPeriod,
		GPUProvisional: in.GPUProvisional, Cores: in.Cores, CPUSlack: time.Duration(in.CPUSlackNS),
	}
}

// ErrNoInputs says a figure has no recorded inputs (a ledger line from before they were kept):
// it cannot be re-derived, which is not a disagreement.
var ErrNoInputs = errors.New("meter: the figure has no recorded inputs")

// Recompute derives a figure again from its recorded inputs, as the proxy made it: each part
// by its rule (a span's by the meter's, a stage's by energy.StageModel), added up in order. It
// is a pure function. It fails with ErrNoInputs when f has none, and when an input is of a
// kind or constants version this build does not know.
func Recompute(f energy.Figure) (energy.Figure, error) {
	ins := f.Inputs.All()
	if len(ins) == 0 {
		return energy.Figure{}, ErrNoInputs
	}
	var out energy.Figure
	for i, in := range ins {
		var part energy.Figure
		switch in.Kind {
		case energy.KindSpan:
			var err error
			if part, err = spanFigure(in); err != nil {
				return energy.Figure{}, fmt.Errorf("input %d: %w", i, err)
			}
		case energy.KindStage:
			if in.Version != energy.StageVersion {
				return energy.Figure{}, fmt.Errorf("input %d: stage inputs made under %q; this build has %q", i, in.Version, energy.StageVersion)
			}
			part = energy.StageModel(time.Duration(in.WallNS), in.Watts, in.Reason)
		default:
			return energy.Figure{}, fmt.Errorf("input %d: unknown kind %q", i, in.Kind)
		}
		out = out.Plus(part)
	}
	return out, nil
}

// How far a recorded joule figure may lie from the one derived again: the
// record's nanojoule rounding, and float sums made in another order.
const (
	recomputeAbs = 2e-9
	recomputeRel = 1e-12
)

// Disagreement compares a recorded figure with the one Recompute derived from its inputs and
// says where they differ ("" when they agree): joules, bounds and the prompt/completion split
// within rounding; grade, coverage, method, reason, split and tokens exactly. Saved is not
// compared: it is a running mean of other calls, not this call's inputs.
func Disagreement(recorded, derived energy.Figure) string {
	for _, c := range []struct {
		name string
		a, b float64
	}{
		{"joules", recorded.Joules, derived.Joules},
		{"joules_low", recorded.Low, derived.Low},
		{"joules_high", recorded.High, derived.High},
		{"joules_prompt", recorded.PromptJoules, derived.PromptJoules},
		{"joules_completion", recorded.CompletionJoules, derived.CompletionJoules},
	} {
		if !closeEnough(c.a, c.b) {
			return fmt.Sprintf("%s is %v, its inputs give %v", c.name, c.a, energy.RoundNano(c.b))
		}
	}
	for _, c := range []struct{ name, a, b string }{
		{"grade", string(recorded.Grade), string(derived.Grade)},
		{"coverage", recorded.Coverage, derived.Coverage},
		{"method", recorded.Method, derived.Method},
		{"reason", recorded.Reason, derived.Reason},
		{"split", recorded.Split, derived.Split},
	} {
		if c.a != c.b {
			return fmt.Sprintf("%s is %q, its inputs give %q", c.name, c.a, c.b)
		}
	}
	if recorded.PromptTokens != derived.PromptTokens || recorded.CompletionTokens != derived.CompletionTokens {
		return fmt.Sprintf("tokens are %d+%d, its inputs give %d+%d", recorded.PromptTokens, recorded.CompletionTokens,
			derived.PromptTokens, derived.CompletionTokens)
	}
	return ""
}

func closeEnough(a, b float64) bool {
	return math.Abs(a-b) <= recomputeAbs+recomputeRel*math.Max(math.Abs(a), math.Abs(b))
}
