// Package meter measures, or honestly estimates, the energy of each upstream LLM call.
package meter

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// ErrNoData says a counter has nothing to give on this host (no hardware, no driver, built
// without it). It is not a failure: the meter estimates instead.
var ErrNoData = errors.New("meter: no data")

// errInProcess says a loopback backend listens inside this process, so it has no processes of
// its own to meter.
var errInProcess = fmt.Errorf("%w: the backend listens in this process", ErrNoData)

// errCounterDead says a counter failed its liveness probe.
var errCounterDead = errors.New("meter: counter failed its liveness probe")

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

// Defaults of Options: a counter switch left empty is DefaultSwitch, one of Switches.
const (
	DefaultSwitch    = "auto"
	DefaultSysfsRoot = "/sys"
)

// Switches lists the values of a counter switch (Options.RAPL, NVML, Apple), the default first.
func Switches() []string { return []string{DefaultSwitch, "on", "off"} }

// Options configure a Meter. The zero value is usable: counters on "auto", the real /sys,
// /proc and /dev, and the documented default prices.
type Options struct {
	RAPL      string // auto | on | off ("" is auto); "on" makes New fail without RAPL
	NVML      string // auto | on | off ("" is auto); "on" makes New fail without NVML
	Apple     string // auto | on | off ("" is auto): macOS per-process CPU energy and GPU rail
	SysfsRoot string // default "/sys"
	ProcRoot  string // default "/proc"
	DevRoot   string // default "/dev"

	CPUWattsPerCore float64 // default DefaultCPUWattsPerCore
	GPUWatts        float64 // default DefaultGPUWatts
	TokenModels     []TokenModel
	Backends        []BackendInfo
	// SkipProbe skips the liveness probes New runs on the energy counters (about 0.3 s for
	// RAPL, 3 s for NVML). Tests on fixture counters that never advance set it.
	SkipProbe bool
	Logger    zerolog.Logger
	// SettleInline makes End wait for NVML's counter to update past the span's end (at most
	// about two update periods) and return the settled figure, never a provisional one. Off by
	// default: End returns at once, and Span.Settled gives the settled figure.
	SettleInline bool

	nvmlWait time.Duration // default defaultNVMLWait; tests shorten it
	// The liveness probes' clock (both or neither); nil: the real one. Tests give a fake one.
	probeNow   func() time.Time
	probeSleep func(time.Duration)
	fs         fileSystem       // tests inject refusals
	now        func() time.Time // tests move time
	nvml       func() (*gpus, error)
	apple      func() (*apple, error)
}

// withDefaults checks o and fills in what it leaves unset.
func (o Options) withDefaults() (Options, error) {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&o.RAPL, DefaultSwitch)
	def(&o.NVML, DefaultSwitch)
	def(&o.Apple, DefaultSwitch)
	def(&o.SysfsRoot, DefaultSysfsRoot)
	def(&o.ProcRoot, "/proc")
	def(&o.DevRoot, "/dev")
	for _, s := range []string{o.RAPL, o.NVML, o.Apple} {
		if !slices.Contains(Switches(), s) {
			return o, fmt.Errorf("meter: counter switch %q is not one of auto, on, off", s)
		}
	}
	if o.CPUWattsPerCore < 0 || o.GPUWatts < 0 {
		return o, errors.New("meter: watts must be positive")
	}
	if o.CPUWattsPerCore == 0 {
		o.CPUWattsPerCore = DefaultCPUWattsPerCore
	}
	if o.GPUWatts == 0 {
		o.GPUWatts = DefaultGPUWatts
	}
	if o.nvmlWait <= 0 {
		o.nvmlWait = defaultNVMLWait
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
	if o.apple == nil {
		o.apple = newApple
	}
	return o, nil
}

// Meter opens and closes spans around upstream calls and turns what its counters saw into an
// energy.Figure. Make one with New; the zero Meter is not usable, but a nil *Meter is: its
// spans give token estimates at the default prices. A Meter is safe for concurrent use.
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
	// raplWhy is raplErr as the reason word it gives (errOf(reasonFor(...))), found once: every
	// span's inputs record the word, and finding it in a wrapped error is a chain of errors.Is.
	raplWhy error
	gpu     *gpus
	gpuErr  error
	hostGPU bool   // the host has GPU device nodes, so a tree might use one without NVML
	mac     *apple // the Apple Silicon counters; nil when none is usable
	macErr  error

	selfCPU   func() (uint64, error)
	bootTicks func() (uint64, error)
	selfPID   int

	backends map[string]*backendState

	mu       sync.Mutex
	active   int                   // open local spans
	begins   uint64                // local spans begun, ever
	perToken map[string]hostTokens // by model: what this host measured (learn)

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// New detects the counters once and returns a Meter. It never fails because hardware is
// absent: a missing counter only makes figures estimates, and the reason is kept and logged
// once. It fails on options that make no sense, and when a counter set to "on" is missing.
func New(o Options) (*Meter, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMeter(o)
	if err != nil {
		return nil, err
	}
	// Counters: detected once; a missing one is logged once, with its reason.
	if err := m.detectCounters(); err != nil {
		return nil, err
	}
	if m.raplErr != nil {
		m.raplWhy = errOf(reasonFor(m.raplErr, ReasonNoRAPL))
	}
	m.hostGPU = m.gpu != nil || hasGPUNodes(o.fs, o.DevRoot)
	m.openProcFiles()
	m.logCounters()

	m.stop, m.done = make(chan struct{}), make(chan struct{})
	go m.keep()
	return m, nil
}

// newMeter builds the Meter's process side from checked options: /proc, the clocks, and one
// state per backend. It opens nothing.
func newMeter(o Options) (*Meter, error) {
	m := &Meter{opts: o, log: o.Logger, fs: o.fs, backends: map[string]*backendState{},
		selfCPU: selfCPU, bootTicks: bootTicks, selfPID: os.Getpid()}
	m.proc = &procfs{fs: o.fs, root: o.ProcRoot, self: m.selfPID}
	if filepath.Clean(o.ProcRoot) == "/proc" {
		m.proc.cpuClock, m.proc.pidParent, m.proc.live = processCPUClock, pidParent, true
	}
	for _, b := range o.Backends {
		if _, dup := m.backends[b.Name]; dup {
			return nil, fmt.Errorf("meter: backend %q is listed twice", b.Name)
		}
		m.backends[b.Name] = newBackendState(b, o.SysfsRoot)
	}
	return m, nil
}

// detectCounters finds RAPL and NVML unless switched off, probes them for liveness unless
// SkipProbe, and fails when a counter switched "on" is unusable (releasing what it opened).
func (m *Meter) detectCounters() error {
	o := m.opts
	if o.RAPL == "off" {
		m.raplErr = fmt.Errorf("%w: rapl is off in the config", ErrNoData)
	} else {
		m.rapl, m.raplErr = detectRAPL(o.fs, o.SysfsRoot, o.now, 0)
	}
	if o.NVML == "off" {
		m.gpuErr = fmt.Errorf("%w: nvml is off in the config", ErrNoData)
	} else {
		m.gpu, m.gpuErr = o.nvml()
		if m.gpu != nil {
			m.gpu.wait = o.nvmlWait
		}
	}
	if o.Apple == "off" {
		m.macErr = fmt.Errorf("%w: apple is off in the config", ErrNoData)
	} else {
		m.mac, m.macErr = o.apple()
	}
	detected := m.rapl
	if !o.SkipProbe {
		m.probeAtStart()
	}
	if err := m.keepApple(); err != nil {
		return err
	}
	if detected != nil && m.rapl == nil {
		detected.close() // dead: its files need not stay open
	}
	if o.RAPL == "on" && m.raplErr != nil {
		return errors.Join(fmt.Errorf("meter: rapl is on but unusable: %w", m.raplErr), m.releaseCounters())
	}
	if o.NVML == "on" && m.gpuErr != nil {
		return errors.Join(fmt.Errorf("meter: nvml is on but unusable: %w", m.gpuErr), m.releaseCounters())
	}
	return nil
}

// releaseCounters releases every counter New opened, when New fails after all; it returns
// what failed to close (NVML's shutdown, Apple's readers).
func (m *Meter) releaseCounters() error {
	if m.rapl != nil {
		m.rapl.close()
	}
	return errors.Join(m.gpu.close(), m.mac.close())
}

// keepApple drops the Apple Silicon meter when neither of its counters survived detection
// and the probes, and fails, releasing the other counters, when it was switched "on".
func (m *Meter) keepApple() error {
	if m.mac != nil && m.mac.cpu == nil && m.mac.gpu == nil {
		m.macErr = errors.Join(m.mac.cpuErr, m.mac.gpuErr, m.mac.close())
		m.mac = nil
	}
	if m.opts.Apple == "on" && m.macErr != nil {
		return errors.Join(fmt.Errorf("meter: apple is on but unusable: %w", m.macErr), m.releaseCounters())
	}
	return nil
}

// openProcFiles keeps open the /proc files that spans read: the last PID (the tree cache), and
// /proc/stat for the host's CPU time, which only the 99% rule of a measured CPU figure needs, so
// only when RAPL is live.
func (m *Meter) openProcFiles() {
	root := m.opts.ProcRoot
	if f, ns := m.openLastPID(root); f != nil {
		// The last PID is the reader's PID namespace's, not that of the /proc it sits in: the
		// host's /proc mounted into a container would not show its new processes there.
		// /proc/self names this process by its PID in the mount's namespace, so a mismatch
		// tells. (A fixture /proc has no self.)
		if self, err := m.fs.Readlink(filepath.Join(root, "self")); err == nil && self != strconv.Itoa(m.selfPID) {
			_ = f.Close() // read-only
			m.log.Info().Str("proc", root).Msg("meter: /proc is another PID namespace's; process trees are walked at every span")
		} else {
			m.proc.lastPIDFile, m.proc.lastPIDNs = f, ns
		}
	}
	if m.rapl != nil {
		if f, err := m.fs.Open(filepath.Join(root, "stat")); err == nil {
			m.proc.hostStat = f
		}
	}
}

// openLastPID opens the file that tells the last PID handed out: sys/kernel/ns_last_pid (ns
// set), one number, which the kernel renders in about three quarters of the time loadavg takes
// (and with no sum over the CPUs), else loadavg, whose last field is the same number. It needs
// CONFIG_CHECKPOINT_RESTORE, and a container may mask /proc/sys. nil when neither opens.
func (m *Meter) openLastPID(root string) (f sampleFile, ns bool) {
	if f, err := m.fs.Open(filepath.Join(root, "sys", "kernel", "ns_last_pid")); err == nil {
		return f, true
	}
	if f, err := m.fs.Open(filepath.Join(root, "loadavg")); err == nil {
		return f, false
	}
	return nil, false
}

// probeAtStart runs the liveness probes and drops a counter that fails.
func (m *Meter) probeAtStart() {
	var wg sync.WaitGroup
	if m.rapl != nil {
		wg.Go(func() {
			res := runProbe(m.raplTarget(), true)
			if !res.Live && res.Err == nil && len(m.rapl.fallback) > 0 {
				// A frozen psys: the packages and DRAM it covers may still count.
				psys := res.Detail
				if err := m.rapl.useFallback(); err != nil {
					res.Detail += "; " + err.Error()
				} else {
					res = runProbe(m.raplTarget(), true)
					m.log.Info().Str("psys", psys).Msg("meter: rapl psys failed its liveness probe; using the packages and DRAM")
				}
			}
			if !res.Live {
				m.rapl, m.raplErr = nil, fmt.Errorf("rapl: %w: %s", errCounterDead, res.Detail)
			}
		})
	}
	if m.gpu != nil {
		wg.Go(func() {
			if res := runProbe(m.nvmlTarget(), false); !res.Live {
				m.gpuErr = errors.Join(fmt.Errorf("nvml: %w: %s", errCounterDead, res.Detail), m.gpu.close())
				m.gpu = nil
			} else if err := m.gpu.calibrate(); err != nil {
				m.log.Info().Err(err).Msg("meter: nvml: update period not measured; assuming 100 ms")
			}
		})
	}
	if m.mac != nil {
		wg.Go(func() { m.mac.probe(m.selfPID) })
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
		m.log.Info().Str("counter", "nvml").Int("devices", len(m.gpu.devs)).Dur("period", cmp.Or(m.gpu.period, nvmlPeriod)).Msg("meter: counter live")
	} else {
		m.log.Info().Str("counter", "nvml").Str("reason", reasonFor(m.gpuErr, ReasonNoNVML)).
			Err(m.gpuErr).Bool("gpu_nodes", m.hostGPU).Msg("meter: counter unavailable")
	}
	for _, c := range m.appleStates() {
		if c.Live {
			m.log.Info().Str("counter", c.Name).Msg("meter: counter live")
		} else {
			m.log.Info().Str("counter", c.Name).Str("reason", c.Reason).Err(c.err).Msg("meter: counter unavailable")
		}
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
		err = errors.Join(g.close(), m.mac.close())
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
	Name   string // "rapl", "nvml"; on macOS also "proc-energy" and "gpu-rail"
	Live   bool
	Reason string // when not live, a Reason* word: no-rapl, no-nvml, permission-denied, counter-dead, ...
	err    error
}

// Counters reports the energy counters the meter uses, as detected and probed by New. It reads
// nothing, so a metrics scrape may call it freely (eoc_meter_counter_live{counter}). A nil Meter
// uses none. The slice is the caller's.
func (m *Meter) Counters() []CounterState {
	if m == nil {
		return []CounterState{{Name: "rapl", Reason: ReasonNoRAPL}, {Name: "nvml", Reason: ReasonNoNVML}}
	}
	return append([]CounterState{
		{Name: "rapl", Live: m.rapl != nil, Reason: reasonFor(m.raplErr, ReasonNoRAPL)},
		{Name: "nvml", Live: m.gpu != nil, Reason: reasonFor(m.gpuErr, ReasonNoNVML)},
	}, m.appleStates()...)
}

// appleShown reports whether the Apple Silicon counters are worth reporting: on macOS, or
// when in use (a test's fakes).
func (m *Meter) appleShown() bool {
	return m.mac != nil || (runtime.GOOS == "darwin" && !errors.Is(m.macErr, errNotDarwin))
}

// appleStates are the Apple Silicon counters, "proc-energy" and "gpu-rail": none off macOS.
func (m *Meter) appleStates() []CounterState {
	if !m.appleShown() {
		return nil
	}
	cpuErr, gpuErr := m.macErr, m.macErr
	if m.mac != nil {
		cpuErr, gpuErr = m.mac.cpuErr, m.mac.gpuErr
	}
	return []CounterState{
		{Name: "proc-energy", Live: m.mac != nil && m.mac.cpu != nil, Reason: reasonFor(cpuErr, ReasonNoProcEnergy), err: cpuErr},
		{Name: "gpu-rail", Live: m.mac != nil && m.mac.gpu != nil, Reason: reasonFor(gpuErr, ReasonNoGPURail), err: gpuErr},
	}
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
