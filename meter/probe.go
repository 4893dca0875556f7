package meter

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// probeTarget is one counter to probe: a monotone reading and how often it updates. A counter
// made of parts (RAPL's zones, NVML's GPUs) names them in parts and reads each with readParts:
// every part must pass on its own, so a frozen part cannot hide behind a live one in a sum.
type probeTarget struct {
	name      string
	read      func() (float64, error) // the sum of the parts
	parts     []string
	readParts func(dst []float64) error // len(dst) == len(parts)
	period    time.Duration
	interval  time.Duration // 0: six periods, at least 20 ms
	// The probe's clock; nil: the real one. Tests give a fake one, whose sleep moves it, so a
	// probe's verdict does not depend on the machine's load.
	now   func() time.Time
	sleep func(time.Duration)
}

// partsOf reads t part by part: readParts, or read as a single part.
func (t probeTarget) partsOf() (names []string, read func(dst []float64) error) {
	if t.readParts != nil {
		return t.parts, t.readParts
	}
	return []string{t.name}, func(dst []float64) error {
		v, err := t.read()
		dst[0] = v
		return err
	}
}

// probeResult is what a probe found.
type probeResult struct {
	Live     bool
	Detail   string
	ReadCost time.Duration // mean cost of one read
	Err      error
}

// runProbe reads t over intervals of 6 update periods (at least 20 ms), at least five of them
// and at least probeWindow in all, with a CPU burner on every core when load is set. The
// counter is live when each of its parts advanced ≥ 5 times in ≥ 80% of the intervals.
func runProbe(t probeTarget, load bool) probeResult {
	now, sleep := t.now, t.sleep
	if now == nil || sleep == nil {
		now, sleep = time.Now, time.Sleep
	}
	interval := t.interval
	if interval == 0 {
		interval = max(6*t.period, 20*time.Millisecond)
	}
	n := max(5, int(math.Ceil(float64(probeWindow)/float64(interval))))
	if load {
		stop := burn(runtime.NumCPU())
		defer stop()
	}
	pause := max(t.period/4, 50*time.Microsecond)
	names, read := t.partsOf()
	last, v := make([]float64, len(names)), make([]float64, len(names))
	if err := read(last); err != nil {
		return probeResult{Detail: err.Error(), Err: err}
	}
	var reads int
	var cost time.Duration
	good := make([]int, len(names))
	advances := make([]int, len(names))
	for range n {
		clear(advances)
		end := now().Add(interval)
		for now().Before(end) {
			t0 := time.Now()
			err := read(v)
			cost += time.Since(t0)
			reads++
			if err != nil {
				return probeResult{Detail: err.Error(), Err: err, ReadCost: cost / time.Duration(reads)}
			}
			for i := range v {
				if v[i] != last[i] {
					advances[i]++
					last[i] = v[i]
				}
			}
			sleep(pause)
		}
		for i, a := range advances {
			if a >= probeAdvances {
				good[i]++
			}
		}
	}
	r := probeResult{ReadCost: cost / time.Duration(max(reads, 1)), Live: true}
	for i, g := range good {
		if float64(g) < probeQuorum*float64(n) {
			r.Live = false
			r.Detail = fmt.Sprintf("%s advanced ≥%d times in only %d of %d intervals of %v", names[i], probeAdvances, g, n, interval)
			return r
		}
	}
	r.Detail = fmt.Sprintf("each of %s advanced ≥%d times in ≥%d of %d intervals of %v", strings.Join(names, ", "), probeAdvances,
		int(math.Ceil(probeQuorum*float64(n))), n, interval)
	return r
}

// burn spins k goroutines until the returned stop is called.
func burn(k int) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for range k {
		wg.Go(func() {
			x := 1.0
			for i := 0; !done.Load(); i++ {
				x = x*1.0000001 + 1e-9
				if i&1023 == 0 {
					runtime.Gosched()
				}
			}
			_ = x
		})
	}
	return func() { done.Store(true); wg.Wait() }
}

// raplTarget probes each zone summed on its own: a frozen zone fails the probe even beside a
// live one.
func (m *Meter) raplTarget() probeTarget {
	r := m.rapl
	t := probeTarget{name: "rapl", period: time.Millisecond, now: m.opts.probeNow, sleep: m.opts.probeSleep,
		read: func() (float64, error) {
			v, err := r.read()
			return float64(v.uj), err
		},
		readParts: func(dst []float64) error {
			for i, z := range r.zones {
				v, err := z.readEnergy(r.fs)
				if err != nil {
					return fmt.Errorf("rapl %s: %w", z.name, err)
				}
				dst[i] = float64(v)
			}
			return nil
		}}
	for _, z := range r.zones {
		t.parts = append(t.parts, z.name)
	}
	return t
}

// nvmlTarget probes each GPU on its own: a frozen GPU fails the probe beside a live one.
func (m *Meter) nvmlTarget() probeTarget {
	g := m.gpu
	t := probeTarget{name: "nvml", period: 100 * time.Millisecond, now: m.opts.probeNow, sleep: m.opts.probeSleep,
		read: func() (float64, error) {
			var sum float64
			for _, d := range g.devs {
				e, err := d.EnergyMJ()
				if err != nil {
					return 0, err
				}
				sum += float64(e)
			}
			return sum, nil
		},
		readParts: func(dst []float64) error {
			for i, d := range g.devs {
				e, err := d.EnergyMJ()
				if err != nil {
					return fmt.Errorf("gpu %d %s: %w", i, d.Name(), err)
				}
				dst[i] = float64(e)
			}
			return nil
		}}
	for i, d := range g.devs {
		t.parts = append(t.parts, fmt.Sprintf("gpu %d %s", i, d.Name()))
	}
	return t
}

func (m *Meter) hostTarget() probeTarget {
	// /proc/stat moves by whole ticks (10 ms per CPU): intervals of 100 ms.
	return probeTarget{name: "host-cpu", period: 10 * time.Millisecond, interval: 100 * time.Millisecond, now: m.opts.probeNow, sleep: m.opts.probeSleep, read: func() (float64, error) {
		h, err := m.proc.hostTimes()
		return float64(h.busy), err
	}}
}

func (m *Meter) procTarget() probeTarget {
	return probeTarget{name: "process-cpu", period: time.Millisecond, now: m.opts.probeNow, sleep: m.opts.probeSleep, read: func() (float64, error) {
		v, err := m.proc.cpuNs(m.selfPID)
		return float64(v), err
	}}
}

func (m *Meter) proxyTarget() probeTarget {
	return probeTarget{name: "proxy-cpu", period: time.Millisecond, now: m.opts.probeNow, sleep: m.opts.probeSleep, read: func() (float64, error) {
		v, err := m.selfCPU()
		return float64(v), err
	}}
}

// Report is what `eoc-proxy meter` prints: each counter, live or why not, and the processes of
// each local backend.
type Report struct {
	Counters []CounterStatus `json:"counters"`
	Backends []BackendStatus `json:"backends"`
}

// CounterStatus is one counter's state.
type CounterStatus struct {
	Name       string   `json:"name"`
	Live       bool     `json:"live"`
	Reason     string   `json:"reason"`           // a Reason* word when not live
	Detail     string   `json:"detail,omitempty"` // the probe's finding or the error
	ReadCostUS float64  `json:"read_cost_us"`
	Watts      *float64 `json:"watts"` // the host's current power by this counter; null when not an energy counter or not live
}

// BackendStatus is one backend and the processes found for it.
type BackendStatus struct {
	Name      string        `json:"name"`
	URL       string        `json:"url"`
	Local     bool          `json:"local"`
	Source    string        `json:"source"` // listen:PORT, pid_file, cgroup, remote
	Reason    string        `json:"reason,omitempty"`
	Detail    string        `json:"detail,omitempty"`
	Processes []ProcessInfo `json:"processes"`
}

// ProcessInfo is one process of a backend's tree.
type ProcessInfo struct {
	PID        int     `json:"pid"`
	PPID       int     `json:"ppid"`
	Comm       string  `json:"comm"`
	CPUSeconds float64 `json:"cpu_seconds"`
	GPU        bool    `json:"gpu"` // holds a GPU device open, or NVML lists it
}

// Status probes every counter (under a CPU load it generates itself, so it takes a few
// seconds with NVML), measures the host's power over powerWindow with each live energy
// counter, and discovers each local backend's processes. It does not change what the meter
// uses. ctx bounds the power measurement.
func (m *Meter) Status(ctx context.Context, powerWindow time.Duration) Report {
	var rep Report
	add := func(t probeTarget, absent error, noData string, energy bool, scale float64) {
		cs := CounterStatus{Name: t.name}
		if absent != nil {
			cs.Reason, cs.Detail = reasonFor(absent, noData), absent.Error()
			rep.Counters = append(rep.Counters, cs)
			return
		}
		res := runProbe(t, true)
		cs.Live, cs.Detail = res.Live, res.Detail
		cs.ReadCostUS = float64(readCost(t).Nanoseconds()) / 1e3
		if !res.Live {
			cs.Reason = ReasonCounterDead
			if res.Err != nil {
				cs.Reason = reasonFor(res.Err, noData)
			}
		}
		if energy && cs.Live {
			if w, err := watts(ctx, t, powerWindow, scale); err == nil {
				cs.Watts = &w
			}
		}
		rep.Counters = append(rep.Counters, cs)
	}
	if m.rapl != nil {
		t := m.raplTarget()
		t.name = "rapl:" + m.rapl.zoneNames()
		add(t, nil, ReasonNoRAPL, true, 1e-6)
	} else {
		add(probeTarget{name: "rapl"}, m.raplErr, ReasonNoRAPL, true, 1e-6)
	}
	if m.gpu != nil {
		add(m.nvmlTarget(), nil, ReasonNoNVML, true, 1e-3)
	} else {
		add(probeTarget{name: "nvml"}, m.gpuErr, ReasonNoNVML, true, 1e-3)
	}
	if m.appleShown() {
		switch m.mac {
		case nil:
			add(probeTarget{name: "proc-energy"}, m.macErr, ReasonNoProcEnergy, true, 1e-9)
			add(probeTarget{name: "gpu-rail"}, m.macErr, ReasonNoGPURail, true, 1e-9)
		default:
			if m.mac.cpu != nil {
				add(m.mac.cpuTarget(m.selfPID), nil, ReasonNoProcEnergy, false, 0) // this process's own energy: no host power
			} else {
				add(probeTarget{name: "proc-energy"}, m.mac.cpuErr, ReasonNoProcEnergy, false, 0)
			}
			if m.mac.gpu != nil {
				add(m.mac.railTarget(), nil, ReasonNoGPURail, true, 1e-9)
			} else {
				add(probeTarget{name: "gpu-rail"}, m.mac.gpuErr, ReasonNoGPURail, true, 1e-9)
			}
		}
	}
	add(m.procTarget(), nil, ReasonCounterError, false, 0)
	add(m.proxyTarget(), nil, ReasonCounterError, false, 0)
	add(m.hostTarget(), nil, ReasonCounterError, false, 0)

	names := make([]string, 0, len(m.backends))
	for n := range m.backends {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		rep.Backends = append(rep.Backends, m.backendStatus(m.backends[n]))
	}
	return rep
}

// readCost is the median cost of one read of t, with no load running.
func readCost(t probeTarget) time.Duration {
	var d [51]time.Duration
	for i := range d {
		t0 := time.Now()
		_, _ = t.read() // only its cost: the probe reported a failing read
		d[i] = time.Since(t0)
	}
	slices.Sort(d[:])
	return d[len(d)/2]
}

// watts reads t over window, without load, and converts the advance to watts.
func watts(ctx context.Context, t probeTarget, window time.Duration, scale float64) (float64, error) {
	a, err := t.read()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(window):
	}
	b, err := t.read()
	if err != nil {
		return 0, err
	}
	return (b - a) * scale / time.Since(t0).Seconds(), nil
}

func (m *Meter) backendStatus(b *backendState) BackendStatus {
	bs := BackendStatus{Name: b.info.Name, URL: b.info.URL, Local: b.local, Processes: []ProcessInfo{}}
	switch {
	case !b.local:
		bs.Source, bs.Reason = "remote", ReasonRemoteBackend
		return bs
	case b.cgroup != "":
		bs.Source = "cgroup:" + b.cgroup
	case b.info.PIDFile != "":
		bs.Source = "pid_file:" + b.info.PIDFile
	default:
		bs.Source = fmt.Sprintf("listen:%d", b.port)
	}
	if m.mac != nil {
		return m.mac.backendStatus(m, b, bs)
	}
	pids, err := m.treePIDs(b, nil)
	if err != nil {
		bs.Reason, bs.Detail = ReasonNoProcess, err.Error()
		return bs
	}
	var gpuPIDs []uint32
	if m.gpu != nil {
		var snap gpuSnap // the process lists only: the energy counters are not needed here
		m.gpu.size(&snap)
		m.gpu.readPIDs(&snap)
		for _, ps := range snap.pids {
			gpuPIDs = append(gpuPIDs, ps...)
		}
	}
	for _, pid := range pids {
		st, err := m.proc.statComm(pid)
		if err != nil {
			continue
		}
		pi := ProcessInfo{PID: pid, PPID: st.ppid, Comm: st.comm}
		if ns, err := m.proc.cpuNs(pid); err == nil {
			pi.CPUSeconds = float64(ns) / 1e9
		}
		for _, g := range gpuPIDs {
			if int(g) == pid {
				pi.GPU = true
			}
		}
		if !pi.GPU && m.hostGPU {
			pi.GPU, _ = m.proc.usesGPU(pid)
		}
		bs.Processes = append(bs.Processes, pi)
	}
	return bs
}
