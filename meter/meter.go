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

// Figure is the energy of one call, measured or estimated. The zero value means "not computed".
// Joules = CPUJoules + GPUJoules, except for the token model, which prices the call as a whole
// and leaves both parts 0.
type Figure struct {
	Joules    float64
	Grade     string // GradeMeasured or GradeEstimated
	Coverage  string // CoverageWhole, or CoveragePartial when the GPU part has no figure
	Method    string // "rapl+nvml", "rapl", "cpu-time-model", "token-model", ...
	Reason    string // why not measured or not whole, reasons joined by ";"; "" otherwise
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
// Counters are read directly at both ends of a span rather than sampled in the background: the
// reads cost tens to hundreds of µs per call, a sampler would cost that every period whether or
// not calls run, and span edges would blur by a period. The one background reader, started by
// New, reads RAPL once per quarter of its wrap window so that no span can miss a second wrap.
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
	m.proc = &procfs{fs: o.fs, root: o.ProcRoot}
	if filepath.Clean(o.ProcRoot) == "/proc" {
		m.proc.cpuClock = processCPUClock
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
	if !o.SkipProbe {
		m.probeAtStart()
	}
	if o.RAPL == "on" && m.raplErr != nil {
		m.gpu.close()
		return nil, fmt.Errorf("meter: rapl is on but unusable: %w", m.raplErr)
	}
	if o.NVML == "on" && m.gpuErr != nil {
		m.gpu.close()
		return nil, fmt.Errorf("meter: nvml is on but unusable: %w", m.gpuErr)
	}
	m.hostGPU = m.gpu != nil || hasGPUNodes(o.fs, o.DevRoot)
	m.logCounters()

	m.stop, m.done = make(chan struct{}), make(chan struct{})
	go m.keep()
	return m, nil
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
	})
	return err
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

	startTicks uint64
	raplA      raplReading
	raplErr    error
	hostA      hostCPU
	hostErr    error
	selfA      uint64
	selfErr    error
	procsA     []procSample
	cgA        uint64
	treeErr    error
	gpuA       gpuSnap
}

// procSample is one process's CPU time at one end of a span.
type procSample struct {
	pid int
	cpu uint64 // ns
}

// Begin opens a span right before the upstream request to backend (a BackendInfo name). An
// unknown name is metered as a remote backend.
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

	s.startTicks, _ = m.bootTicks()
	s.procsA, s.cgA, s.treeErr = m.sampleTree(s.b, nil, false)
	if m.gpu != nil {
		m.gpu.snapshot(&s.gpuA)
	}
	s.selfA, s.selfErr = m.selfCPU()
	s.hostA, s.hostErr = m.proc.hostTimes()
	if m.rapl != nil {
		s.raplA, s.raplErr = m.rapl.read()
	}
	s.start = time.Now()
	return s
}

// End closes the span after the last byte of the response and returns its Figure. It costs a
// few hundred µs for a local backend and nothing measurable for a remote one, except that when
// the backend used a GPU it waits, at most Options.NVMLWait (250 ms by default), for NVML's
// counter to update after the span, so a non-streaming response's headers or a stream's
// trailers carry a figure that is not short.
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

	// Host-wide counters first, tightest around the span; then the tree.
	var raplB raplReading
	var raplErr error
	if m.rapl != nil {
		raplB, raplErr = m.rapl.read()
	}
	hostB, hostErr := m.proc.hostTimes()
	selfB, selfErr := m.selfCPU()
	var gpuB gpuSnap
	if m.gpu != nil {
		m.gpu.snapshot(&gpuB)
	}
	procsB, cgB, treeErr := m.sampleTree(s.b, nil, true)

	m.mu.Lock()
	in.Overlap = s.overlap || m.begins != s.seq
	m.active--
	m.mu.Unlock()

	// RAPL.
	switch {
	case m.rapl == nil:
		in.RAPLErr = m.raplErr
	case s.raplErr != nil:
		in.RAPLErr = s.raplErr
	case raplErr != nil:
		in.RAPLErr = raplErr
	default:
		in.RAPLJoules, in.RAPLErr = m.rapl.joules(s.raplA, raplB)
	}
	// Host and proxy CPU time.
	in.HostErr = errors.Join(s.hostErr, hostErr)
	if in.HostErr == nil {
		in.HostBusy = time.Duration(hostB.busy - min(hostB.busy, s.hostA.busy))
	}
	if s.selfErr == nil && selfErr == nil && selfB >= s.selfA {
		in.ProxyCPU = time.Duration(selfB - s.selfA)
	} else if in.HostErr == nil {
		in.HostErr = errors.Join(s.selfErr, selfErr, errors.New("proxy CPU time went backwards"))
	}
	// The tree.
	if s.treeErr == nil && treeErr == nil {
		in.TreeFound = true
		if s.b.cgroup != "" {
			in.TreeCPU = time.Duration(cgB - min(cgB, s.cgA))
		} else {
			ns, short := treeDelta(s.procsA, procsB, func(pid int) bool {
				st, err := m.proc.stat(pid)
				return err == nil && st.starttime+1 >= s.startTicks
			})
			in.TreeCPU, in.TreeShort = time.Duration(ns), short
		}
	}
	// The GPU.
	inTree := func(pid uint32) bool {
		for _, ps := range [2][]procSample{s.procsA, procsB} {
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
		r := m.gpu.attribute(&s.gpuA, &gpuB, inTree, s.start)
		in.GPUUsed, in.GPUErr, in.GPUJoules, in.GPUShare = r.Used, r.Err, r.Joules, r.Share
		in.GPUVanished, in.GPUBusy = r.Vanished, r.Busy
	case m.hostGPU:
		// No NVML: a process that holds no GPU device open had no GPU time.
		for _, p := range procsB {
			if used, _ := m.proc.usesGPU(p.pid); used {
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
			Float64("joules", s.fig.Joules).Str("grade", s.fig.Grade).Str("reason", s.fig.Reason).
			Msg("meter: span")
	}
	return s.fig
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

// treeTTL is how long Begin trusts the process tree that the last span walked. End always
// walks it again, so a child born inside a span (Ollama starting a runner for a model) is
// found; Begin saves a walk that costs one read per thread of every process in the tree.
const treeTTL = time.Second

// sampleTree reads the CPU time of the backend's processes: per process, or the cgroup's total.
// With fresh unset it may reuse the tree walked less than treeTTL ago.
func (m *Meter) sampleTree(b *backendState, dst []procSample, fresh bool) ([]procSample, uint64, error) {
	var pids []int
	var err error
	b.mu.Lock()
	if !fresh && b.cgroup == "" && b.pid != 0 && time.Since(b.treeAt) < treeTTL {
		pids = b.tree
	}
	b.mu.Unlock()
	if pids == nil {
		pids, err = m.treePIDs(b, nil)
		if err == nil && b.cgroup == "" {
			b.mu.Lock()
			b.tree, b.treeAt = pids, time.Now()
			b.mu.Unlock()
		}
	}
	if err != nil {
		return dst, 0, err
	}
	var cg uint64
	if b.cgroup != "" {
		if cg, err = cgroupUsage(m.fs, b.cgroup); err != nil {
			return dst, 0, err
		}
	}
	for _, pid := range pids {
		if b.cgroup != "" {
			dst = append(dst, procSample{pid: pid})
			continue
		}
		ns, err := m.proc.cpuNs(pid)
		if err != nil {
			continue // it exited between the listing and the read; treeDelta sees it vanish
		}
		dst = append(dst, procSample{pid: pid, cpu: ns})
	}
	return dst, cg, nil
}

// treePIDs lists the backend's processes: the cgroup's, or the root process and its
// descendants.
func (m *Meter) treePIDs(b *backendState, dst []int) ([]int, error) {
	if b.cgroup != "" {
		return cgroupProcs(m.fs, b.cgroup, dst)
	}
	root, err := b.rootPID(m.proc, m.fs)
	if err != nil {
		return dst, err
	}
	if root == m.selfPID {
		// An in-process upstream (a test fake): its work cannot be told from the proxy's.
		return dst, errInProcess
	}
	return m.proc.tree(root, dst), nil
}

// backendState is a backend and its cached root process.
type backendState struct {
	info   BackendInfo
	local  bool
	port   int
	cgroup string

	mu      sync.Mutex
	pid     int
	start   uint64 // the cached PID's starttime, to notice a reused PID
	lastTry time.Time
	lastErr error
	tree    []int // the last tree walked from pid; read-only once stored
	treeAt  time.Time
}

func newBackendState(b BackendInfo, sysfsRoot string) *backendState {
	st := &backendState{info: b}
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

// rediscoverEvery limits how often a backend whose process was not found is looked for again:
// discovery by port scans every process's descriptors.
const rediscoverEvery = time.Second

// rootPID returns the backend's main process: the cached one while it lives (same PID, same
// start time), else the pid file's, else the one listening on the URL's port.
func (b *backendState) rootPID(p *procfs, fsys fileSystem) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pid != 0 {
		if st, err := p.stat(b.pid); err == nil && st.starttime == b.start && st.state != 'Z' {
			return b.pid, nil
		}
		b.pid, b.tree = 0, nil
	}
	if b.lastErr != nil && time.Since(b.lastTry) < rediscoverEvery {
		return 0, b.lastErr
	}
	b.lastTry = time.Now()
	pid, err := b.discover(p, fsys)
	if err == nil {
		var st procStat
		if st, err = p.stat(pid); err == nil {
			b.pid, b.start = pid, st.starttime
		}
	}
	b.lastErr = err
	return pid, err
}

func (b *backendState) discover(p *procfs, fsys fileSystem) (int, error) {
	if b.info.PIDFile != "" {
		return readPIDFile(fsys, b.info.PIDFile)
	}
	if b.port == 0 {
		return 0, fmt.Errorf("%w: %s is not a loopback URL", ErrNoData, b.info.URL)
	}
	inodes, err := p.listeners(b.port)
	if err != nil {
		return 0, err
	}
	return p.socketOwner(inodes)
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
