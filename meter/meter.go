// Package meter measures, or honestly estimates, the energy of each upstream LLM call.
package meter

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// Grades and coverages of a Figure.
const (
	GradeMeasured   = energy.Measured
	GradeEstimated  = energy.Estimated
	CoverageWhole   = energy.CoverageWhole
	CoveragePartial = energy.CoveragePartial
)

// Methods name how a figure was obtained. A figure made of a CPU part and a GPU part joins
// their methods with "+" (for example "rapl+nvml"); a GPU part that is exactly zero because the
// backend used no GPU adds nothing ("rapl" with coverage whole).
const (
	MethodRAPL         = "rapl"
	MethodNVML         = "nvml"
	MethodCPUTimeModel = "cpu-time-model"
	MethodGPUModel     = "gpu-model"
	MethodTokenModel   = "token-model"
	MethodStageModel   = "stage-model"
)

// Reasons say, in a stable machine-readable word, why a figure is not measured, or why its
// coverage is partial. Several are joined with ";".
const (
	ReasonNoRAPL          = "no-rapl"              // no usable RAPL counter on this host
	ReasonNoNVML          = "no-nvml"              // the tree used a GPU but NVML cannot measure it
	ReasonSpanOverlap     = "span-overlap"         // another local span of this proxy overlapped
	ReasonHostShared      = "host-shared"          // tree + proxy had < 99% of the host's busy CPU time
	ReasonGPUShared       = "gpu-shared"           // the tree had < 99% of the GPU's process time
	ReasonGPUVanished     = "gpu-process-vanished" // a GPU process of the tree left mid-span
	ReasonProcessVanished = "process-vanished"     // a process of the tree ended mid-span: its CPU time is short
	ReasonCounterStale    = "counter-stale"        // NVML's counter did not update after the span ended
	ReasonCounterWrap     = "counter-wrap"         // a RAPL counter may have wrapped more than once
	ReasonCounterDead     = "counter-dead"         // the counter failed its liveness probe at start
	ReasonPermission      = "permission-denied"    // the counter is not readable by this user
	ReasonCounterError    = "counter-error"        // any other failed read
	ReasonRemoteBackend   = "remote-backend"       // the backend runs elsewhere: no process here
	ReasonNoProcess       = "no-process"           // a local backend whose processes were not found
)

// Default estimate parameters.
const (
	// DefaultCPUWattsPerCore prices one fully busy core: a typical desktop or server part's TDP
	// divided by its cores (125 W / 12 cores ≈ 10 W; 280 W / 32 cores ≈ 9 W).
	DefaultCPUWattsPerCore = 10.0
	// DefaultGPUWatts prices a fully busy GPU in the GPU power model: an RTX 4090 or an A100
	// PCIe draws about 300 W while serving.
	DefaultGPUWatts = 300.0
	// DefaultRemoteJPerCompletion is the upper end of ML.ENERGY's 0.12–0.4 J per output token
	// for batched H100/B200 serving (ml.energy leaderboard).
	DefaultRemoteJPerCompletion = 0.4
	// DefaultLocalJPerCompletion is ML.ENERGY's figure for Llama-2-7B at batch size 1 on an
	// A100, about 4.35 J per output token: what an unbatched local server spends.
	DefaultLocalJPerCompletion = 4.35
	// DefaultPromptRatio prices a prompt token at a tenth of an output token, since prefill
	// runs a prompt's tokens in parallel. The ratio is our assumption, not a published figure.
	DefaultPromptRatio = 0.1
)

// ErrNoData says a counter has nothing to give on this host (no hardware, no driver, built
// without it). It is not a failure: the meter estimates instead.
var ErrNoData = errors.New("meter: no data")

// errInProcess says a loopback backend listens inside this process, so it has no processes of
// its own to meter.
var errInProcess = fmt.Errorf("%w: the backend listens in this process", ErrNoData)

// errCounterDead says a counter failed its liveness probe.
var errCounterDead = errors.New("meter: counter failed its liveness probe")

// Figure is the energy of one call, measured or estimated: the project's one energy value.
// Joules = CPUJoules + GPUJoules, except for the token model, which prices the call as a whole
// and leaves both parts 0.
type Figure = energy.Figure

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
// The first matching model wins. The zero value matches nothing.
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
	// Cgroup is a cgroup v2 directory holding all of the backend's processes: absolute, or
	// relative to <SysfsRoot>/fs/cgroup.
	Cgroup string
	// JoulesPerToken prices this backend's output tokens when no TokenModel matches (0: the
	// default); a prompt token costs DefaultPromptRatio of it.
	JoulesPerToken float64
}

// Options configure a Meter. The zero value is usable: counters on "auto", the real /sys,
// /proc and /dev, and the documented default prices.
type Options struct {
	RAPL      string // auto | on | off ("" is auto); "on" makes New fail without RAPL
	NVML      string // auto | on | off ("" is auto); "on" makes New fail without NVML
	SysfsRoot string // default "/sys"
	ProcRoot  string // default "/proc"
	DevRoot   string // default "/dev"

	CPUWattsPerCore   float64 // default DefaultCPUWattsPerCore
	GPUWatts          float64 // default DefaultGPUWatts
	StageWattsPerCore float64 // default CPUWattsPerCore
	RAPLMaxWatts      float64 // default DefaultRAPLMaxWatts
	NVMLWait          time.Duration
	TokenModels       []TokenModel
	Backends          []BackendInfo
	// SkipProbe skips the liveness probes New runs on the energy counters (about 0.3 s for
	// RAPL, 3 s for NVML). Tests on fixture counters that never advance set it.
	SkipProbe bool
	Logger    zerolog.Logger

	fs   fileSystem       // tests inject refusals
	now  func() time.Time // tests move time
	nvml func() (*gpus, error)
}

// Meter opens and closes spans around upstream calls and turns what its counters saw into a
// Figure. Make one with New; the zero Meter is not usable, but a nil *Meter is: its spans give
// token estimates at the default prices. A Meter is safe for concurrent use.
//
// Counters are read directly at both ends of a span rather than sampled in the background: a
// sampler would cost its reads every period whether or not calls run, and span edges would blur
// by a period. A span reads only what its figure can use (see Begin), from files kept open, so
// the reads cost a few system calls per call. The one background reader, started by New, reads
// RAPL once per quarter of its wrap window so that no span can miss a second wrap.
type Meter struct {
	opts Options
	log  zerolog.Logger
	fs   fileSystem
	proc *procfs

	rapl    *rapl
	raplErr error // why RAPL is not used; nil when it is
	gpu     *gpus
	gpuErr  error
	hostGPU bool // the host has GPU device nodes, so a tree might use one without NVML

	selfCPU   func() (uint64, error)
	bootTicks func() (uint64, error)
	selfPID   int

	backends map[string]*backendState

	mu     sync.Mutex
	active int    // open local spans
	begins uint64 // local spans begun, ever

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// New detects the counters once and returns a Meter. It never fails because hardware is
// absent: a missing counter only makes figures estimates, and the reason is kept and logged
// once. It fails on options that make no sense, and when a counter set to "on" is missing.
func New(o Options) (*Meter, error) {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&o.RAPL, "auto")
	def(&o.NVML, "auto")
	def(&o.SysfsRoot, "/sys")
	def(&o.ProcRoot, "/proc")
	def(&o.DevRoot, "/dev")
	for _, s := range []string{o.RAPL, o.NVML} {
		if s != "auto" && s != "on" && s != "off" {
			return nil, fmt.Errorf("meter: counter switch %q is not one of auto, on, off", s)
		}
	}
	if o.CPUWattsPerCore < 0 || o.GPUWatts < 0 || o.StageWattsPerCore < 0 || o.RAPLMaxWatts < 0 {
		return nil, errors.New("meter: watts must be positive")
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
	if o.NVMLWait <= 0 {
		o.NVMLWait = DefaultNVMLWait
	}
	if o.fs == nil {
		o.fs = osFS{}
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.nvml == nil {
		o.nvml = newNVML
	}
	m := &Meter{opts: o, log: o.Logger, fs: o.fs, backends: map[string]*backendState{},
		selfCPU: selfCPU, bootTicks: bootTicks, selfPID: os.Getpid()}
	m.proc = &procfs{fs: o.fs, root: o.ProcRoot, self: m.selfPID}
	if filepath.Clean(o.ProcRoot) == "/proc" {
		m.proc.cpuClock, m.proc.live = processCPUClock, true
	}
	for _, b := range o.Backends {
		if _, dup := m.backends[b.Name]; dup {
			return nil, fmt.Errorf("meter: backend %q is listed twice", b.Name)
		}
		m.backends[b.Name] = newBackendState(b, o.SysfsRoot)
	}

	// Counters: detected once; a missing one is logged once, with its reason.
	if o.RAPL == "off" {
		m.raplErr = fmt.Errorf("%w: rapl is off in the config", ErrNoData)
	} else {
		m.rapl, m.raplErr = detectRAPL(o.fs, o.SysfsRoot, o.now, o.RAPLMaxWatts)
	}
	if o.NVML == "off" {
		m.gpuErr = fmt.Errorf("%w: nvml is off in the config", ErrNoData)
	} else {
		m.gpu, m.gpuErr = o.nvml()
		if m.gpu != nil {
			m.gpu.wait = o.NVMLWait
		}
	}
	detected := m.rapl
	if !o.SkipProbe {
		m.probeAtStart()
	}
	if detected != nil && m.rapl == nil {
		detected.close() // dead: its files need not stay open
	}
	if o.RAPL == "on" && m.raplErr != nil {
		m.gpu.close()
		return nil, fmt.Errorf("meter: rapl is on but unusable: %w", m.raplErr)
	}
	if o.NVML == "on" && m.gpuErr != nil {
		m.gpu.close()
		if m.rapl != nil {
			m.rapl.close()
		}
		return nil, fmt.Errorf("meter: nvml is on but unusable: %w", m.gpuErr)
	}
	m.hostGPU = m.gpu != nil || hasGPUNodes(o.fs, o.DevRoot)
	m.openProcFiles()
	m.logCounters()

	m.stop, m.done = make(chan struct{}), make(chan struct{})
	go m.keep()
	return m, nil
}

// openProcFiles keeps open the /proc files that spans read: /proc/loadavg for the last PID (the
// tree cache), and /proc/stat for the host's CPU time, which only the 99% rule of a measured
// CPU figure needs, so only when RAPL is live.
func (m *Meter) openProcFiles() {
	root := m.opts.ProcRoot
	if f, err := m.fs.Open(filepath.Join(root, "loadavg")); err == nil {
		// loadavg names the last PID of the reader's PID namespace, not of the /proc it sits in:
		// the host's /proc mounted into a container would not show its new processes there.
		// /proc/self names this process by its PID in the mount's namespace, so a mismatch
		// tells. (A fixture /proc has no self.)
		if self, err := m.fs.Readlink(filepath.Join(root, "self")); err == nil && self != strconv.Itoa(m.selfPID) {
			f.Close()
			m.log.Info().Str("proc", root).Msg("meter: /proc is another PID namespace's; process trees are walked at every span")
		} else {
			m.proc.loadavg = f
		}
	}
	if m.rapl != nil {
		if f, err := m.fs.Open(filepath.Join(root, "stat")); err == nil {
			m.proc.hostStat = f
		}
	}
}

// probeAtStart runs the liveness probes and drops a counter that fails.
func (m *Meter) probeAtStart() {
	var wg sync.WaitGroup
	if m.rapl != nil {
		wg.Go(func() {
			if res := runProbe(m.raplTarget(), true); !res.Live {
				m.rapl, m.raplErr = nil, fmt.Errorf("rapl: %w: %s", errCounterDead, res.Detail)
			}
		})
	}
	if m.gpu != nil {
		wg.Go(func() {
			if res := runProbe(m.nvmlTarget(), false); !res.Live {
				m.gpu.close()
				m.gpu, m.gpuErr = nil, fmt.Errorf("nvml: %w: %s", errCounterDead, res.Detail)
			}
		})
	}
	wg.Wait()
}

func (m *Meter) logCounters() {
	if m.rapl != nil {
		m.log.Info().Str("counter", "rapl").Str("zones", m.rapl.zoneNames()).Msg("meter: counter live")
	} else {
		m.log.Info().Str("counter", "rapl").Str("reason", reasonFor(m.raplErr, ReasonNoRAPL)).
			Err(m.raplErr).Msg("meter: counter unavailable; CPU figures are estimates")
	}
	if m.gpu != nil {
		m.log.Info().Str("counter", "nvml").Int("devices", len(m.gpu.devs)).Msg("meter: counter live")
	} else {
		m.log.Info().Str("counter", "nvml").Str("reason", reasonFor(m.gpuErr, ReasonNoNVML)).
			Err(m.gpuErr).Bool("gpu_nodes", m.hostGPU).Msg("meter: counter unavailable")
	}
}

// keep reads RAPL often enough that no zone can wrap twice between two reads, so a span of any
// length can be measured. It costs one read of each zone per quarter window (about once a
// minute with a 262 kJ range at 1000 W).
func (m *Meter) keep() {
	defer close(m.done)
	if m.rapl == nil {
		return
	}
	every := min(max(m.rapl.window()/4, 10*time.Millisecond), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			if _, err := m.rapl.read(); err != nil {
				m.log.Debug().Err(err).Msg("meter: rapl keeper read")
			}
		}
	}
}

// StageWatts is the power model for in-process stages (cache, kv, graph): W per busy core.
func (m *Meter) StageWatts() float64 {
	if m == nil {
		return DefaultCPUWattsPerCore
	}
	return m.opts.StageWattsPerCore
}

// Close stops the meter's background reader and releases NVML. Spans still open may be ended
// after Close; they estimate what they can.
func (m *Meter) Close() error {
	if m == nil {
		return nil
	}
	var err error
	m.once.Do(func() {
		close(m.stop)
		<-m.done
		m.mu.Lock()
		g := m.gpu
		m.mu.Unlock()
		err = g.close()
		m.proc.close()
		if m.rapl != nil {
			m.rapl.close()
		}
		for _, b := range m.backends {
			b.close()
		}
	})
	return err
}

// CounterState is one energy counter as New decided it: in use, or not and why.
type CounterState struct {
	Name   string // "rapl" or "nvml"
	Live   bool
	Reason string // when not live, a Reason* word: no-rapl, no-nvml, permission-denied, counter-dead, ...
}

// Counters reports the energy counters the meter uses, as detected and probed by New. It reads
// nothing, so a metrics scrape may call it freely (eoc_meter_counter_live{counter}). A nil Meter
// uses none. The slice is the caller's.
func (m *Meter) Counters() []CounterState {
	if m == nil {
		return []CounterState{{Name: "rapl", Reason: ReasonNoRAPL}, {Name: "nvml", Reason: ReasonNoNVML}}
	}
	return []CounterState{
		{Name: "rapl", Live: m.rapl != nil, Reason: reasonFor(m.raplErr, ReasonNoRAPL)},
		{Name: "nvml", Live: m.gpu != nil, Reason: reasonFor(m.gpuErr, ReasonNoNVML)},
	}
}

// Span is one upstream call being metered, from Meter.Begin; the zero Span is not usable. End
// it once, after the last byte; later calls return the same Figure. A Span is not safe for
// concurrent use, but spans of one Meter may be used from different goroutines.
type Span struct {
	m       *Meter
	b       *backendState
	start   time.Time
	seq     uint64
	overlap bool
	ended   bool
	fig     Figure
	treeErr error         // why the backend has no process to meter
	c       *spanCounters // a local span's readings; nil for a remote one or one with no process
}

// spanCounters is what a local span read at Begin, and room for what End reads.
type spanCounters struct {
	hostRead bool // RAPL, host and proxy CPU time were read at Begin
	raplA    raplReading
	raplErr  error
	hostA    hostCPU
	hostErr  error
	selfA    uint64
	selfErr  error
	procsA   []procSample
	cgA      uint64
	gpuA     gpuSnap
	gpuB     gpuSnap

	// Room for the samples of a small tree (Ollama and a runner or two) without allocating.
	bufA, bufB [8]procSample
}

// procSample is one process's CPU time at one end of a span.
type procSample struct {
	pid int
	cpu uint64 // ns
}

// Begin opens a span right before the upstream request to backend (a BackendInfo name). An
// unknown name is metered as a remote backend.
//
// It reads only what the figure can use. A remote backend, and a local one with no processes
// to meter (not found, or listening in this process), read nothing: their figure is priced by
// tokens. A local one reads the CPU clock of each process of its tree, which is walked again
// only after a new PID was handed out on the host (End reads the last PID from /proc/loadavg,
// and polls the root's pidfd). The host's CPU time, the proxy's and RAPL are read only when a
// measured CPU figure is possible: RAPL live and no other local span open. NVML is read only
// when live.
func (m *Meter) Begin(backend string) *Span {
	s := &Span{m: m, start: time.Now()}
	if m == nil {
		return s
	}
	s.b = m.backends[backend]
	if s.b == nil || !s.b.local {
		return s
	}
	m.mu.Lock()
	m.active++
	m.begins++
	s.seq = m.begins
	s.overlap = m.active > 1
	m.mu.Unlock()

	if s.treeErr = s.b.noProcess(); s.treeErr != nil {
		return s // priced by tokens: nothing to read
	}
	c := &spanCounters{}
	c.procsA, c.cgA, s.treeErr = m.sampleTree(s.b, c.bufA[:0], false)
	if s.treeErr != nil {
		return s
	}
	s.c = c
	if m.gpu != nil {
		m.gpu.snapshot(&c.gpuA)
	}
	if m.rapl != nil && !s.overlap {
		c.hostRead = true
		c.selfA, c.selfErr = m.selfCPU()
		c.hostA, c.hostErr = m.proc.hostTimes()
		c.raplA, c.raplErr = m.rapl.read()
	}
	s.start = time.Now()
	return s
}

// End closes the span after the last byte of the response and returns its Figure. It costs a
// few system calls for a local backend whose process tree did not change (more when it did:
// the tree is walked again) and no I/O for a remote one, except that when the backend used a
// GPU it waits, at most Options.NVMLWait (250 ms by default), for NVML's counter to update
// after the span, so a non-streaming response's headers or a stream's trailers carry a figure
// that is not short.
func (s *Span) End(w Work) Figure {
	if s.ended {
		return s.fig
	}
	s.ended = true
	in := spanSample{PromptTokens: w.PromptTokens, CompletionTokens: w.CompletionTokens}
	m := s.m
	local := s.b != nil && s.b.local
	in.JPerPrompt, in.JPerCompletion = priceTokens(m, s.b, w.Model, local)
	if !local {
		s.fig = attribute(in)
		return s.fig
	}
	in.Local = true
	end := time.Now()
	in.Wall = end.Sub(s.start)
	in.CPUWatts, in.GPUWatts = m.opts.CPUWattsPerCore, m.opts.GPUWatts
	if s.treeErr != nil {
		m.closeSpan(s)
		s.fig = attribute(in) // no tree: priced by tokens, reason no-process
		return s.fig
	}

	// Host-wide counters first, tightest around the span; then the tree. A span that began
	// since this one did makes the CPU part an estimate whatever RAPL says: not read.
	c := s.c
	measureCPU := c.hostRead && !m.begunSince(s)
	var raplB raplReading
	var raplErr, hostErr, selfErr error
	var hostB hostCPU
	var selfB uint64
	if measureCPU {
		raplB, raplErr = m.rapl.read()
		hostB, hostErr = m.proc.hostTimes()
		selfB, selfErr = m.selfCPU()
	}
	if m.gpu != nil {
		m.gpu.snapshot(&c.gpuB)
	}
	procsB, cgB, treeErr := m.sampleTree(s.b, c.bufB[:0], true)

	in.Overlap = m.closeSpan(s)

	// RAPL.
	switch {
	case m.rapl == nil:
		in.RAPLErr = m.raplErr
	case !measureCPU:
		// Overlapped (in.Overlap is set): the RAPL delta could not have been this span's.
	case c.raplErr != nil:
		in.RAPLErr = c.raplErr
	case raplErr != nil:
		in.RAPLErr = raplErr
	default:
		in.RAPLJoules, in.RAPLErr = m.rapl.joules(c.raplA, raplB)
	}
	// Host and proxy CPU time, for the 99% rule.
	if measureCPU {
		in.HostErr = errors.Join(c.hostErr, hostErr)
		if in.HostErr == nil {
			in.HostBusy = time.Duration(hostB.busy - min(hostB.busy, c.hostA.busy))
		}
		if c.selfErr == nil && selfErr == nil && selfB >= c.selfA {
			in.ProxyCPU = time.Duration(selfB - c.selfA)
		} else if in.HostErr == nil {
			in.HostErr = errors.Join(c.selfErr, selfErr, errors.New("proxy CPU time went backwards"))
		}
	}
	// The tree.
	if treeErr == nil {
		in.TreeFound = true
		if s.b.cgroup != "" {
			in.TreeCPU = time.Duration(cgB - min(cgB, c.cgA))
		} else {
			st := spanStart{m: m, start: s.start}
			ns, short := treeDelta(c.procsA, procsB, st.started)
			in.TreeCPU, in.TreeShort = time.Duration(ns), short
		}
	}
	// The GPU.
	inTree := func(pid uint32) bool {
		for _, ps := range [2][]procSample{c.procsA, procsB} {
			for _, p := range ps {
				if uint32(p.pid) == pid {
					return true
				}
			}
		}
		return false
	}
	switch {
	case !in.TreeFound:
	case m.gpu != nil:
		r := m.gpu.attribute(&c.gpuA, &c.gpuB, inTree, s.start)
		in.GPUUsed, in.GPUErr, in.GPUJoules, in.GPUShare = r.Used, r.Err, r.Joules, r.Share
		in.GPUVanished, in.GPUBusy = r.Vanished, r.Busy
	case m.hostGPU:
		// No NVML: a process that holds no GPU device open had no GPU time.
		for _, p := range procsB {
			if s.b.usesGPU(m.proc, p.pid) {
				in.GPUUsed = true
				in.GPUErr = m.gpuErr
				break
			}
		}
	}
	s.fig = attribute(in)
	if e := m.log.Debug(); e.Enabled() {
		e.Str("backend", s.b.info.Name).Dur("wall", in.Wall).Dur("tree_cpu", in.TreeCPU).
			Dur("proxy_cpu", in.ProxyCPU).Dur("host_busy", in.HostBusy).Bool("overlap", in.Overlap).
			Float64("joules", s.fig.Joules).Str("grade", string(s.fig.Grade)).Str("reason", s.fig.Reason).
			Msg("meter: span")
	}
	return s.fig
}

// begunSince reports whether another local span began after s.
func (m *Meter) begunSince(s *Span) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.begins != s.seq
}

// closeSpan takes s off the open local spans and reports whether another local span overlapped
// it: open when it began, or begun since.
func (m *Meter) closeSpan(s *Span) (overlap bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	overlap = s.overlap || m.begins != s.seq
	m.active--
	return overlap
}

// spanStart tells treeDelta whether a process started within a span: its start time, in clock
// ticks after boot, is not before the span's start. It reads the boot clock once, and only when
// a process appeared, so a span whose tree did not change pays nothing for it.
type spanStart struct {
	m     *Meter
	start time.Time
	read  bool
	ticks uint64
	err   error
}

func (c *spanStart) started(pid int) bool {
	if !c.read {
		c.read = true
		var now uint64
		now, c.err = c.m.bootTicks()
		// The span began this many whole ticks ago (rounded down: a process born in the span's
		// first tick counts).
		back := uint64(time.Since(c.start) / (time.Second / userHZ))
		c.ticks = now - min(now, back)
	}
	st, err := c.m.proc.stat(pid)
	return c.err == nil && err == nil && st.starttime+1 >= c.ticks
}

// treeDelta is the CPU time the tree spent between two samples. A process present at both ends
// adds its difference; a process that appeared adds all its time if it started within the span
// (started(pid)); a process that vanished, or appeared older than the span, makes the count
// short, since its time inside the span is unknown.
func treeDelta(a, b []procSample, started func(pid int) bool) (ns uint64, short bool) {
	for _, e := range b {
		found := false
		for _, x := range a {
			if x.pid == e.pid {
				found = true
				if e.cpu >= x.cpu {
					ns += e.cpu - x.cpu
				} else {
					short = true // the PID was reused
				}
				break
			}
		}
		if !found {
			if started(e.pid) {
				ns += e.cpu
			} else {
				short = true
			}
		}
	}
	for _, x := range a {
		found := false
		for _, e := range b {
			if e.pid == x.pid {
				found = true
				break
			}
		}
		if !found {
			short = true
		}
	}
	return ns, short
}

// treeTTL is how long Begin trusts the tree last known complete (walked, or confirmed by an
// End) without reading the last PID: a child born just before Begin and missed then is found
// by End, which never trusts a tree walked before the last PID moved, and makes the count
// short rather than wrong.
const treeTTL = time.Second

// sampleTree reads the CPU time of the backend's processes: per process, or the cgroup's total.
// atEnd is set at a span's end (see tree).
func (m *Meter) sampleTree(b *backendState, dst []procSample, atEnd bool) ([]procSample, uint64, error) {
	if b.cgroup != "" {
		cg, err := b.cgroupUsage(m.fs)
		if err != nil {
			return dst, 0, err
		}
		if m.gpu != nil || m.hostGPU {
			// Only the GPU attribution needs the cgroup's processes.
			pids, err := cgroupProcs(m.fs, b.cgroup, nil)
			if err != nil {
				return dst, 0, err
			}
			for _, pid := range pids {
				dst = append(dst, procSample{pid: pid})
			}
		}
		return dst, cg, nil
	}
	pids, err := m.tree(b, atEnd)
	if err != nil {
		return dst, 0, err
	}
	gone := false
	for _, pid := range pids {
		ns, err := m.proc.cpuNs(pid)
		if err != nil {
			gone = true
			continue // it exited after the listing; treeDelta sees it vanish
		}
		dst = append(dst, procSample{pid: pid, cpu: ns})
	}
	if gone {
		b.forgetTree(pids) // walk again next time rather than read the dead PID again
	}
	return dst, 0, nil
}

// tree returns the backend's root process and its descendants, root first. It reuses the last
// walk while that is known complete: no PID has been handed out on the host since the walk
// began (the last PID in /proc/loadavg stands still), so no process can have joined the tree
// and no PID in it can have been reused; processes that left fail their CPU read. Otherwise it
// walks again. At a span's end it also checks that the root is still alive (one poll of its
// pidfd). Begin trusts a tree known complete less than treeTTL ago without reading anything.
// The slice is shared: read-only.
func (m *Meter) tree(b *backendState, atEnd bool) ([]int, error) {
	b.mu.Lock()
	if err := b.noProcessLocked(); err != nil {
		b.mu.Unlock()
		return nil, err
	}
	if !atEnd && b.tree != nil && b.treeRoot == b.pid && time.Since(b.treeSeen) < treeTTL {
		t := b.tree
		b.mu.Unlock()
		return t, nil
	}
	b.mu.Unlock()

	cur, curOK := m.proc.lastPID()
	b.mu.Lock()
	if b.tree != nil && b.treeRoot == b.pid && curOK && b.treeCurOK && cur == b.treeCur {
		if !atEnd || b.aliveLocked(m.proc) {
			t := b.tree
			b.treeSeen = time.Now()
			b.mu.Unlock()
			return t, nil
		}
		b.dropLocked()
	}
	b.mu.Unlock()
	// Walk. The last PID was read before the walk began, so a process created during it moves
	// the last PID past cur and is walked for next time.
	root, pids, err := m.walk(b, nil)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	if b.pid == root {
		b.tree, b.treeRoot, b.treeCur, b.treeCurOK, b.treeSeen = pids, root, cur, curOK, time.Now()
		b.gpuHolders = b.gpuHolders[:0]
		b.walks++
	}
	b.mu.Unlock()
	return pids, nil
}

// treePIDs lists the backend's processes afresh: the cgroup's, or the root process and its
// descendants.
func (m *Meter) treePIDs(b *backendState, dst []int) ([]int, error) {
	if b.cgroup != "" {
		return cgroupProcs(m.fs, b.cgroup, dst)
	}
	_, pids, err := m.walk(b, dst)
	return pids, err
}

// walk finds the root process and lists it and its descendants.
func (m *Meter) walk(b *backendState, dst []int) (root int, pids []int, err error) {
	root, err = b.rootPID(m.proc, m.fs)
	if err != nil {
		return 0, dst, err
	}
	return root, m.proc.tree(root, dst), nil
}

// backendState is a backend, its cached root process and its last walked tree. It is safe for
// concurrent use.
type backendState struct {
	info   BackendInfo
	local  bool
	port   int
	cgroup string

	mu      sync.Mutex
	pid     int
	start   uint64 // the cached PID's starttime, to notice a reused PID without a pidfd
	pidfd   int    // a pidfd for pid; -1 without one
	lastTry time.Time
	lastErr error
	// inProcess: the backend listens in this process (a test fake), found at lastTry on the
	// sockets inodes; re-checked every inProcessRecheck.
	inProcess bool
	inodes    []uint64

	tree       []int // the last tree walked from treeRoot; read-only once stored
	treeRoot   int
	treeCur    uint64 // the last PID when that walk began
	treeCurOK  bool
	treeSeen   time.Time // when the tree was last known complete
	walks      uint64    // trees walked, for tests
	gpuHolders []int     // processes of tree seen holding a GPU device open

	cpuStat sampleFile // the cgroup's cpu.stat kept open
}

func newBackendState(b BackendInfo, sysfsRoot string) *backendState {
	st := &backendState{info: b, pidfd: -1}
	st.port, st.local = loopbackPort(b.URL)
	if b.PIDFile != "" {
		st.local = true
	}
	if b.Cgroup != "" {
		st.local = true
		st.cgroup = b.Cgroup
		if !filepath.IsAbs(st.cgroup) {
			st.cgroup = filepath.Join(sysfsRoot, "fs", "cgroup", st.cgroup)
		}
	}
	return st
}

// close releases the pidfd and the files kept open. The state stays usable: it checks its
// root by /proc/<pid>/stat from here on.
func (b *backendState) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pidfd >= 0 {
		closeFD(b.pidfd)
		b.pidfd = -1
	}
	if b.cpuStat != nil {
		b.cpuStat.Close()
	}
}

// rediscoverEvery limits how often a backend whose process was not found is looked for again:
// discovery by port scans every process's descriptors.
const rediscoverEvery = time.Second

// inProcessRecheck is how often a backend found listening in this process is checked again:
// /proc/net/tcp must still show the same listening socket.
const inProcessRecheck = 30 * time.Second

// rootPID returns the backend's main process: the cached one while it lives, else the pid
// file's, else the one listening on the URL's port. A backend listening in this process gives
// errInProcess, decided once and re-checked every inProcessRecheck.
func (b *backendState) rootPID(p *procfs, fsys fileSystem) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inProcess {
		if time.Since(b.lastTry) < inProcessRecheck {
			return 0, errInProcess
		}
		b.lastTry = time.Now()
		if b.inodes != nil {
			if in, err := p.listeners(b.port); err == nil && slices.Equal(in, b.inodes) {
				return 0, errInProcess // the same socket: still ours
			}
		}
		b.inProcess, b.inodes, b.lastErr = false, nil, nil
	}
	if b.pid != 0 {
		if b.aliveLocked(p) {
			return b.pid, nil
		}
		b.dropLocked()
	}
	if b.lastErr != nil && time.Since(b.lastTry) < rediscoverEvery {
		return 0, b.lastErr
	}
	b.lastTry = time.Now()
	pid, inodes, err := b.discover(p, fsys)
	if err == nil && pid == p.self {
		// An in-process upstream (a test fake): its work cannot be told from the proxy's.
		b.inProcess, b.inodes, b.lastErr = true, inodes, nil
		return 0, errInProcess
	}
	if err == nil {
		var st procStat
		if st, err = p.stat(pid); err == nil {
			b.pid, b.start = pid, st.starttime
			b.pidfd = p.openPidfd(pid, st.starttime)
		}
	}
	b.lastErr = err
	if err != nil {
		return 0, err
	}
	return pid, nil
}

// noProcess returns rootPID's error without any read while it is known that the backend has
// no process to meter: it listens in this process, or it was looked for less than
// rediscoverEvery ago and not found.
func (b *backendState) noProcess() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.noProcessLocked()
}

func (b *backendState) noProcessLocked() error {
	switch {
	case b.inProcess && time.Since(b.lastTry) < inProcessRecheck:
		return errInProcess
	case b.pid == 0 && b.lastErr != nil && time.Since(b.lastTry) < rediscoverEvery:
		return b.lastErr
	}
	return nil
}

// aliveLocked reports whether the cached root process still runs: its pidfd has not polled
// readable (one system call; a pidfd never refers to a reused PID), or, without one, its
// /proc/<pid>/stat has the same start time and it is not a zombie.
func (b *backendState) aliveLocked(p *procfs) bool {
	if b.pidfd >= 0 {
		if exited, err := pidfdExited(b.pidfd); err == nil {
			return !exited
		}
	}
	st, err := p.stat(b.pid)
	return err == nil && st.starttime == b.start && st.state != 'Z'
}

// dropLocked forgets the root process and its tree.
func (b *backendState) dropLocked() {
	if b.pidfd >= 0 {
		closeFD(b.pidfd)
		b.pidfd = -1
	}
	b.pid, b.tree, b.gpuHolders = 0, nil, nil
}

// forgetTree drops the cached tree if it is still pids, so that the next span walks again.
func (b *backendState) forgetTree(pids []int) {
	b.mu.Lock()
	if len(b.tree) > 0 && len(pids) > 0 && &b.tree[0] == &pids[0] {
		b.tree = nil
	}
	b.mu.Unlock()
}

// usesGPU reports whether pid holds a GPU device open. A process seen holding one is
// remembered while the tree it belongs to is the cached one: without a new PID it is the same
// process, and a process keeps its device open while it runs. One seen without is scanned again
// every time, since it may open one at any moment.
func (b *backendState) usesGPU(p *procfs, pid int) bool {
	b.mu.Lock()
	held := slices.Contains(b.gpuHolders, pid)
	b.mu.Unlock()
	if held {
		return true
	}
	used, _ := p.usesGPU(pid)
	if used {
		b.mu.Lock()
		if slices.Contains(b.tree, pid) {
			b.gpuHolders = append(b.gpuHolders, pid)
		}
		b.mu.Unlock()
	}
	return used
}

// cgroupUsage reads the cgroup's CPU time, from its cpu.stat kept open. A cgroup removed and
// made again (a service restart) fails the read: the file is opened afresh next time.
func (b *backendState) cgroupUsage(fsys fileSystem) (uint64, error) {
	name := filepath.Join(b.cgroup, "cpu.stat")
	b.mu.Lock()
	f := b.cpuStat
	if f == nil {
		var err error
		if f, err = fsys.Open(name); err != nil {
			b.mu.Unlock()
			return 0, err
		}
		b.cpuStat = f
	}
	b.mu.Unlock()
	v, err := cgroupUsageFile(f, name)
	if err != nil {
		b.mu.Lock()
		if b.cpuStat == f {
			b.cpuStat = nil
			f.Close()
		}
		b.mu.Unlock()
	}
	return v, err
}

func (b *backendState) discover(p *procfs, fsys fileSystem) (int, []uint64, error) {
	if b.info.PIDFile != "" {
		pid, err := readPIDFile(fsys, b.info.PIDFile)
		return pid, nil, err
	}
	if b.port == 0 {
		return 0, nil, fmt.Errorf("%w: %s is not a loopback URL", ErrNoData, b.info.URL)
	}
	inodes, err := p.listeners(b.port)
	if err != nil {
		return 0, nil, err
	}
	pid, err := p.socketOwner(inodes)
	return pid, inodes, err
}

// priceTokens returns J per prompt and per completion token: the first TokenModel whose pattern
// matches the model, else the backend's JoulesPerToken, else the local or remote default.
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
	n, ok := parseUint([]byte(p))
	if !ok || n == 0 || n > 65535 {
		return 0, false
	}
	return int(n), true
}

// hasGPUNodes reports whether devRoot holds a GPU compute device node.
func hasGPUNodes(fsys fileSystem, devRoot string) bool {
	names, _ := fsys.ReadDirNames(devRoot)
	for _, n := range names {
		if gpuNode("/dev/" + n) {
			return true
		}
	}
	dri, _ := fsys.ReadDirNames(filepath.Join(devRoot, "dri"))
	for _, n := range dri {
		if gpuNode("/dev/dri/" + n) {
			return true
		}
	}
	return false
}
