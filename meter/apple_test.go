package meter

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// fakeMac stands in for libproc and IOKit/IOReport. It is safe for concurrent use.
type fakeMac struct {
	mu          sync.Mutex
	thread      []uint64 // successive reads of the reading thread's energy; the last repeats
	threadReads int
	rusageReads int
	procs       map[int]rusageV6
	children    map[int][]int
	rail        uint64 // the rail reads rail, then rail+1, alternately: it always moves
	railReads   int
	frozenRail  bool
	clients     []gpuClient
}

func (f *fakeMac) ThreadEnergy() (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := min(f.threadReads, len(f.thread)-1)
	f.threadReads++
	return f.thread[i], nil
}

func (f *fakeMac) Rusage(pid int) (rusageV6, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rusageReads++
	r, ok := f.procs[pid]
	if !ok {
		return rusageV6{}, errors.New("no such process")
	}
	return r, nil
}

func (f *fakeMac) Children(pid int, dst []int) ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append(dst, f.children[pid]...), nil
}

func (f *fakeMac) Timebase() (uint32, uint32) { return 125, 3 }

func (f *fakeMac) Rail() (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.railReads++
	if f.frozenRail {
		return f.rail, nil
	}
	return f.rail + uint64(f.railReads%2), nil
}

func (f *fakeMac) Clients(dst []gpuClient) ([]gpuClient, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append(dst, f.clients...), nil
}

// leaves makes the reading thread's count rise at every read: it always leaves its core.
func (f *fakeMac) leaves() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.thread = f.thread[:0]
	for i := range 64 {
		f.thread = append(f.thread, uint64(i*1000))
	}
}

func (f *fakeMac) set(fn func(f *fakeMac)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// TestLeaveCore: the processes are read only after the reading thread's own count rose across
// a sleep (50 µs, 200 µs, 1 ms, 5 ms); a thread never seen to leave is an error.
func TestLeaveCore(t *testing.T) {
	tests := []struct {
		name   string
		counts []uint64
		sleeps []time.Duration
		err    error
	}{
		{name: "rose across the first sleep", counts: []uint64{10, 11},
			sleeps: []time.Duration{50 * time.Microsecond}},
		{name: "rose across the third sleep", counts: []uint64{10, 10, 10, 12},
			sleeps: []time.Duration{50 * time.Microsecond, 200 * time.Microsecond, time.Millisecond}},
		{name: "rose before the first sleep only: not seen to leave", counts: []uint64{10, 10, 10, 10, 10},
			sleeps: threadLeaveSleeps[:], err: errThreadStayed},
		{name: "never rose", counts: []uint64{7},
			sleeps: threadLeaveSleeps[:], err: errThreadStayed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			i := 0
			own := func() (uint64, error) {
				v := tc.counts[min(i, len(tc.counts)-1)]
				i++
				return v, nil
			}
			var slept []time.Duration
			err := leaveCore(own, func(d time.Duration) { slept = append(slept, d) })
			if !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if len(slept) != len(tc.sleeps) {
				t.Fatalf("slept %v, want %v", slept, tc.sleeps)
			}
			for k := range slept {
				if slept[k] != tc.sleeps[k] {
					t.Fatalf("slept %v, want %v", slept, tc.sleeps)
				}
			}
		})
	}
	t.Run("read error", func(t *testing.T) {
		boom := errors.New("boom")
		if err := leaveCore(func() (uint64, error) { return 0, boom }, func(time.Duration) {}); !errors.Is(err, boom) {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestReadCPUWaitsForLeave: a read whose thread was not seen to leave reads no process at all
// and is an error.
func TestReadCPUWaitsForLeave(t *testing.T) {
	f := &fakeMac{thread: []uint64{5}, procs: map[int]rusageV6{1: {energyNJ: 100}}}
	a := &apple{cpu: f, sleep: func(time.Duration) {}}
	var s appleSnap
	a.readCPU([]int{1}, &s)
	if !errors.Is(s.cpuErr, errThreadStayed) || len(s.procs) != 0 || f.rusageReads != 0 {
		t.Fatalf("stayed thread: err %v, procs %v, %d rusage reads", s.cpuErr, s.procs, f.rusageReads)
	}
	f.leaves()
	a.readCPU([]int{1}, &s)
	if s.cpuErr != nil || len(s.procs) != 1 || s.procs[0].cpu != 100 {
		t.Fatalf("left: err %v, procs %v", s.cpuErr, s.procs)
	}
}

func threadCounts(n int, energies ...uint64) []byte {
	b := make([]byte, max(n, threadCountsSize))
	binary.LittleEndian.PutUint16(b, uint16(len(energies)))
	for l, e := range energies {
		off := threadCountsHeader + l*threadCountsLevel
		if off+ptcdEnergyNJOff+8 <= len(b) {
			binary.LittleEndian.PutUint64(b[off:], 111)   // instructions
			binary.LittleEndian.PutUint64(b[off+8:], 222) // cycles
			binary.LittleEndian.PutUint64(b[off+ptcdEnergyNJOff:], e)
		}
	}
	return b
}

// TestDecodeThreadCounts: the one layout known (88 bytes, two performance levels) is read;
// any other size is refused.
func TestDecodeThreadCounts(t *testing.T) {
	tests := []struct {
		name string
		buf  []byte
		n    int
		want uint64
		ok   bool
	}{
		{name: "88 bytes, two levels", buf: threadCounts(88, 1500, 250), n: 88, want: 1750, ok: true},
		{name: "one level (48 bytes)", buf: threadCounts(48, 1500), n: 48},
		{name: "three levels (128 bytes)", buf: threadCounts(128, 1, 2, 3), n: 128},
		{name: "96 bytes", buf: threadCounts(96, 1, 2), n: 96},
		{name: "nothing", buf: threadCounts(88, 1, 2), n: 0},
		{name: "88 claimed, short buffer", buf: make([]byte, 80), n: 88},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeThreadCounts(tc.buf, tc.n)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, errLayout)) || got != tc.want {
				t.Fatalf("= %d, %v; want %d, ok %v", got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestDecodeRusageV6(t *testing.T) {
	b := make([]byte, rusageV6Size)
	le := binary.LittleEndian
	le.PutUint64(b[riUserTimeOff:], 3000)
	le.PutUint64(b[riSystemTimeOff:], 600)
	le.PutUint64(b[riEnergyNJOff:], 9_876_543)
	le.PutUint64(b[riEnergyNJOff+8:], 1) // ri_penergy_nj: not the process's energy
	got, err := decodeRusageV6(b)
	if err != nil || got != (rusageV6{energyNJ: 9_876_543, cpuMach: 3600}) {
		t.Fatalf("= %+v, %v", got, err)
	}
	for _, n := range []int{0, rusageV6Size - 8, rusageV6Size + 8} {
		if _, err := decodeRusageV6(make([]byte, n)); !errors.Is(err, errLayout) {
			t.Fatalf("%d bytes: err = %v", n, err)
		}
	}
	if ns := machToNs(3, 125, 3); ns != 125 {
		t.Fatalf("machToNs = %d", ns)
	}
	for s, want := range map[string]int{"pid 1234, ollama": 1234, "pid 7,x": 7, "pid x, y": 0, "1234": 0, "pid 0, k": 0} {
		if pid, ok := parseClientCreator(s); pid != want || ok != (want > 0) {
			t.Fatalf("parseClientCreator(%q) = %d, %v", s, pid, ok)
		}
	}
}

// TestRailNext: a snapshot reads the rail at its next change, however long it held (up to
// railHold); a rail held for railHold while the GPU is busy is not current.
func TestRailNext(t *testing.T) {
	tests := []struct {
		name   string
		values []uint64 // one per read; the last repeats
		busy   bool
		want   uint64
		err    error
	}{
		{name: "next change after a held step", values: []uint64{100, 100, 100, 100, 140}, busy: true, want: 140},
		{name: "changes at once", values: []uint64{100, 101}, busy: true, want: 101},
		{name: "held 1 s under load: stale", values: []uint64{100}, busy: true, err: ErrCounterStale},
		{name: "held 1 s with the GPU idle: current", values: []uint64{100}, want: 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			i := 0
			read := func() (uint64, error) {
				v := tc.values[min(i, len(tc.values)-1)]
				i++
				return v, nil
			}
			got, err := railNext(read, func() bool { return tc.busy }, clk.Advance, clk.Now, 100*time.Millisecond)
			if !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) || got != tc.want {
				t.Fatalf("= %d, %v; want %d, %v", got, err, tc.want, tc.err)
			}
			if tc.err == nil && len(tc.values) > 1 && i != len(tc.values) {
				t.Fatalf("read %d times, want %d (the next change)", i, len(tc.values))
			}
		})
	}
}

// TestAppleGPU: exact zero, the sole-user rule at 99% and 98.9%, vanished clients, and never a
// time share of the rail, through attribute.
func TestAppleGPU(t *testing.T) {
	tree := func(pid int) bool { return pid == 10 || pid == 11 }
	const railA, railB = 1_000_000_000, 41_000_000_000 // 40 J
	c := func(id uint64, pid int, ns uint64) gpuClient { return gpuClient{id: id, pid: pid, ns: ns} }
	tests := []struct {
		name    string
		a, b    []gpuClient
		railErr error
		want    energy.Figure
	}{
		{name: "no GPU time: exactly 0, whatever the rail",
			a: []gpuClient{c(1, 10, 500), c(2, 99, 0)}, b: []gpuClient{c(1, 10, 500), c(2, 99, 9000)},
			want: energy.Figure{Joules: 3, CPUJoules: 3, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: MethodProcEnergy}},
		{name: "sole user at 99%: the rail's delta, measured",
			a: []gpuClient{c(1, 10, 0), c(2, 99, 0)}, b: []gpuClient{c(1, 10, 990), c(2, 99, 10)},
			want: energy.Figure{Joules: 43, CPUJoules: 3, GPUJoules: 40, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: "proc-energy+ioreport"}},
		{name: "98.9%: no GPU figure",
			a: []gpuClient{c(1, 10, 0), c(2, 99, 0)}, b: []gpuClient{c(1, 10, 989), c(2, 99, 11)},
			want: energy.Figure{Joules: 3, CPUJoules: 3, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: MethodProcEnergy, Reason: ReasonGPUShared}},
		{name: "half: never split by time share",
			a: []gpuClient{c(1, 10, 0), c(2, 99, 0)}, b: []gpuClient{c(1, 10, 500), c(2, 99, 500)},
			want: energy.Figure{Joules: 3, CPUJoules: 3, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: MethodProcEnergy, Reason: ReasonGPUShared}},
		{name: "a client of the tree created mid-span counts whole",
			a: []gpuClient{c(2, 99, 0)}, b: []gpuClient{c(3, 11, 1000), c(2, 99, 0)},
			want: energy.Figure{Joules: 43, CPUJoules: 3, GPUJoules: 40, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: "proc-energy+ioreport"}},
		{name: "a client of the tree vanished: no GPU figure",
			a: []gpuClient{c(1, 10, 0), c(3, 11, 50)}, b: []gpuClient{c(1, 10, 1000)},
			want: energy.Figure{Joules: 3, CPUJoules: 3, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: MethodProcEnergy, Reason: ReasonGPUVanished}},
		{name: "a client of the tree vanished without other GPU time: still no figure",
			a: []gpuClient{c(3, 11, 50)}, b: nil,
			want: energy.Figure{Joules: 3, CPUJoules: 3, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: MethodProcEnergy, Reason: ReasonGPUVanished}},
		{name: "another client vanished: the share is unknown",
			a: []gpuClient{c(1, 10, 0), c(2, 99, 0)}, b: []gpuClient{c(1, 10, 1000)},
			want: energy.Figure{Joules: 3, CPUJoules: 3, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: MethodProcEnergy, Reason: ReasonGPUShared}},
		{name: "stale rail: the estimate",
			a: []gpuClient{c(1, 10, 0)}, b: []gpuClient{c(1, 10, 1000)}, railErr: errRailStale,
			want: energy.Figure{Joules: 3 + 300*2, CPUJoules: 3, GPUJoules: 600, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "proc-energy+gpu-model", Reason: ReasonCounterStale}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := appleGPU(tc.a, tc.b, tree, railA, railB, tc.railErr)
			in := spanSample{Local: true, TreeFound: true, PerProcess: true, RAPLJoules: 3, Wall: 2 * time.Second,
				GPUWatts: 300, GPUNoData: ReasonNoGPURail, GPUMethod: MethodIOReport,
				GPUUsed: r.Used, GPUErr: r.Err, GPUJoules: r.Joules, GPUShare: r.Share, GPUVanished: r.Vanished}
			if got := attribute(in); !closeFigure(got, tc.want) || got.GPUJoules != tc.want.GPUJoules {
				t.Fatalf("attribute =\n %+v\nwant\n %+v\n(gpu %+v)", got, tc.want, r)
			}
		})
	}
	if r := appleGPU(nil, []gpuClient{c(1, 10, 5)}, tree, 10, 5, nil); r.Err == nil {
		t.Fatal("a rail that went backwards gave no error")
	}
}

// TestApplePerProcessRules: the tree's own energy needs no 99% rule, but a short count or an
// overlap is never a measured figure.
func TestApplePerProcessRules(t *testing.T) {
	base := spanSample{Local: true, TreeFound: true, PerProcess: true, RAPLJoules: 3, TreeCPU: time.Second, CPUWatts: 10,
		HostBusy: 100 * time.Second, PromptTokens: 10, CompletionTokens: 10, JPerPrompt: 0.1, JPerCompletion: 1}
	tests := []struct {
		name string
		mod  func(*spanSample)
		want energy.Figure
	}{
		{name: "own energy, host busy with others: measured", mod: func(*spanSample) {},
			want: energy.Figure{Joules: 3, CPUJoules: 3, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: MethodProcEnergy}},
		{name: "a process vanished: token model", mod: func(s *spanSample) { s.TreeShort = true },
			want: energy.Figure{Joules: 11, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: MethodTokenModel, Reason: ReasonProcessVanished}},
		{name: "overlap: CPU time model", mod: func(s *spanSample) { s.Overlap = true },
			want: energy.Figure{Joules: 10, CPUJoules: 10, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: MethodCPUTimeModel, Reason: ReasonSpanOverlap}},
		{name: "thread not seen to leave: CPU time model", mod: func(s *spanSample) { s.RAPLErr = errThreadStayed },
			want: energy.Figure{Joules: 10, CPUJoules: 10, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: MethodCPUTimeModel, Reason: ReasonCounterError}},
		{name: "no counter", mod: func(s *spanSample) { s.RAPLErr = errNotDarwin },
			want: energy.Figure{Joules: 10, CPUJoules: 10, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: MethodCPUTimeModel, Reason: ReasonNoProcEnergy}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			tc.mod(&s)
			if got := attribute(s); !closeFigure(got, tc.want) {
				t.Fatalf("attribute =\n %+v\nwant\n %+v", got, tc.want)
			}
		})
	}
}

// TestAppleProbe: a frozen rail fails its liveness probe and is not used; a live per-process
// counter is.
func TestAppleProbe(t *testing.T) {
	f := &fakeMac{frozenRail: true, rail: 5, procs: map[int]rusageV6{}}
	var mu sync.Mutex
	n := uint64(0)
	cpu := &advancingSelf{fakeMac: f, n: &n, mu: &mu}
	// The probes run on a fake clock that their sleeps move: on a loaded machine a real 20 ms
	// interval may hold fewer than five reads, and the advancing counter would look dead.
	probeNow, probeSleep, _ := sleepClock()
	m, err := New(Options{RAPL: "off", NVML: "off", ProcRoot: t.TempDir(), SysfsRoot: t.TempDir(), DevRoot: t.TempDir(),
		apple: func() (*apple, error) {
			return &apple{cpu: cpu, gpu: f, sleep: time.Sleep, now: time.Now, poll: time.Millisecond, probeInterval: 20 * time.Millisecond,
				probeNow: probeNow, probeSleep: probeSleep}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, m)
	got := map[string]CounterState{}
	for _, c := range m.Counters() {
		got[c.Name] = c
	}
	if c := got["gpu-rail"]; c.Live || c.Reason != ReasonCounterDead {
		t.Fatalf("frozen rail: %+v", c)
	}
	if c := got["proc-energy"]; !c.Live {
		t.Fatalf("advancing counter: %+v", c)
	}
}

// advancingSelf is a fakeMac whose every process's energy advances at each read.
type advancingSelf struct {
	*fakeMac
	mu *sync.Mutex
	n  *uint64
}

func (a *advancingSelf) Rusage(int) (rusageV6, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	*a.n += 1000
	return rusageV6{energyNJ: *a.n}, nil
}

// TestAppleSpan runs spans through a Meter on fake macOS counters: the tree's own energy and
// the rail under the sole-user rule.
func TestAppleSpan(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "ollama.pid")
	writeFile(t, pidFile, "10\n")
	f := &fakeMac{rail: 1_000_000_000, children: map[int][]int{10: {11}},
		procs:   map[int]rusageV6{10: {energyNJ: 1_000_000_000, cpuMach: 0}, 11: {energyNJ: 0}},
		clients: []gpuClient{{id: 1, pid: 11}, {id: 2, pid: 99}}}
	f.leaves()
	// Each reading of the span's clock is a second later: no figure is capped by the boards'
	// ceiling over a span shorter than the fake's energy could be drawn in.
	wall := newFakeClock()
	m, err := New(Options{RAPL: "off", NVML: "off", SkipProbe: true, ProcRoot: dir, SysfsRoot: dir, DevRoot: dir,
		Backends: []BackendInfo{{Name: "ollama", URL: "http://127.0.0.1:11434", PIDFile: pidFile}, {Name: "nopid", URL: "http://127.0.0.1:11435"}},
		now:      func() time.Time { wall.Advance(time.Second); return wall.Now() },
		apple: func() (*apple, error) {
			return &apple{cpu: f, gpu: f, sleep: func(time.Duration) {}, now: time.Now, poll: time.Millisecond}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, m)
	work := Work{PromptTokens: 10, CompletionTokens: 10}
	span := func(during func(f *fakeMac)) energy.Figure {
		var reads int
		f.set(func(f *fakeMac) { reads = f.railReads })
		s := m.Begin("ollama")
		// The rail's Begin reading (its next change) is taken in the background; let it land
		// before the fake spends energy.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			done := false
			f.set(func(f *fakeMac) { done = f.railReads >= reads+2 })
			if done {
				break
			}
		}
		f.set(during)
		return s.End(work)
	}

	// 2 J on the CPU (1.5 + 0.5), no GPU time: exact zero.
	fig := span(func(f *fakeMac) {
		f.procs[10] = rusageV6{energyNJ: 2_500_000_000, cpuMach: 3}
		f.procs[11] = rusageV6{energyNJ: 500_000_000}
		f.clients[1].ns += 5000 // another process's GPU time does not matter
	})
	want := energy.Figure{Joules: 2, CPUJoules: 2, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: MethodProcEnergy}
	if !closeFigure(fig, want) {
		t.Fatalf("CPU only: %+v", fig)
	}

	// Sole GPU user: the rail's 40 J (± the fake's 1 nJ jitter).
	fig = span(func(f *fakeMac) {
		f.procs[10] = rusageV6{energyNJ: 3_500_000_000, cpuMach: 6}
		f.clients[0].ns += 1_000_000
		f.rail += 40_000_000_000
	})
	if fig.Grade != energy.Measured || fig.Method != "proc-energy+ioreport" || fig.GPUJoules < 39.99 || fig.GPUJoules > 40.01 || fig.CPUJoules != 1 {
		t.Fatalf("sole GPU user: %+v", fig)
	}

	// The reading thread never leaves its core: the CPU part is an estimate.
	f.set(func(f *fakeMac) { f.thread, f.threadReads = []uint64{1}, 0 })
	fig = span(func(f *fakeMac) { f.procs[10] = rusageV6{energyNJ: 9_000_000_000, cpuMach: 9} })
	if fig.Grade != energy.Estimated || fig.Method != MethodCPUTimeModel || fig.Reason != ReasonCounterError {
		t.Fatalf("thread stayed: %+v", fig)
	}
	f.leaves()

	// A process of the tree vanished: its energy went with it, so the tokens price the call.
	fig = span(func(f *fakeMac) { f.children[10] = nil; delete(f.procs, 11) })
	if fig.Method != MethodTokenModel || fig.Reason != ReasonProcessVanished {
		t.Fatalf("vanished: %+v", fig)
	}

	// No pid file: no process to meter on macOS.
	if fig := m.Begin("nopid").End(work); fig.Method != MethodTokenModel || fig.Reason != ReasonNoProcess {
		t.Fatalf("no pid file: %+v", fig)
	}
}

// TestAppleNoGPUReader: without the GPU clients the tree's GPU time is unknown, so the figure
// never claims an exact zero: the GPU part is estimated.
func TestAppleNoGPUReader(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "ollama.pid")
	writeFile(t, pidFile, "10\n")
	f := &fakeMac{procs: map[int]rusageV6{10: {energyNJ: 1_000_000_000}}}
	f.leaves()
	m, err := New(Options{RAPL: "off", NVML: "off", SkipProbe: true, ProcRoot: dir, SysfsRoot: dir, DevRoot: dir,
		Backends: []BackendInfo{{Name: "ollama", URL: "http://127.0.0.1:11434", PIDFile: pidFile}},
		apple: func() (*apple, error) {
			return &apple{cpu: f, gpuErr: errors.New("no IOReport"), sleep: func(time.Duration) {}, now: time.Now}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, m)
	s := m.Begin("ollama")
	f.set(func(f *fakeMac) { f.procs[10] = rusageV6{energyNJ: 2_000_000_000} })
	fig := s.End(Work{})
	if fig.Grade != energy.Estimated || fig.Method != "proc-energy+gpu-model" || fig.Reason != ReasonCounterError || fig.CPUJoules != 1 || fig.GPUJoules <= 0 {
		t.Fatalf("no GPU reader: %+v", fig)
	}
}

// TestAppleStatus: `eoc-proxy meter` on macOS reports the Apple counters, live or why not, and
// each backend's processes from its pid file.
func TestAppleStatus(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "ollama.pid")
	writeFile(t, pidFile, "10\n")
	f := &fakeMac{frozenRail: true, children: map[int][]int{10: {11}}, clients: []gpuClient{{id: 1, pid: 11, ns: 5}}}
	f.leaves()
	var mu sync.Mutex
	n := uint64(0)
	cpu := &advancingSelf{fakeMac: f, n: &n, mu: &mu}
	// Every probe Status runs goes by a fake clock that its sleeps move: on a loaded machine a
	// real 20 ms interval may hold fewer than five reads, and the advancing counter would look
	// dead.
	probeNow, probeSleep, _ := sleepClock()
	m, err := New(Options{RAPL: "off", NVML: "off", SkipProbe: true, ProcRoot: dir, SysfsRoot: dir, DevRoot: dir,
		Backends: []BackendInfo{{Name: "ollama", URL: "http://127.0.0.1:11434", PIDFile: pidFile}},
		probeNow: probeNow, probeSleep: probeSleep,
		apple: func() (*apple, error) {
			return &apple{cpu: cpu, gpu: f, sleep: time.Sleep, now: time.Now, poll: time.Millisecond, probeInterval: 20 * time.Millisecond,
				probeNow: probeNow, probeSleep: probeSleep}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, m)
	rep := m.Status(t.Context(), 10*time.Millisecond)
	got := map[string]CounterStatus{}
	for _, c := range rep.Counters {
		got[c.Name] = c
	}
	if c := got["proc-energy"]; !c.Live {
		t.Fatalf("proc-energy: %+v", c)
	}
	if c := got["gpu-rail"]; c.Live || c.Reason != ReasonCounterDead {
		t.Fatalf("frozen gpu-rail: %+v", c)
	}
	if len(rep.Backends) != 1 || len(rep.Backends[0].Processes) != 2 || rep.Backends[0].Processes[0].GPU || !rep.Backends[0].Processes[1].GPU {
		t.Fatalf("backends: %+v", rep.Backends)
	}
}

// TestAppleSwitch: "on" without the counters refuses to start; "off" never opens them.
func TestAppleSwitch(t *testing.T) {
	dir := t.TempDir()
	opened := false
	base := Options{RAPL: "off", NVML: "off", SkipProbe: true, ProcRoot: dir, SysfsRoot: dir, DevRoot: dir,
		apple: func() (*apple, error) { opened = true; return nil, errNotDarwin }}
	o := base
	o.Apple = "on"
	if m, err := New(o); err == nil || !errors.Is(err, ErrNoData) {
		_ = m.Close() // failing anyway
		t.Fatalf("apple on without counters: err = %v", err)
	}
	o, opened = base, false
	o.Apple = "off"
	m, err := New(o)
	if err != nil || opened {
		t.Fatalf("apple off: err = %v, opened = %v", err, opened)
	}
	closeOK(t, m)
	o.Apple = "maybe"
	if _, err := New(o); err == nil {
		t.Fatal("apple maybe: no error")
	}
}

// TestAppleOverlapUnionBound: on macOS too, overlapping calls on one backend are billed shares
// of the tree's CPU time that add up to its time over the union of their spans.
func TestAppleOverlapUnionBound(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "ollama.pid")
	writeFile(t, pidFile, "10\n")
	f := &fakeMac{children: map[int][]int{}, procs: map[int]rusageV6{10: {energyNJ: 1_000_000_000}}}
	f.leaves()
	m, err := New(Options{RAPL: "off", NVML: "off", SkipProbe: true, ProcRoot: dir, SysfsRoot: dir, DevRoot: dir,
		Backends: []BackendInfo{{Name: "ollama", URL: "http://127.0.0.1:11434", PIDFile: pidFile}},
		apple: func() (*apple, error) {
			return &apple{cpu: f, gpuErr: ErrNoData, sleep: func(time.Duration) {}, now: time.Now, poll: time.Millisecond}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, m)
	burn := func(sec float64) { // 24e6 mach units are 1 s at the fake's timebase (125/3 ns)
		f.set(func(f *fakeMac) {
			p := f.procs[10]
			p.cpuMach += uint64(sec * 24e6)
			p.energyNJ += uint64(sec * 5e9)
			f.procs[10] = p
		})
		f.leaves()
	}
	a := m.Begin("ollama")
	burn(1)
	b := m.Begin("ollama")
	burn(2)
	fa := a.End(Work{})
	burn(1)
	fb := b.End(Work{})
	for name, fig := range map[string]energy.Figure{"a": fa, "b": fb} {
		if !strings.HasPrefix(fig.Method, MethodCPUTimeShare) || !strings.Contains(fig.Reason, ReasonSpanOverlap) || !near(fig.CPUJoules, 20) {
			t.Errorf("%s: %+v, want 2 s × 10 W by %s", name, fig, MethodCPUTimeShare)
		}
	}
}
