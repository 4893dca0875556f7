package meter

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// Methods name how a figure was obtained. A figure made of a CPU part and a GPU part joins
// their methods with "+" (for example "rapl+nvml"); a GPU part that is exactly zero because the
// backend used no GPU adds nothing ("rapl" with coverage whole).
const (
	MethodRAPL         = "rapl"
	MethodNVML         = "nvml"
	MethodCPUTimeModel = "cpu-time-model"
	// MethodCPUTimeShare: calls on one backend overlapped, so the tree's CPU time between two
	// span edges is split equally among the calls open then, × W per core. An estimate.
	MethodCPUTimeShare = "cpu-time-share"
	MethodGPUModel     = "gpu-model"
	MethodTokenModel   = "token-model"
	// MethodHostTokenModel: a local backend's processes were not found, so its tokens are
	// priced at what this host measured per token for the same model (see Meter.learn).
	MethodHostTokenModel = "host-token-model"
	MethodProcEnergy     = "proc-energy" // macOS: the tree's own CPU energy, proc_pid_rusage ri_energy_nj
	MethodIOReport       = "ioreport"    // macOS: the GPU rail, IOReport Energy Model / GPU Energy
)

// Reasons say, in a stable machine-readable word, why a figure is not measured, or why its
// coverage is partial. Several are joined with ";".
const (
	ReasonNoRAPL          = "no-rapl"              // no usable RAPL counter on this host
	ReasonNoNVML          = "no-nvml"              // the tree used a GPU but NVML cannot measure it
	ReasonSpanOverlap     = "span-overlap"         // another local span of this proxy overlapped
	ReasonHostShared      = "host-shared"          // tree + proxy had < 99% of the host's busy CPU time
	ReasonHostUnknown     = "host-unknown"         // the host's busy time did not move: who used the CPU is unknown
	ReasonGPUShared       = "gpu-shared"           // the tree had < 99% of the GPU's process time
	ReasonGPUVanished     = "gpu-process-vanished" // a GPU process of the tree left mid-span
	ReasonGPUUnattributed = "gpu-unattributed"     // whether the tree used a GPU is unknown (another PID namespace, unreadable descriptors)
	ReasonGPUPending      = "gpu-pending"          // a provisional figure made before any GPU process list was read: no GPU part yet
	ReasonProcessVanished = "process-vanished"     // a process of the tree ended mid-span: its CPU time is short
	ReasonCounterStale    = "counter-stale"        // NVML's counter did not update after the span ended
	ReasonGPUSubPeriod    = "gpu-sub-period"       // NVML's counter did not update inside the span: its GPU part is a bracket's split
	ReasonGPULate         = "gpu-started-mid-span" // the tree was on no GPU at Begin, so no GPU counter was read then
	ReasonCounterWrap     = "counter-wrap"         // a RAPL counter may have wrapped more than once
	ReasonCounterDead     = "counter-dead"         // the counter failed its liveness probe at start
	ReasonPermission      = "permission-denied"    // the counter is not readable by this user
	ReasonCounterError    = "counter-error"        // any other failed read
	ReasonRemoteBackend   = "remote-backend"       // the backend runs elsewhere: no process here
	ReasonNoProcess       = "no-process"           // a local backend whose processes were not found
	ReasonNoProcEnergy    = "no-proc-energy"       // macOS: the per-process CPU energy cannot be read
	ReasonNoGPURail       = "no-gpu-rail"          // macOS: the tree used the GPU but the rail cannot be read
)

// Thresholds. The honesty rules rest on these numbers; each is named once, here.

// dominantShare is how much of a shared resource a tree must have had for the resource's
// counter to be its measured figure.
const dominantShare = 0.99

// raplMaxWatts is the most power one RAPL zone is assumed able to draw. It bounds how
// long a counter can go unread before it might have wrapped twice: the largest server CPUs are
// rated about 500 W, so 1000 W leaves a margin and errs towards distrust.
const raplMaxWatts = 1000.0

// defaultNVMLWait bounds how long End waits for NVML's energy counter to update after a span.
// NVML refreshes it about every 100 ms (less on recent parts); 250 ms allows for two periods.
const defaultNVMLWait = 250 * time.Millisecond

// Liveness probe: under load, a counter must advance at least probeAdvances times in at least
// probeQuorum of the intervals of a window of at least probeWindow.
const (
	probeAdvances = 5
	probeQuorum   = 0.8
	probeWindow   = 300 * time.Millisecond
)

// Bounds. Each part of a figure carries a range (energy.Figure's Low and High); these are the
// numbers behind them. meter/README.md documents each.

// raplUpdate is how often a RAPL counter updates: about every millisecond (Intel SDM vol. 3B,
// 15.10.1: "updated approximately every 1 ms"; AMD's MSR behaves alike). Each end of a RAPL
// window is this much uncertain.
const raplUpdate = time.Millisecond

// nvmlPeriod is how often NVML's energy counter updates: about every 100 ms (less on recent
// parts). Both ends of a GPU window sit on updates, so the window may be off the span by up to
// one period at the board's enforced power limit.
const nvmlPeriod = 100 * time.Millisecond

// The token model's stated range around its price per token: ML.ENERGY's leaderboard v3 gives
// Llama-3.1-8B on one H100 0.455 J/token at 8 concurrent sequences down to 0.070 at 512 (batching
// makes a token up to 0.070/0.455 ≈ 0.15× as dear); its v1 gives Llama-2-7B at batch size 1 on
// an A100 4.35 J/token (an unbatched, older part: about 9.6× the 0.455). Both are GPU-only
// figures for 7–8B models: a larger model, or the host's CPU and memory, can lie above High.
const (
	tokenModelLow  = 0.070 / 0.455
	tokenModelHigh = 4.35 / 0.455
)

// The GPU power model's stated range around its watts per busy GPU (DefaultGPUWatts, 300 W):
// from a quarter (a lightly loaded board, about 75 W) to an H100 SXM's 700 W board limit.
const (
	gpuModelLow  = 0.25
	gpuModelHigh = 700.0 / DefaultGPUWatts
)

// ConstantsVersion names the rules and constants above (and the token prices' defaults) as a
// whole. Every figure's inputs record it; change it whenever a rule or a constant changes, so
// that Recompute can tell a receipt made under other rules from one that disagrees.
const ConstantsVersion = "meter-3"

// treeTTL is how long Begin trusts the tree last known complete (walked, or confirmed by an
// End) without reading the last PID: a child born just before Begin and missed then is found
// by End, which trusts a tree walked before the last PID moved only after reading each PID
// handed out since (newPIDsOutside), and makes the count short rather than wrong.
const treeTTL = time.Second

// rediscoverEvery limits how often a backend whose process was not found is looked for again:
// discovery by port scans every process's descriptors.
const rediscoverEvery = time.Second

// inProcessRecheck is how often a backend found listening in this process is checked again:
// /proc/net/tcp must still show the same listening socket.
const inProcessRecheck = 30 * time.Second

// spanSample is everything the attribution rules need about one closed span. Span.End gathers
// it from the counters; attribute turns it into a Figure. Keeping the rules a pure function of
// this struct lets a table test state every rule directly.
type spanSample struct {
	Local   bool // the backend runs on this host
	Overlap bool // another local span of this meter was open at some point during this one
	Wall    time.Duration

	// The token model's prices for this call.
	PromptTokens, CompletionTokens int
	JPerPrompt, JPerCompletion     float64
	// HostJPerToken: what this host measured per output token (a prompt token at
	// DefaultPromptRatio of one) for the call's model; 0 when it never measured it.
	HostJPerToken float64

	// The backend's process tree. TreeShort: a process of the tree ended mid-span, so TreeCPU
	// is only a lower bound.
	TreeFound bool
	TreeShort bool
	TreeCPU   time.Duration
	// Split: other calls on the same backend overlapped this one, so TreeCPU and WallShare are
	// this call's equal shares of the tree's time between span edges (see edgeBook). TreeAlone
	// is the tree's time while this span was its backend's only one open, TreeUnion its whole
	// time while this span was open: the share's bounds.
	Split     bool
	WallShare time.Duration
	TreeAlone time.Duration
	TreeUnion time.Duration
	// Marked: the span was marked at a stream's first chunk and the mark read the tree; MarkCPU
	// is its tree CPU time up to then. MarkUnread: it was marked, but the mark could not read the
	// tree. Only the prompt/completion split reads them.
	Marked     bool
	MarkCPU    time.Duration
	MarkUnread bool
	ProxyCPU   time.Duration
	HostBusy   time.Duration // all CPUs' busy time over the span
	HostErr    error
	// CPU power model, W per busy core.
	CPUWatts float64

	// RAPL: the delta over the span, or why there is none (ErrNoData: no RAPL here). With
	// PerProcess, the same two carry the tree's own CPU energy (Apple's proc_pid_rusage): no
	// host-wide counter, so no 99% rule, but a short tree count is never a figure.
	RAPLJoules float64
	RAPLErr    error
	RAPLGap    time.Duration // how far the counter's window ran past the span, both ends together
	PerProcess bool
	// GPUNoData names a missing GPU counter's reason ("": no-nvml); GPUMethod names the GPU
	// counter ("": nvml).
	GPUNoData, GPUMethod string

	// GPU. GPUUsed: the tree had GPU time (NVML lists one of its PIDs; without NVML, one of
	// its processes holds a GPU device open). GPUErr: why the NVML delta is unusable
	// (ErrNoData: no NVML). GPUShare: the tree's share of the used devices' process time.
	// GPUBusy: how many GPUs' worth the tree kept busy over the span, from NVML's per-process
	// utilisation, for the power model (0 when unknown: the model then assumes one busy GPU).
	GPUUsed bool
	// GPUUnknown: whether the tree used a GPU is unknown (it is in no NVML list, but holds a
	// GPU device node, or its descriptors are unreadable, or NVML lists PIDs of another
	// namespace): no exact zero.
	GPUUnknown  bool
	GPUErr      error
	GPUJoules   float64
	GPUShare    float64
	GPUVanished bool
	GPUBusy     float64
	GPUWatts    float64
	GPULimitW   float64 // meter-1 records: the used boards' enforced power limits, summed (0: unknown)
	// GPULow and GPUHigh: what NVML's counters moved inside the span and over the brackets
	// that hold its ends (0, 0: no such bounds, as on macOS). GPUSubPeriod: no counter
	// updated inside the span, so GPUJoules is an estimate (gpus.joules).
	GPULow, GPUHigh float64
	GPUSubPeriod    bool
	// GPUProvisional: NVML's counter had not updated past the span's end when the figure was
	// made: its GPU part since the last update is instant power × time, and its bounds hold the
	// settled figure (Span.Settled).
	GPUProvisional bool

	// Cores is how many cores the tree may run on: its CPU time over the span is at most Cores ×
	// Wall (0: not recorded, no cap). CPUSlack is what the CPU clocks' tick quantisation can move
	// the tree's CPU time: a tick per process read, at each end.
	Cores    float64
	CPUSlack time.Duration

	// Legacy is the rules' generation a recorded sample was made under: 0 this build's
	// (ConstantsVersion), 1 meter-1, 2 meter-2. Older records recompute as they were made.
	Legacy int
}

// attribute applies the rules:
//
//   - A remote backend, or a local one whose processes were not found, is priced by tokens.
//   - CPU: the RAPL delta is measured only when no other local span overlapped and the tree
//     plus the proxy had ≥ 99% of the host's busy CPU time. Otherwise the tree's CPU time ×
//     W per core, or the token model when the tree's CPU time is short (a process vanished).
//     A shared counter is never split by time share.
//   - CPU on macOS (PerProcess): the tree's own energy needs no 99% rule, but an overlap, or a
//     process that vanished (its energy went with it), makes it an estimate.
//   - GPU: a tree with no GPU time has a GPU figure of exactly 0, measured. A tree that had
//     ≥ 99% of the used GPUs' process time (on macOS: of all IOAccelerator clients' GPU time),
//     with no overlap, gets the NVML delta (on macOS: the IOReport rail's). A shared GPU,
//     or a GPU process that vanished mid-span, gives no GPU figure: coverage is partial.
//     Without a usable NVML delta the GPU power model estimates.
//
// Reason is "" only for a measured figure of whole coverage.
func attribute(s spanSample) energy.Figure {
	var rs reasons
	if !s.Local {
		rs.add(ReasonRemoteBackend)
		return tokenFigure(s, rs)
	}
	if !s.TreeFound {
		rs.add(ReasonNoProcess)
		if s.HostJPerToken > 0 {
			f := tokenFigure(s, rs)
			f.Joules = tokenWeight(s.PromptTokens, s.CompletionTokens) * s.HostJPerToken
			f.Low, f.High = f.Joules*tokenModelLow, f.Joules*tokenModelHigh
			f.Method = MethodHostTokenModel
			return f
		}
		return tokenFigure(s, rs)
	}

	f := energy.Figure{Coverage: energy.CoverageWhole}
	cpuMeasured := false
	cpuNoData, cpuMethod := ReasonNoRAPL, MethodRAPL
	if s.PerProcess {
		cpuNoData, cpuMethod = ReasonNoProcEnergy, MethodProcEnergy
	}
	if s.Overlap {
		rs.add(ReasonSpanOverlap) // with or without a counter: the call was not alone
	}
	raplErr := s.RAPLErr
	if raplErr == nil && !s.PerProcess && !s.Overlap && s.RAPLJoules == 0 && s.TreeCPU > 0 {
		// A host-wide counter that did not move while the tree ran is not a reading.
		raplErr = errRAPLStill
	}
	switch {
	case raplErr != nil:
		rs.add(reasonFor(raplErr, cpuNoData))
	default:
		cpuMeasured = !s.Overlap
		if s.PerProcess {
			// The tree's own counters: a process that vanished took its energy with it.
			cpuMeasured = cpuMeasured && !s.TreeShort
		} else if s.HostErr != nil {
			cpuMeasured = false
			rs.add(reasonFor(s.HostErr, ReasonCounterError))
		} else if s.HostBusy == 0 {
			// Not one tick of busy time on the host: the 99% rule cannot be decided.
			cpuMeasured = false
			rs.add(ReasonHostUnknown)
		} else if !dominant(s.TreeCPU+s.ProxyCPU, s.HostBusy) {
			cpuMeasured = false
			rs.add(ReasonHostShared)
		}
	}
	switch {
	case cpuMeasured:
		f.CPUJoules = s.RAPLJoules
		f.Low, f.High = raplBounds(s)
	case s.TreeShort:
		rs.add(ReasonProcessVanished)
		return tokenFigure(s, rs)
	default:
		// No tree can run longer than its cores over the span: a CPU time read in clock ticks
		// at two instants that are not the span's edges can come to more.
		cpu := capCPU(s.TreeCPU, s)
		f.CPUJoules = cpu.Seconds() * s.CPUWatts
		cpuMethod = MethodCPUTimeModel
		low, high := cpu, cpu
		if s.Split {
			cpuMethod = MethodCPUTimeShare
			// The equal share is a model: the call used at least the tree's time while it was
			// alone, at most all of it while it was open.
			low, high = min(s.TreeAlone, cpu), max(s.TreeUnion, cpu)
		}
		// Each process read may be a tick off at each end.
		low, high = max(low-s.CPUSlack, 0), capCPU(high+s.CPUSlack, s)
		f.Low = low.Seconds() * s.CPUWatts * energy.CPUModelLow
		f.High = high.Seconds() * s.CPUWatts * energy.CPUModelHigh
	}

	gpuMeasured, gpuMethod := true, ""
	switch {
	case !s.GPUUsed && s.GPUUnknown && s.GPUProvisional:
		// Made before any process list was read: no GPU part until the settled figure proves
		// (or not) the tree's sole use; its High holds whatever the boards drew over the span.
		f.Coverage = energy.CoveragePartial
		f.Provisional = true
		rs.add(ReasonGPUPending)
		if s.Legacy == 0 {
			f.High += gpuCeiling(s)
		}
	case !s.GPUUsed && s.GPUUnknown:
		f.Coverage = energy.CoveragePartial
		rs.add(ReasonGPUUnattributed)
	case !s.GPUUsed:
		f.GPUJoules = 0 // exactly: no GPU time, no rail needed
	case s.GPUVanished:
		f.Coverage = energy.CoveragePartial
		rs.add(ReasonGPUVanished)
	case s.GPUErr != nil:
		gpuMeasured, gpuMethod = false, MethodGPUModel
		busy := s.GPUBusy
		if busy <= 0 {
			busy = 1
		}
		wall := s.Wall
		if s.Split {
			wall = s.WallShare // overlapping calls share the GPU's time as they share the tree's
		}
		f.GPUJoules = s.GPUWatts * wall.Seconds() * busy
		low, high := f.GPUJoules*gpuModelLow, f.GPUJoules*gpuModelHigh
		if s.Legacy == 0 {
			// No board draws above its ceiling, the model's High included.
			ceil := gpuCeiling(s)
			f.GPUJoules, low, high = min(f.GPUJoules, ceil), min(low, ceil), min(high, ceil)
		}
		f.Low += low
		f.High += high
		rs.add(reasonFor(s.GPUErr, cmp.Or(s.GPUNoData, ReasonNoNVML)))
	case s.Overlap || s.GPUShare < dominantShare:
		f.Coverage = energy.CoveragePartial
		rs.add(ReasonGPUShared)
	default:
		f.GPUJoules = s.GPUJoules
		gpuMethod = cmp.Or(s.GPUMethod, MethodNVML)
		switch {
		case s.Legacy == 0:
			// The counters' own bounds (what they moved inside the span and around it, or for a
			// provisional figure what the settled one can come to), none above what the boards
			// can draw over the span.
			ceil := gpuCeiling(s)
			f.GPUJoules = min(f.GPUJoules, ceil)
			f.Low += min(s.GPULow, f.GPUJoules)
			f.High += min(max(s.GPUHigh, f.GPUJoules), ceil)
			if s.GPUProvisional {
				f.Provisional = true
			}
		case s.GPUHigh > 0:
			// NVML: the counters' own bounds, what they moved inside the span and around it.
			f.Low += min(s.GPULow, f.GPUJoules)
			f.High += max(s.GPUHigh, f.GPUJoules)
		default:
			// A window on counter updates: each end may be a period off the span's edge.
			slack := nvmlPeriod.Seconds() * cmp.Or(s.GPULimitW, s.GPUWatts)
			f.Low += max(f.GPUJoules-slack, 0)
			f.High += f.GPUJoules + slack
		}
		if s.GPUSubPeriod {
			gpuMeasured = false
			rs.add(ReasonGPUSubPeriod)
		}
	}

	f.Joules = f.CPUJoules + f.GPUJoules
	f.Grade = energy.Estimated
	if cpuMeasured && gpuMeasured {
		f.Grade = energy.Measured
	}
	f.Method = cpuMethod
	if gpuMethod != "" {
		f.Method += "+" + gpuMethod
	}
	f.Reason = rs.String()
	return f
}

// capCPU caps a CPU time at what the tree's cores can run over the span (no cap when the
// cores were not recorded).
func capCPU(d time.Duration, s spanSample) time.Duration {
	if s.Cores <= 0 || s.Legacy != 0 {
		return d
	}
	return min(d, time.Duration(s.Cores*float64(s.Wall)))
}

// gpuCeiling is the most the used GPUs can draw over the span: 1.5 × their enforced power limits
// (GPULimitW, summed) × its wall time; with no limit recorded (no NVML), gpuMaxWatts for each
// GPU the model has busy.
func gpuCeiling(s spanSample) float64 {
	if s.GPULimitW > 0 {
		return gpuExcursion * s.GPULimitW * s.Wall.Seconds()
	}
	return gpuMaxWatts * max(1, math.Ceil(s.GPUBusy)) * s.Wall.Seconds()
}

// raplBounds is the measured CPU part's range: the counter's window ran RAPLGap past the span
// and each end is a counter update (raplUpdate) uncertain, at the window's mean power.
func raplBounds(s spanSample) (low, high float64) {
	j := s.RAPLJoules
	window := s.Wall + s.RAPLGap
	if window <= 0 {
		return j, j
	}
	watts := j / window.Seconds()
	slack := (s.RAPLGap + 2*raplUpdate).Seconds() * watts
	return max(j-slack, 0), j + 2*raplUpdate.Seconds()*watts
}

// errRAPLStill says RAPL read 0 J over a span in which the tree used CPU time.
var errRAPLStill = fmt.Errorf("rapl: %w: 0 J while the tree used CPU time", ErrCounterStale)

// dominant reports whether part is at least 99% of whole.
func dominant(part, whole time.Duration) bool {
	return float64(part) >= dominantShare*float64(whole)
}

// tokenWeight counts a call's tokens in output tokens: a prompt token is DefaultPromptRatio of one.
func tokenWeight(prompt, completion int) float64 {
	return float64(completion) + DefaultPromptRatio*float64(prompt)
}

// tokenFigure prices the call's tokens.
func tokenFigure(s spanSample, rs reasons) energy.Figure {
	j := float64(s.PromptTokens)*s.JPerPrompt + float64(s.CompletionTokens)*s.JPerCompletion
	return energy.Figure{Joules: j, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: MethodTokenModel,
		Reason: rs.String(), Low: j * tokenModelLow, High: j * tokenModelHigh}
}

// reasonFor names why a counter reading is unusable. noData names the counter's absence.
func reasonFor(err error, noData string) string {
	if recorded, ok := err.(reasonError); ok { //nolint:errorlint // errOf never wraps it
		return string(recorded) // read back from a ledger record's inputs
	}
	switch {
	case err == nil:
		return ""
	case errors.Is(err, fs.ErrPermission):
		return ReasonPermission
	case errors.Is(err, ErrCounterWrap):
		return ReasonCounterWrap
	case errors.Is(err, ErrCounterStale):
		return ReasonCounterStale
	case errors.Is(err, ErrGPULate):
		return ReasonGPULate
	case errors.Is(err, errCounterDead):
		return ReasonCounterDead
	case errors.Is(err, ErrNoData):
		return noData
	}
	return ReasonCounterError
}

// reasons collects distinct reasons in the order added.
type reasons struct {
	list [6]string
	n    int
}

func (r *reasons) add(s string) {
	for _, x := range r.list[:r.n] {
		if x == s {
			return
		}
	}
	if r.n < len(r.list) {
		r.list[r.n] = s
		r.n++
	}
}

func (r *reasons) String() string { return strings.Join(r.list[:r.n], ";") }
