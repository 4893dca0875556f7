package meter

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"
)

// The Apple Silicon meter: the CPU energy of each process of the backend's tree
// (proc_pid_rusage), the GPU rail (IOReport "Energy Model" / "GPU Energy") and each
// IOAccelerator client's GPU time, read at both ends of a span and put through the same rules
// as RAPL and NVML (apple_rules.go). The system calls sit behind two small interfaces:
// apple_darwin.go implements them without cgo, tests inject fakes.

// appleCPU reads per-process and per-thread CPU energy.
type appleCPU interface {
	// ThreadEnergy is the calling OS thread's own CPU energy, nJ (PROC_PIDTHREADCOUNTS).
	ThreadEnergy() (uint64, error)
	// Rusage is a process's rusage_info_v6.
	Rusage(pid int) (rusageV6, error)
	// Children appends the PIDs of pid's child processes to dst.
	Children(pid int, dst []int) ([]int, error)
	// Timebase is the mach absolute time unit as numer/denom ns.
	Timebase() (numer, denom uint32)
}

// appleGPUReader reads the GPU rail and the GPU clients.
type appleGPUReader interface {
	// Rail is the GPU's energy, nJ, as IOReport last published it.
	Rail() (uint64, error)
	// Clients appends every IOAccelerator user client to dst.
	Clients(dst []gpuClient) ([]gpuClient, error)
}

// errNotDarwin says the Apple Silicon counters exist only on macOS.
var errNotDarwin = fmt.Errorf("%w: the Apple Silicon counters need macOS", ErrNoData)

// errNoPIDFile says a backend on macOS has no pid file: its process is found from one only.
var errNoPIDFile = fmt.Errorf("%w: on macOS a backend's process is found from process.pid_file only", ErrNoData)

// apple is the Apple Silicon meter. A nil part is a counter not in use. It is safe for
// concurrent use as long as its readers are.
type apple struct {
	cpu           appleCPU
	cpuErr        error
	gpu           appleGPUReader
	gpuErr        error
	sleep         func(time.Duration)
	now           func() time.Time
	poll          time.Duration // how often the rail is polled for its next change
	probeInterval time.Duration // the liveness probes' interval; 0: six update periods
	// The liveness probes' clock (both or neither); nil: the real one. Tests give a fake one,
	// whose sleep moves it, so a probe's verdict does not depend on the machine's load.
	probeNow   func() time.Time
	probeSleep func(time.Duration)
	closer     func() error
}

// appleSnap is one end of a span on macOS.
type appleSnap struct {
	procs   []procSample // CPU energy per process, nJ
	cpu     []procSample // CPU time per process, ns
	cpuErr  error
	clients []gpuClient
	gpuErr  error
}

// appleSpan is what a span on macOS read at Begin; the rail's reading at its next change
// arrives on railA while the call runs.
type appleSpan struct {
	pids    []int // the tree at Begin
	pidsErr error
	a       appleSnap
	railA   chan railReading
}

type railReading struct {
	v   uint64
	err error
}

// tree lists the backend's root process, from its pid file, and its descendants.
func (a *apple) tree(m *Meter, b *backendState, dst []int) ([]int, error) {
	if b.info.PIDFile == "" {
		return dst, errNoPIDFile
	}
	if a.cpu == nil {
		// libproc lists the children; without it the tree, and so its GPU clients, is unknown.
		return dst, a.cpuErr
	}
	root, err := readPIDFile(m.fs, b.info.PIDFile)
	if err != nil {
		return dst, err
	}
	dst = append(dst, root)
	for i := 0; i < len(dst) && i < maxTree; i++ {
		if dst, err = a.cpu.Children(dst[i], dst); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// maxTree bounds the processes of one backend tree on macOS.
const maxTree = 256

// readCPU reads the CPU energy and time of pids, after the reading thread was seen to leave its
// core (leaveCore): only then are the processes' counts current. A process that cannot be read
// is left out, so the delta sees it vanish.
func (a *apple) readCPU(pids []int, s *appleSnap) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s.procs, s.cpu = s.procs[:0], s.cpu[:0]
	if s.cpuErr = leaveCore(a.cpu.ThreadEnergy, a.sleep); s.cpuErr != nil {
		return
	}
	numer, denom := a.cpu.Timebase()
	for _, pid := range pids {
		ru, err := a.cpu.Rusage(pid)
		if err != nil {
			continue
		}
		s.procs = append(s.procs, procSample{pid: pid, cpu: ru.energyNJ})
		s.cpu = append(s.cpu, procSample{pid: pid, cpu: machToNs(ru.cpuMach, numer, denom)})
	}
}

// railNext reads the rail at its next change; the GPU counts as busy when any client's GPU
// time advanced meanwhile.
func (a *apple) railNext() (uint64, error) {
	var first []gpuClient
	var firstErr error
	first, firstErr = a.gpu.Clients(nil)
	busy := func() bool {
		if firstErr != nil {
			return true // unknown: assume busy, so a held rail is not trusted
		}
		now, err := a.gpu.Clients(nil)
		if err != nil {
			return true
		}
		for _, y := range now {
			for _, x := range first {
				if x.id == y.id && y.ns != x.ns {
					return true
				}
			}
		}
		return false
	}
	return railNext(a.gpu.Rail, busy, a.sleep, a.now, a.poll)
}

// begin reads the start of a span: the tree's CPU energy and the GPU clients now, and the rail
// at its next change, in the background.
func (a *apple) begin(m *Meter, s *Span) *appleSpan {
	b := s.b
	sp := &appleSpan{}
	sp.pids, sp.pidsErr = a.tree(m, b, nil)
	if sp.pidsErr != nil {
		return sp
	}
	b.edges.mu.Lock()
	a.snap(sp.pids, &sp.a)
	if sp.a.cpuErr == nil {
		m.book(b, s, true, sp.a.cpu, 0, m.opts.now())
	}
	b.edges.mu.Unlock()
	if a.gpu != nil {
		sp.railA = make(chan railReading, 1)
		go func() {
			v, err := a.railNext()
			sp.railA <- railReading{v, err}
		}()
	}
	return sp
}

// snap reads the CPU side of one end of a span, and the GPU clients.
func (a *apple) snap(pids []int, s *appleSnap) {
	if a.cpu != nil {
		a.readCPU(pids, s)
	}
	if a.gpu != nil {
		s.clients, s.gpuErr = a.gpu.Clients(s.clients[:0])
	}
}

// end reads the end of a span and puts what the counters saw into in.
func (a *apple) end(m *Meter, s *Span, in *spanSample) {
	b, sp := s.b, s.mac
	in.PerProcess, in.GPUNoData = true, ReasonNoGPURail
	in.GPUMethod = MethodIOReport
	if sp.pidsErr != nil {
		return // TreeFound stays false: priced by tokens, reason no-process
	}
	pids, err := a.tree(m, b, nil)
	if err != nil {
		b.edges.mu.Lock()
		b.edges.leave(s)
		b.edges.mu.Unlock()
		return
	}
	var e appleSnap
	b.edges.mu.Lock()
	a.snap(pids, &e)
	booked := sp.a.cpuErr == nil && e.cpuErr == nil
	if booked {
		m.book(b, s, false, e.cpu, 0, m.opts.now())
	} else {
		b.edges.leave(s)
	}
	b.edges.mu.Unlock()
	in.TreeFound = true
	a.endCPU(sp, &e, in)
	if booked && s.share.split {
		// Calls on this backend overlapped: each is billed its share of the tree's CPU time,
		// as on Linux (see edgeBook); the shares add up to the tree's time over their union.
		in.TreeCPU, in.TreeShort = time.Duration(s.share.cpu), in.TreeShort || s.share.short
		in.Split, in.WallShare = true, s.share.wall
		in.TreeAlone, in.TreeUnion = time.Duration(s.share.alone), time.Duration(s.share.union)
	}
	inTree := func(pid int) bool { return slices.Contains(pids, pid) || slices.Contains(sp.pids, pid) }
	a.endGPU(sp, &e, inTree, in)
}

// endCPU puts the tree's own CPU energy, and its CPU time for the estimate, into in. A process
// born mid-span makes the counts short, like one that vanished.
func (a *apple) endCPU(sp *appleSpan, e *appleSnap, in *spanSample) {
	never := func(int) bool { return false }
	ns, short := treeDelta(sp.a.cpu, e.cpu, never)
	in.TreeCPU, in.TreeShort = time.Duration(ns), short
	switch {
	case a.cpu == nil:
		in.RAPLErr = a.cpuErr
	case sp.a.cpuErr != nil || e.cpuErr != nil:
		in.RAPLErr = errors.Join(sp.a.cpuErr, e.cpuErr)
	default:
		// The same processes as the CPU time's, from the same reads: the same shortness.
		nj, _ := treeDelta(sp.a.procs, e.procs, never)
		in.RAPLJoules = float64(nj) / 1e9
	}
}

// endGPU puts the GPU side into in: the clients' GPU time, and, only when the tree had some,
// the rail at its next change after the span.
func (a *apple) endGPU(sp *appleSpan, e *appleSnap, inTree func(int) bool, in *spanSample) {
	if a.gpu == nil {
		// Without the clients the tree's GPU time is unknown: an Apple Silicon GPU is always
		// there, so the figure assumes it was used and estimates it.
		in.GPUUsed, in.GPUErr = true, a.gpuErr
		return
	}
	if sp.a.gpuErr != nil || e.gpuErr != nil {
		in.GPUUsed, in.GPUErr = true, errors.Join(sp.a.gpuErr, e.gpuErr)
		return
	}
	if r := appleGPU(sp.a.clients, e.clients, inTree, 0, 0, nil); !r.Used {
		return // no GPU time: exactly 0, no rail needed
	}
	railB, railErr := a.railNext()
	ra := <-sp.railA
	if ra.err != nil {
		railErr = ra.err
	}
	r := appleGPU(sp.a.clients, e.clients, inTree, ra.v, railB, railErr)
	in.GPUUsed, in.GPUErr, in.GPUJoules, in.GPUShare, in.GPUVanished = r.Used, r.Err, r.Joules, r.Share, r.Vanished
}

// cpuTarget is the probe target of the per-process CPU energy counter: this process's own.
func (a *apple) cpuTarget(self int) probeTarget {
	return probeTarget{name: "proc-energy", period: time.Millisecond, interval: a.probeInterval, now: a.probeNow, sleep: a.probeSleep, read: func() (float64, error) {
		ru, err := a.cpu.Rusage(self)
		return float64(ru.energyNJ), err
	}}
}

// railTarget is the probe target of the GPU rail.
func (a *apple) railTarget() probeTarget {
	return probeTarget{name: "gpu-rail", period: 100 * time.Millisecond, interval: a.probeInterval, now: a.probeNow, sleep: a.probeSleep, read: func() (float64, error) {
		v, err := a.gpu.Rail()
		return float64(v), err
	}}
}

// probe runs the liveness probes at start and drops a counter that fails: the CPU energy
// under a CPU load, the rail as it is.
func (a *apple) probe(self int) {
	if a.cpu != nil {
		if res := runProbe(a.cpuTarget(self), true); !res.Live {
			a.cpu, a.cpuErr = nil, fmt.Errorf("proc-energy: %w: %s", errCounterDead, res.Detail)
		}
	}
	if a.gpu != nil {
		if res := runProbe(a.railTarget(), false); !res.Live {
			a.gpu, a.gpuErr = nil, fmt.Errorf("gpu-rail: %w: %s", errCounterDead, res.Detail)
		}
	}
}

func (a *apple) close() error {
	if a == nil || a.closer == nil {
		return nil
	}
	return a.closer()
}

// backendStatus lists a backend's processes on macOS for `eoc-proxy meter`: each with its CPU
// time and whether it holds a GPU client.
func (a *apple) backendStatus(m *Meter, b *backendState, bs BackendStatus) BackendStatus {
	pids, err := a.tree(m, b, nil)
	if err != nil {
		bs.Reason, bs.Detail = ReasonNoProcess, err.Error()
		return bs
	}
	var clients []gpuClient
	if a.gpu != nil {
		clients, _ = a.gpu.Clients(nil)
	}
	numer, denom := a.cpu.Timebase()
	for _, pid := range pids {
		pi := ProcessInfo{PID: pid}
		if ru, err := a.cpu.Rusage(pid); err == nil {
			pi.CPUSeconds = float64(machToNs(ru.cpuMach, numer, denom)) / 1e9
		}
		for _, c := range clients {
			pi.GPU = pi.GPU || c.pid == pid
		}
		bs.Processes = append(bs.Processes, pi)
	}
	return bs
}
