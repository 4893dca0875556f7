// Package meter measures, or honestly estimates, the energy of each upstream LLM call.
package meter

import (
	"errors"
	"net"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Grades and coverages of a Figure.
const (
	GradeMeasured   = "measured"
	GradeEstimated  = "estimated"
	CoverageWhole   = "whole"
	CoveragePartial = "partial"
)

// Methods name how a figure was obtained. A figure made of a CPU part and a GPU part joins
// their methods with "+" (for example "rapl+nvml"); a GPU part that is exactly zero adds nothing.
const (
	MethodRAPL         = "rapl"
	MethodNVML         = "nvml"
	MethodCPUTimeModel = "cpu-time-model"
	MethodGPUModel     = "gpu-model"
	MethodTokenModel   = "token-model"
	MethodStageModel   = "stage-model"
)

// Reasons say, in a stable machine-readable word, why a figure is not measured. Several are
// joined with ";".
const (
	ReasonNoRAPL          = "no-rapl"      // no usable RAPL counter on this host
	ReasonNoNVML          = "no-nvml"      // the tree used a GPU but NVML is not usable
	ReasonSpanOverlap     = "span-overlap" // another span of this proxy overlapped
	ReasonHostShared      = "host-shared"  // the tree and the proxy had < 99% of the host's busy CPU time
	ReasonGPUShared       = "gpu-shared"   // the tree had < 99% of the GPU's process time
	ReasonGPUVanished     = "gpu-process-vanished"
	ReasonProcessVanished = "process-vanished" // a process of the tree ended mid-span: its CPU time is short
	ReasonCounterStale    = "counter-stale"    // NVML's counter did not update after the span ended
	ReasonCounterWrap     = "counter-wrap"     // a RAPL counter may have wrapped more than once
	ReasonPermission      = "permission-denied"
	ReasonCounterError    = "counter-error" // any other failed read
	ReasonRemoteBackend   = "remote-backend"
	ReasonNoProcess       = "no-process" // a local backend whose processes were not found
)

// Default estimate parameters. Each is documented where it is used.
const (
	// DefaultCPUWattsPerCore prices one fully busy core: a typical desktop or server part's TDP
	// divided by its cores (125 W / 12 cores ≈ 10 W; 280 W / 32 cores ≈ 9 W).
	DefaultCPUWattsPerCore = 10.0
	// DefaultGPUWatts prices a busy GPU for the GPU power model: an RTX 4090 or an A100 PCIe
	// draw about 300 W under inference.
	DefaultGPUWatts = 300.0
	// DefaultRemoteJPerCompletion is the upper end of ML.ENERGY's 0.12–0.4 J per output token
	// for batched H100/B200 serving (ml.energy leaderboard, 2024–2025).
	DefaultRemoteJPerCompletion = 0.4
	// DefaultLocalJPerCompletion is ML.ENERGY's figure for Llama-2-7B at batch size 1 on an A100,
	// about 4.35 J per output token: what an unbatched local server spends.
	DefaultLocalJPerCompletion = 4.35
	// DefaultPromptRatio prices a prompt token at a tenth of an output token: prefill runs the
	// prompt's tokens in parallel. This ratio is our assumption, not a published figure.
	DefaultPromptRatio = 0.1
)

// ErrNoData says a counter has nothing to give on this host (no hardware, no driver, no
// permission). It is not a failure; the meter estimates instead.
var ErrNoData = errors.New("meter: no data")

// Figure is the energy of one call, measured or estimated. The zero value means "not computed".
type Figure struct {
	Joules    float64
	Grade     string // GradeMeasured or GradeEstimated
	Coverage  string // CoverageWhole, or CoveragePartial when a part (the GPU) has no figure
	Method    string // "rapl+nvml", "rapl", "cpu-time-model", "token-model", ...
	Reason    string // why it is not measured, reasons joined by ";"; "" when measured
	CPUJoules float64
	GPUJoules float64
}

// Measured reports whether the figure is measured.
func (f Figure) Measured() bool { return f.Grade == GradeMeasured }

// Work is what the backend reported about a call, passed to Span.End.
// The zero value is usable: no tokens, not failed.
type Work struct {
	Model            string
	PromptTokens     int
	CompletionTokens int
	// Failed is true when the call did not complete; the energy spent is still metered.
	Failed bool
}

// TokenModel prices the tokens of models whose names match one of Patterns (path.Match globs).
type TokenModel struct {
	Patterns       []string
	JPerPrompt     float64
	JPerCompletion float64
}

// BackendInfo tells the meter about one upstream. A backend is local when its URL's host is a
// loopback address or "localhost", or when PIDFile or Cgroup is set.
type BackendInfo struct {
	Name string
	URL  string
	// PIDFile names a file holding the backend's main PID; its children are followed.
	PIDFile string
	// Cgroup is a cgroup v2 directory (absolute, or relative to <SysfsRoot>/fs/cgroup) holding
	// all of the backend's processes.
	Cgroup string
	// JoulesPerToken prices this backend's output tokens when no TokenModel matches (0: default).
	JoulesPerToken float64
}

// Options configure a Meter. The zero value is usable: counters on "auto", the real /sys and
// /proc, and the documented default prices.
type Options struct {
	RAPL      string // auto | on | off ("" is auto)
	NVML      string // auto | on | off ("" is auto)
	SysfsRoot string // default "/sys"
	ProcRoot  string // default "/proc"

	CPUWattsPerCore   float64 // default DefaultCPUWattsPerCore
	GPUWatts          float64 // default DefaultGPUWatts
	StageWattsPerCore float64 // default CPUWattsPerCore
	TokenModels       []TokenModel
	Backends          []BackendInfo
	Logger            zerolog.Logger
}

// Meter opens and closes spans around upstream calls and turns what its counters saw into a
// Figure. A Meter is safe for concurrent use. A nil *Meter is usable: its spans give token
// estimates at the default prices.
type Meter struct {
	opts     Options
	log      zerolog.Logger
	backends map[string]*backendState

	mu     sync.Mutex
	active int    // open spans
	begins uint64 // spans begun, ever
}

type backendState struct {
	info  BackendInfo
	local bool
}

// New detects the counters once and returns a Meter. It never fails because hardware is absent:
// a missing counter only makes figures estimates. It fails on options that make no sense.
func New(o Options) (*Meter, error) {
	if o.SysfsRoot == "" {
		o.SysfsRoot = "/sys"
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.CPUWattsPerCore == 0 {
		o.CPUWattsPerCore = DefaultCPUWattsPerCore
	}
	if o.GPUWatts == 0 {
		o.GPUWatts = DefaultGPUWatts
	}
	if o.StageWattsPerCore == 0 {
		o.StageWattsPerCore = o.CPUWattsPerCore
	}
	for _, s := range []string{o.RAPL, o.NVML} {
		switch s {
		case "", "auto", "on", "off":
		default:
			return nil, errors.New("meter: counter switch " + s + " is not one of auto, on, off")
		}
	}
	if o.CPUWattsPerCore < 0 || o.GPUWatts < 0 || o.StageWattsPerCore < 0 {
		return nil, errors.New("meter: watts must be positive")
	}
	m := &Meter{opts: o, log: o.Logger, backends: map[string]*backendState{}}
	for _, b := range o.Backends {
		m.backends[b.Name] = &backendState{info: b, local: isLocal(b)}
	}
	return m, nil
}

// StageWatts is the power model for in-process stages (cache, kv, graph): W per busy core.
func (m *Meter) StageWatts() float64 {
	if m == nil {
		return DefaultCPUWattsPerCore
	}
	return m.opts.StageWattsPerCore
}

// Close releases the counters. Spans still open may be ended after Close; they estimate.
func (m *Meter) Close() error { return nil }

// Span is one upstream call being metered. End it exactly once; later calls return the same
// Figure. A Span is not safe for concurrent use.
type Span struct {
	m       *Meter
	backend *backendState
	name    string
	start   time.Time
	seq     uint64
	overlap bool
	ended   bool
	fig     Figure
}

// Begin opens a span right before the upstream request to backend (a BackendInfo name).
func (m *Meter) Begin(backend string) *Span {
	s := &Span{m: m, name: backend, start: time.Now()}
	if m == nil {
		return s
	}
	s.backend = m.backends[backend]
	m.mu.Lock()
	m.active++
	m.begins++
	s.seq = m.begins
	s.overlap = m.active > 1
	m.mu.Unlock()
	return s
}

// End closes the span after the last byte of the response and returns its Figure.
func (s *Span) End(w Work) Figure {
	if s.ended {
		return s.fig
	}
	s.ended = true
	m := s.m
	if m != nil {
		m.mu.Lock()
		s.overlap = s.overlap || m.begins != s.seq
		m.active--
		m.mu.Unlock()
	}
	local := s.backend != nil && s.backend.local
	reason := ReasonRemoteBackend
	if local {
		reason = ReasonNoProcess
	}
	s.fig = s.tokenEstimate(w, local, reason)
	return s.fig
}

// tokenEstimate prices w's tokens by the first matching TokenModel, else the backend's
// JoulesPerToken, else the default for a local or a remote server.
func (s *Span) tokenEstimate(w Work, local bool, reason string) Figure {
	jp, jc := priceTokens(s.m, s.backend, w.Model, local)
	j := float64(w.PromptTokens)*jp + float64(w.CompletionTokens)*jc
	return Figure{Joules: j, Grade: GradeEstimated, Coverage: CoverageWhole, Method: MethodTokenModel,
		Reason: reason, CPUJoules: 0, GPUJoules: 0}
}

func priceTokens(m *Meter, b *backendState, model string, local bool) (jp, jc float64) {
	if m != nil {
		for _, tm := range m.opts.TokenModels {
			for _, p := range tm.Patterns {
				if ok, _ := path.Match(p, model); ok {
					return tm.JPerPrompt, tm.JPerCompletion
				}
			}
		}
	}
	jc = DefaultRemoteJPerCompletion
	if local {
		jc = DefaultLocalJPerCompletion
	}
	if b != nil && b.info.JoulesPerToken > 0 {
		jc = b.info.JoulesPerToken
	}
	return jc * DefaultPromptRatio, jc
}

// isLocal reports whether the backend runs on this host.
func isLocal(b BackendInfo) bool {
	if b.PIDFile != "" || b.Cgroup != "" {
		return true
	}
	_, ok := loopbackPort(b.URL)
	return ok
}

// loopbackPort returns the TCP port of a loopback http(s) URL.
func loopbackPort(raw string) (int, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return 0, false
	}
	host := u.Hostname()
	if !strings.EqualFold(host, "localhost") {
		ip := net.ParseIP(host)
		if ip == nil || !ip.IsLoopback() {
			return 0, false
		}
	}
	p := u.Port()
	if p == "" {
		if u.Scheme == "https" {
			return 443, true
		}
		return 80, true
	}
	n := 0
	for _, c := range p {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n > 0 && n < 65536
}
