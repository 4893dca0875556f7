package meter

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// checkBounds fails unless 0 ≤ Low ≤ Joules ≤ High.
func checkBounds(t *testing.T, f energy.Figure) {
	t.Helper()
	if !(0 <= f.Low && f.Low <= f.Joules && f.Joules <= f.High) {
		t.Fatalf("bounds broken: low %v, joules %v, high %v (%s, %s)", f.Low, f.Joules, f.High, f.Method, f.Reason)
	}
}

func nearJ(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestBoundsValues states each part's bound (meter/README.md, "Bounds").
func TestBoundsValues(t *testing.T) {
	tokens := 100*0.4 + 50*4.0
	tests := []struct {
		name      string
		edit      func(*spanSample)
		low, high float64
	}{
		{"meter-1: rapl and nvml: read gap and one NVML period at the board limit", func(s *spanSample) {
			s.RAPLGap = 8 * time.Millisecond
			s.GPULimitW, s.Legacy = 350, 1
		},
			// RAPL: 120 J over 2.008 s; slack (gap + 2 updates) low, 2 updates high. NVML ±0.1 s × 350 W.
			120 - 0.010*120/2.008 + 400 - 35, 120 + 0.002*120/2.008 + 400 + 35},
		{"nvml with the counters' bounds: inside the span to around it", func(s *spanSample) {
			s.GPULow, s.GPUHigh, s.GPULimitW = 380, 430, 350
		},
			120 - 0.002*120/2 + 380, 120 + 0.002*120/2 + 430},
		{"meter-1: nvml without a known limit: the GPU watts", func(s *spanSample) { s.Legacy = 1 },
			120 - 0.002*120/2 + 400 - 30, 120 + 0.002*120/2 + 400 + 30},
		{"cpu time model: 5-15 W a core", func(s *spanSample) { s.RAPLErr = ErrNoData; s.GPUUsed = false },
			15, 45},
		{"cpu time model: a tick per process read either side", func(s *spanSample) {
			s.RAPLErr, s.GPUUsed, s.Cores, s.CPUSlack = ErrNoData, false, 4, 20*time.Millisecond
		}, 2.98 * 5, 3.02 * 15},
		{"cpu time model: capped at the cores × the wall time, bounds too", func(s *spanSample) {
			s.RAPLErr, s.GPUUsed, s.Cores, s.CPUSlack = ErrNoData, false, 1, 20*time.Millisecond
		}, 1.98 * 5, 2 * 15},
		{"nvml: no part above 1.5 × the limit × the wall time", func(s *spanSample) {
			s.RAPLErr, s.GPULimitW, s.GPULow, s.GPUHigh, s.GPUJoules = ErrNoData, 100, 250, 400, 350
		}, 15 + 250, 45 + 300},
		{"cpu time share: alone × low W to union × high W", func(s *spanSample) {
			s.RAPLErr, s.GPUUsed, s.Overlap, s.Split = ErrNoData, false, true, true
			s.TreeAlone, s.TreeUnion = time.Second, 5*time.Second
		}, 5, 75},
		{"token model: ML.ENERGY's spread", func(s *spanSample) { s.Local = false },
			tokens * 0.070 / 0.455, tokens * 4.35 / 0.455},
		{"gpu power model: a quarter to 700 W", func(s *spanSample) { s.GPUErr = ErrNoData; s.GPUBusy = 0 },
			120 - 0.002*120/2 + 600*0.25, 120 + 0.002*120/2 + 600*700/300},
		{"exact GPU zero adds no width", func(s *spanSample) { s.GPUUsed = false },
			120 - 0.002*120/2, 120 + 0.002*120/2},
		{"a partial GPU adds nothing", func(s *spanSample) { s.GPUShare = 0.5 },
			120 - 0.002*120/2, 120 + 0.002*120/2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := good()
			tc.edit(&s)
			f := attribute(s)
			checkBounds(t, f)
			if !nearJ(f.Low, tc.low) || !nearJ(f.High, tc.high) {
				t.Fatalf("bounds [%v, %v] of %v J, want [%v, %v]", f.Low, f.High, f.Joules, tc.low, tc.high)
			}
		})
	}
}

// randomSample draws a sample over every switch the rules read.
func randomSample(r *rand.Rand) spanSample {
	d := func(max time.Duration) time.Duration { return time.Duration(r.Int64N(int64(max))) }
	pick := func(errs ...error) error { return errs[r.IntN(len(errs))] }
	s := spanSample{
		Local: r.IntN(5) > 0, Overlap: r.IntN(3) == 0, Wall: d(5 * time.Second),
		PromptTokens: r.IntN(2000), CompletionTokens: r.IntN(500), JPerPrompt: r.Float64(), JPerCompletion: 5 * r.Float64(),
		HostJPerToken: float64(r.IntN(2)) * r.Float64(),
		TreeFound:     r.IntN(6) > 0, TreeShort: r.IntN(6) == 0, TreeCPU: d(8 * time.Second),
		Split: r.IntN(3) == 0, WallShare: d(5 * time.Second), TreeAlone: d(8 * time.Second), TreeUnion: d(16 * time.Second),
		ProxyCPU: d(time.Second), HostBusy: d(10 * time.Second), HostErr: pick(nil, nil, nil, errors.New("x")),
		CPUWatts: 1 + 20*r.Float64(), Cores: 0.5 + 15.5*r.Float64(), CPUSlack: time.Duration(r.IntN(8)) * 10 * time.Millisecond, RAPLErr: pick(nil, nil, ErrNoData, ErrCounterWrap, errCounterDead), RAPLGap: d(20 * time.Millisecond),
		PerProcess: r.IntN(5) == 0,
		GPUUsed:    r.IntN(2) == 0, GPUUnknown: r.IntN(4) == 0, GPUErr: pick(nil, nil, ErrNoData, fmt.Errorf("%w", ErrCounterStale)),
		GPUJoules: 1000 * r.Float64(), GPUShare: r.Float64() + 0.05, GPUVanished: r.IntN(6) == 0, GPUBusy: 2 * r.Float64(),
		GPUWatts: 50 + 600*r.Float64(), GPULimitW: float64(r.IntN(2)) * 700, GPUSubPeriod: r.IntN(4) == 0,
		GPUProvisional: r.IntN(4) == 0,
	}
	// A RAPL delta is at most what its zone can count (the reader refuses more: raplMaxWatts).
	s.RAPLJoules = raplMaxWatts * s.Wall.Seconds() * r.Float64()
	if r.IntN(2) == 0 {
		s.GPULow, s.GPUHigh = s.GPUJoules*r.Float64(), s.GPUJoules*(1+r.Float64())
	}
	if r.IntN(5) == 0 {
		s.RAPLJoules = 0
	}
	return s
}

// checkPhysics fails when a figure, its Low or its High is above what the hardware can draw
// over the span: the tree's cores at the CPU model's top watts per core (a RAPL zone at what it
// can count), and each used GPU at 1.5 × its enforced power limit (gpuMaxWatts a GPU when the
// limit is not known). Token-model figures price work elsewhere: no hardware here bounds them.
func checkPhysics(t *testing.T, s spanSample, f energy.Figure) {
	t.Helper()
	if strings.Contains(f.Method, "token-model") {
		return
	}
	wall := s.Wall.Seconds()
	cpu := raplMaxWatts * (wall + 0.002)
	if strings.HasPrefix(f.Method, MethodCPUTimeModel) || strings.HasPrefix(f.Method, MethodCPUTimeShare) {
		cpu = s.Cores * wall * s.CPUWatts * energy.CPUModelHigh
	}
	gpu := 0.0
	// A pending figure (no process list read yet) has no GPU part, but its High holds what the
	// boards can draw.
	if strings.Contains(f.Method, "+") || strings.Contains(f.Reason, ReasonGPUPending) {
		gpu = 1.5 * s.GPULimitW * wall
		if s.GPULimitW == 0 {
			gpu = gpuMaxWatts * math.Max(1, math.Ceil(s.GPUBusy)) * wall
		}
	}
	if most := (cpu + gpu) * (1 + 1e-9); f.Joules > most || f.Low > most || f.High > most {
		t.Fatalf("above what the hardware can draw (%v J over %v): %v J in [%v, %v] (%s; %d cores)", most, s.Wall, f.Joules, f.Low, f.High, f.Method, int(s.Cores))
	}
}

// TestBoundsProperty: every figure the rules can make has 0 ≤ Low ≤ Joules ≤ High, sums of
// figures keep it, and a sample read back from its inputs gives the same figure.
func TestBoundsProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 5))
	var sum energy.Figure
	for i := range 20000 {
		s := randomSample(r)
		f := finish(s)
		checkBounds(t, f)
		checkPhysics(t, s, f)
		if a := attribute(s); !closeFigure(a, f) || a.Low != f.Low || a.High != f.High {
			t.Fatalf("sample %d: from inputs %+v, from the sample %+v", i, f, a)
		}
		if w := float64(s.CompletionTokens) + 0.1*float64(s.PromptTokens); w > 0 && !nearJ(f.PromptJoules, f.Joules*0.1*float64(s.PromptTokens)/w) {
			t.Fatalf("sample %d: prompt part %v of %v J for %d+%d tokens; a prompt token weighs a tenth", i, f.PromptJoules, f.Joules, s.PromptTokens, s.CompletionTokens)
		}
		if f.PromptTokens+f.CompletionTokens > 0 && !nearJ(f.PromptJoules+f.CompletionJoules, f.Joules) {
			t.Fatalf("sample %d: split %v + %v of %v J", i, f.PromptJoules, f.CompletionJoules, f.Joules)
		}
		f.Inputs = energy.InputList{} // the sum's inputs would grow quadratically
		sum = sum.Plus(f)
		checkBounds(t, sum)
		checkBounds(t, sum.Rounded())
	}
}

// TestRecompute: a span's figure is derived again from its recorded inputs, an edited figure
// disagrees, and inputs of unknown constants or kind fail.
func TestRecompute(t *testing.T) {
	s := good()
	s.RAPLGap, s.GPULimitW = 3*time.Millisecond, 400
	f := finish(s).Plus(energy.StageModel(3*time.Millisecond, 10, "in-process-stage")).Plus(finish(randomSample(rand.New(rand.NewPCG(1, 2)))))
	f = f.Rounded()
	if f.Inputs.Len() != 3 {
		t.Fatalf("%d inputs, want 3", f.Inputs.Len())
	}
	got, err := Recompute(f)
	if err != nil {
		t.Fatal(err)
	}
	if d := Disagreement(f, got); d != "" {
		t.Fatalf("recorded figure disagrees with its inputs: %s", d)
	}
	edits := map[string]func(*energy.Figure){
		"joules":      func(f *energy.Figure) { f.Joules += 1e-6 },
		"low":         func(f *energy.Figure) { f.Low *= 0.999 },
		"high":        func(f *energy.Figure) { f.High *= 1.001 },
		"grade":       func(f *energy.Figure) { f.Grade = energy.Measured },
		"method":      func(f *energy.Figure) { f.Method = "rapl" },
		"reason":      func(f *energy.Figure) { f.Reason = "" },
		"prompt part": func(f *energy.Figure) { f.PromptJoules += 1 },
	}
	for name, edit := range edits {
		e := f
		edit(&e)
		if Disagreement(e, got) == "" {
			t.Errorf("%s edited: no disagreement", name)
		}
	}
	// Rounding to nanojoules is not a disagreement.
	e := f
	e.Joules = energy.RoundNano(e.Joules + 4e-10)
	if d := Disagreement(e, got); d != "" {
		t.Errorf("rounding: %s", d)
	}

	if _, err := Recompute(energy.Figure{Joules: 1}); !errors.Is(err, ErrNoInputs) {
		t.Errorf("no inputs: %v", err)
	}
	in := toInputs(s)
	// A meter-1 record (before NVML's brackets: no counter bounds, no sub-period) still
	// recomputes as it was made, with the period slack.
	in.Version = "meter-1"
	old, err := Recompute(energy.Figure{Inputs: energy.ListOf(in)})
	s1 := s
	s1.Legacy = 1
	if err != nil || !nearJ(old.High, attribute(s1).High) || nearJ(old.High, finish(s).High) {
		t.Errorf("a meter-1 record: %+v, %v", old, err)
	}
	// A meter-2 record (no cores, no ceiling, no provisional figures) recomputes as made.
	in.Version = "meter-2"
	two, err := Recompute(energy.Figure{Inputs: energy.ListOf(in)})
	s2 := s
	s2.Legacy = 2
	if err != nil || !nearJ(two.High, attribute(s2).High) || nearJ(two.High, finish(s).High) {
		t.Errorf("a meter-2 record: %+v, %v", two, err)
	}
	in.Version = "meter-0"
	if _, err := Recompute(energy.Figure{Inputs: energy.ListOf(in)}); err == nil {
		t.Error("unknown constants version accepted")
	}
	in.Version, in.Kind = ConstantsVersion, "magic"
	if _, err := Recompute(energy.Figure{Inputs: energy.ListOf(in)}); err == nil {
		t.Error("unknown kind accepted")
	}
}

// TestPhaseSplit: a span marked at a stream's first chunk splits its figure between prompt and
// completion by the tree's CPU time before and after the mark; a phase that moved nothing, or
// a GPU part, says why the split fell back to token weight. Either way the inputs re-derive it.
func TestPhaseSplit(t *testing.T) {
	m, _ := cpuFixtureMeter(t, func(o *Options) { o.RAPL = "off" })
	s := m.Begin("ollama")
	cpuWork(t, m, 1, 10)
	s.Mark()
	cpuWork(t, m, 3, 30)
	s.Mark() // only the first counts
	f := s.End(Work{PromptTokens: 100, CompletionTokens: 10})
	if f.Split != SplitPhases || !nearJ(f.PromptJoules, f.Joules/4) || !nearJ(f.CompletionJoules, f.Joules*3/4) {
		t.Fatalf("marked span: split %q, %v + %v of %v J; want a quarter for the prompt", f.Split, f.PromptJoules, f.CompletionJoules, f.Joules)
	}
	if d, err := Recompute(f); err != nil || Disagreement(f, d) != "" {
		t.Fatalf("recompute: %v %s", err, Disagreement(f, d))
	}
	p, c := f.PerToken()
	if !nearJ(p, f.Joules/4/100) || !nearJ(c, f.Joules*3/4/10) {
		t.Fatalf("per token %v, %v", p, c)
	}

	s = m.Begin("ollama")
	s.Mark() // no CPU time before the first chunk
	cpuWork(t, m, 1, 10)
	f = s.End(Work{PromptTokens: 100, CompletionTokens: 10})
	if f.Split != energy.SplitTokenWeight+":"+PhaseTooShort {
		t.Fatalf("empty prefill phase: split %q", f.Split)
	}

	in := toInputs(good())
	in.Marked, in.MarkCPUNS = true, int64(time.Second)
	if f := splitParts(attribute(fromInputs(in)), in); f.Split != energy.SplitTokenWeight+":"+PhaseGPU {
		t.Fatalf("a figure with a GPU part: split %q", f.Split)
	}
	in.Marked = false
	if f := splitParts(attribute(fromInputs(in)), in); f.Split != energy.SplitTokenWeight {
		t.Fatalf("unmarked: split %q", f.Split)
	}

	// A mark that could not read the tree says so, not that a phase was empty; and the span
	// records it so (not as marked with no CPU time), so its inputs re-derive that.
	var sample spanSample
	(&Span{marked: true}).addTree(&sample, &endReadings{})
	if sample.Marked || !sample.MarkUnread {
		t.Fatalf("a mark that read nothing: marked %v, unread %v", sample.Marked, sample.MarkUnread)
	}
	tree := toInputs(good())
	tree.GPUUsed, tree.GPUJoules, tree.MarkUnread = false, 0, true
	if f := splitParts(attribute(fromInputs(tree)), tree); f.Split != energy.SplitTokenWeight+":"+PhaseUnread {
		t.Fatalf("an unread mark on a tree figure (%s): split %q", f.Method, f.Split)
	}
}
