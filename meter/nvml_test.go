//go:build !nonvml && cgo

package meter

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

// gpuScript drives one mock device: its energy counter, which advances by step on every read,
// and its process list and utilisation samples, which may change after the span begins: pids
// gives the list in each phase of the test (0 until the test moves it on: setPhase).
type gpuScript struct {
	mu     sync.Mutex
	energy uint64 // mJ
	step   uint64
	pids   func(phase int) []uint32
	util   []nvml.ProcessUtilizationSample
	phase  int
	gate   chan struct{}    // when not nil, energy reads wait for it to close
	lists  chan struct{}    // when not nil, process-list reads wait for it to close
	fail   int              // the process list cannot be read in this phase (0: never)
	watts  uint32           // the instant power field (0: 300 W)
	now    func() time.Time // the meter's clock: utilisation samples are stamped with it
	// reads counts the energy reads; offReader those made by anything but a counter reader
	reads, offReader atomic.Int32
}

func (s *gpuScript) setPhase(p int) {
	s.mu.Lock()
	s.phase = p
	s.mu.Unlock()
}

// fieldPower is a field value of instant power, w watts in mW as NVML gives it.
func fieldPower(v []nvml.FieldValue, w uint32) nvml.Return {
	for k := range v {
		v[k].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
		binary.LittleEndian.PutUint32(v[k].Value[:], w*1000)
	}
	return nvml.SUCCESS
}

// mockNVML builds a DGX H100 whose device 0 follows s; the other seven are idle, their
// counters moving, with no processes.
func mockNVML(s *gpuScript) func() (*gpus, error) {
	srv := dgxh100.New()
	for i, d := range srv.Devices {
		dev := d.(*server.Device)
		dev.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 700_000, nvml.SUCCESS } // an H100 SXM's 700 W
		dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 70_000, nvml.SUCCESS }
		dev.GetFieldValuesFunc = func(v []nvml.FieldValue) nvml.Return {
			s.mu.Lock()
			w := cmp.Or(s.watts, 300)
			s.mu.Unlock()
			return fieldPower(v, w)
		}
		if i > 0 {
			idle := uint64(0)
			dev.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { idle += 70_000; return idle, nvml.SUCCESS }
			dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
			dev.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
			dev.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) { return nil, nvml.ERROR_NOT_FOUND }
			continue
		}
		dev.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
			s.reads.Add(1)
			if !fromReader() {
				s.offReader.Add(1)
			}
			s.mu.Lock()
			gate := s.gate
			s.mu.Unlock()
			if gate != nil {
				<-gate
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			v := s.energy
			s.energy += s.step
			return v, nvml.SUCCESS
		}
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			s.mu.Lock()
			lists := s.lists
			s.mu.Unlock()
			if lists != nil {
				<-lists
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.fail != 0 && s.phase == s.fail {
				return nil, nvml.ERROR_UNKNOWN
			}
			var out []nvml.ProcessInfo
			for _, p := range s.pids(s.phase) {
				out = append(out, nvml.ProcessInfo{Pid: p, UsedGpuMemory: 4 << 30})
			}
			return out, nvml.SUCCESS
		}
		dev.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
		dev.GetProcessUtilizationFunc = func(since uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if len(s.util) == 0 {
				return nil, nvml.ERROR_NOT_FOUND
			}
			out := slices.Clone(s.util)
			base := since
			if s.now != nil {
				base = uint64(s.now().UnixMicro())
			}
			for i := range out {
				out[i].TimeStamp = base + uint64(i/2+1)
			}
			return out, nvml.SUCCESS
		}
	}
	return func() (*gpus, error) { return openNVML(srv) }
}

// fixtureMeter meters the fixture Ollama (PIDs 100, 101, 102 on 127.0.0.1:11434) with the
// one-socket RAPL fixture and gpu as NVML. The fixture counters stand still, so RAPL reads
// 0 J, measured, and the host's busy time is 0: the tree is the host's only user.
func fixtureMeter(t *testing.T, gpu func() (*gpus, error)) (*Meter, string) {
	t.Helper()
	procRoot, _ := procFixture(t)
	clk := newFakeClock()
	m, err := New(Options{
		SysfsRoot: sysFixture(t, "sys-one-socket.txtar"), ProcRoot: procRoot, DevRoot: t.TempDir(),
		SkipProbe: true, nvmlWait: 40 * time.Millisecond, now: clk.Now,
		nvml: func() (*gpus, error) {
			g, err := gpu()
			if g != nil {
				g.now, g.sleep = clk.Now, clk.Advance // the GPU window and its rate on the fake clock
			}
			return g, err
		},
		Backends: []BackendInfo{{Name: "ollama", URL: "http://127.0.0.1:11434"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	fixtureClocks.Store(m, clk)
	t.Cleanup(func() { fixtureClocks.Delete(m); closeOK(t, m) })
	return m, procRoot
}

func TestNVMLNoLibrary(t *testing.T) {
	g, err := openNVML(nvml.New())
	if err == nil {
		closeOK(t, closerFunc(g.close))
		t.Skip("this host has libnvidia-ml")
	}
	if !errors.Is(err, ErrNoData) || !strings.Contains(err.Error(), "LIBRARY_NOT_FOUND") {
		t.Fatalf("err = %v, want ErrNoData with NVML's reason", err)
	}
	// Through the meter: the counter is unavailable with its reason; New does not fail.
	m, err := New(Options{SysfsRoot: t.TempDir(), SkipProbe: true})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, m)
	if m.gpu != nil || reasonFor(m.gpuErr, ReasonNoNVML) != ReasonNoNVML {
		t.Fatalf("gpu = %v, err = %v", m.gpu, m.gpuErr)
	}
	if _, err := New(Options{SysfsRoot: t.TempDir(), SkipProbe: true, NVML: "on"}); err == nil {
		t.Fatal(`nvml "on" without a library did not fail`)
	}
}

// counterFigure in a want: NVML's figure, whatever it comes to.
const counterFigure = -1

func TestNVMLSpans(t *testing.T) {
	tests := []struct {
		name   string
		script *gpuScript
		vanish bool   // the runner's GPU worker (102) exits mid-span
		noNode bool   // 102 does not hold /dev/nvidia0 open
		refuse string // a /proc path whose listing is refused
		// between: the test waits for the sampler to read the device in phase 1, then moves
		// to phase 2 before End
		between bool
		prov    bool // End's figure is provisional
		want    energy.Figure
	}{
		{name: "sole user",
			script: &gpuScript{energy: 5_000_000, step: 50_000, pids: func(int) []uint32 { return []uint32{102} }},
			prov:   true,
			want:   energy.Figure{Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: "rapl+nvml", GPUJoules: counterFigure}},
		{name: "a process list unreadable mid-span: unknown, not empty, so shared",
			script:  &gpuScript{energy: 5_000_000, step: 50_000, pids: func(int) []uint32 { return []uint32{102} }, fail: 1},
			between: true,
			want:    energy.Figure{Joules: 0, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: "rapl", Reason: ReasonGPUShared}},
		{name: "the tree on no GPU, a process list unreadable mid-span: no exact zero",
			script: &gpuScript{energy: 5_000_000, step: 50_000, pids: func(int) []uint32 { return []uint32{200} }, fail: 1},
			noNode: true, between: true,
			want: energy.Figure{Joules: 0, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: "rapl", Reason: ReasonGPUUnattributed}},
		{name: "shared GPU",
			script: &gpuScript{energy: 5_000_000, step: 50_000, pids: func(int) []uint32 { return []uint32{102, 4242} },
				util: []nvml.ProcessUtilizationSample{{Pid: 102, SmUtil: 40}, {Pid: 4242, SmUtil: 40}}},
			want: energy.Figure{Joules: 0, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: "rapl", Reason: ReasonGPUShared}},
		{name: "shared GPU, no utilisation samples",
			script: &gpuScript{energy: 5_000_000, step: 50_000, pids: func(int) []uint32 { return []uint32{102, 4242} }},
			want:   energy.Figure{Joules: 0, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: "rapl", Reason: ReasonGPUShared}},
		// A sample of 0 % is no evidence that the other process used no GPU time over the span: NVML
		// returns at most one sample a process, and often none.
		{name: "other process present, its one utilisation sample 0 %: still shared",
			script: &gpuScript{energy: 5_000_000, step: 50_000, pids: func(int) []uint32 { return []uint32{102, 4242} },
				util: []nvml.ProcessUtilizationSample{{Pid: 102, SmUtil: 97}, {Pid: 4242, SmUtil: 0}}},
			want: energy.Figure{Joules: 0, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: "rapl", Reason: ReasonGPUShared}},
		{name: "other process at Begin only, gone before End: shared",
			script: &gpuScript{energy: 5_000_000, step: 50_000, pids: func(phase int) []uint32 {
				if phase == 0 {
					return []uint32{102, 4242}
				}
				return []uint32{102}
			}},
			want: energy.Figure{Joules: 0, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: "rapl", Reason: ReasonGPUShared}},
		{name: "other process born and gone inside the span, seen only by the sampler: shared",
			script: &gpuScript{energy: 5_000_000, step: 50_000, pids: func(phase int) []uint32 {
				if phase == 1 {
					return []uint32{102, 4242}
				}
				return []uint32{102}
			}},
			between: true,
			want:    energy.Figure{Joules: 0, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: "rapl", Reason: ReasonGPUShared}},
		{name: "no GPU time: exactly 0 though the rail moves",
			script: &gpuScript{energy: 5_000_000, step: 50_000, pids: func(int) []uint32 { return []uint32{200} }},
			noNode: true,
			want:   energy.Figure{Joules: 0, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: "rapl", GPUJoules: 0}},
		{name: "in no NVML list, but the tree holds /dev/nvidia0: another PID namespace, unknown",
			script: &gpuScript{energy: 5_000_000, step: 50_000, pids: func(int) []uint32 { return []uint32{98765} }},
			want:   energy.Figure{Joules: 0, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: "rapl", Reason: ReasonGPUUnattributed}},
		{name: "in no NVML list, but the tree holds /dev/nvidia0: unknown, though every NVML PID is ours",
			script: &gpuScript{energy: 5_000_000, step: 50_000, pids: func(int) []uint32 { return []uint32{200} }},
			want:   energy.Figure{Joules: 0, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: "rapl", Reason: ReasonGPUUnattributed}},
		{name: "in no NVML list and no device node, but NVML's PIDs match nothing in our /proc: unknown",
			script: &gpuScript{energy: 5_000_000, step: 50_000, pids: func(int) []uint32 { return []uint32{98765} }},
			noNode: true,
			want:   energy.Figure{Joules: 0, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: "rapl", Reason: ReasonGPUUnattributed}},
		{name: "in no NVML list and the tree's descriptors unreadable: unknown",
			script: &gpuScript{energy: 5_000_000, step: 50_000, pids: func(int) []uint32 { return nil }},
			refuse: "/102/fd",
			want:   energy.Figure{Joules: 0, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: "rapl", Reason: ReasonGPUUnattributed}},
		{name: "a foreign process in no PID list but in the utilisation samples is another user",
			script: &gpuScript{energy: 5_000_000, step: 50_000, pids: func(int) []uint32 { return []uint32{102} },
				util: []nvml.ProcessUtilizationSample{{Pid: 102, SmUtil: 10}, {Pid: 4242, SmUtil: 90}}},
			want: energy.Figure{Joules: 0, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: "rapl", Reason: ReasonGPUShared}},
		{name: "GPU process vanished mid-span",
			script: &gpuScript{energy: 5_000_000, step: 50_000, pids: func(phase int) []uint32 {
				if phase == 0 {
					return []uint32{102}
				}
				return nil
			}},
			vanish: true,
			want:   energy.Figure{Joules: 0, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: "rapl", Reason: ReasonGPUVanished}},
		{name: "the tree started on the GPU mid-span: no counter read at Begin, the GPU model",
			script: &gpuScript{energy: 5_000_000, step: 50_000, pids: func(phase int) []uint32 {
				if phase == 0 {
					return nil
				}
				return []uint32{102}
			}},
			want: energy.Figure{Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "rapl+gpu-model", Reason: ReasonGPULate}},
		{name: "the tree started mid-span on a shared GPU: no GPU figure, not the model's",
			script: &gpuScript{energy: 5_000_000, step: 50_000, pids: func(phase int) []uint32 {
				if phase == 0 {
					return []uint32{4242}
				}
				return []uint32{102, 4242}
			}},
			want: energy.Figure{Joules: 0, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: "rapl", Reason: ReasonGPUShared}},
		{name: "counter did not update after the span",
			script: &gpuScript{energy: 5_000_000, step: 0, pids: func(int) []uint32 { return []uint32{102} },
				util: []nvml.ProcessUtilizationSample{{Pid: 102, SmUtil: 50}, {Pid: 102, SmUtil: 50}}},
			want: energy.Figure{Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "rapl+gpu-model", Reason: ReasonCounterStale}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, procRoot := fixtureMeter(t, mockNVML(tc.script))
			tc.script.mu.Lock()
			tc.script.now = m.gpu.now
			tc.script.mu.Unlock()
			if tc.noNode {
				if err := os.Remove(filepath.Join(procRoot, "102", "fd", "7")); err != nil {
					t.Fatal(err)
				}
			}
			if tc.refuse != "" {
				m.fs = &refusingFS{suffixes: []string{tc.refuse}}
				m.proc.fs = m.fs
			}
			s := m.Begin("ollama")
			<-s.c.gpuAlign.done // Begin's update is seen before the clock moves on
			tc.script.setPhase(1)
			waitSampled(t, m.gpu, 0, 2) // the sampler has read the device in phase 1
			if tc.between {
				tc.script.setPhase(2)
				waitSampled(t, m.gpu, 0, 2)
			}
			cpuWork(t, m, 1, 10) // the CPU side: 10 J measured, added to every want below
			tc.want.Joules += 10
			tc.want.CPUJoules = 10
			if tc.vanish {
				if err := os.RemoveAll(filepath.Join(procRoot, "102")); err != nil {
					t.Fatal(err)
				}
				writeFile(t, filepath.Join(procRoot, "101", "task", "101", "children"), "")
			}
			got := s.End(Work{Model: "llama3", PromptTokens: 10, CompletionTokens: 20})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			settled, err := s.Settled(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got.Provisional != tc.prov {
				t.Fatalf("End = %+v, want provisional %v", got, tc.prov)
			}
			if got.Provisional {
				// End's figure holds the settled one within its bounds.
				if settled.Provisional || settled.Joules < got.Low-1e-9 || settled.Joules > got.High+1e-9 {
					t.Fatalf("provisional %+v does not hold the settled %+v", got, settled)
				}
				if d, err := Recompute(got); err != nil || Disagreement(got, d) != "" {
					t.Fatalf("the provisional figure does not recompute: %v %s", err, Disagreement(got, d))
				}
			} else if settled != got {
				t.Fatalf("End's figure was final, yet Settled gave %+v", settled)
			}
			got = settled
			if d, err := Recompute(got); err != nil || Disagreement(got, d) != "" {
				t.Fatalf("the settled figure does not recompute: %v %s", err, Disagreement(got, d))
			}
			if tc.want.Method == "rapl+gpu-model" {
				// The model prices 300 W × wall × 0.5 GPU busy: only its shape is fixed.
				if got.GPUJoules <= 0 || got.Grade != tc.want.Grade || got.Method != tc.want.Method || got.Reason != tc.want.Reason {
					t.Fatalf("End = %+v, want the GPU model with reason %s", got, tc.want.Reason)
				}
				return
			}
			if tc.want.GPUJoules == counterFigure {
				// This counter moves at every read: the figure is its delta, split (TestNVMLBrackets
				// states the arithmetic). It must be there, within its bounds.
				if got.GPUJoules <= 0 || got.Low > got.Joules || got.Joules > got.High {
					t.Fatalf("End = %+v, want an NVML figure within its bounds", got)
				}
				tc.want.GPUJoules = got.GPUJoules
				tc.want.Joules += got.GPUJoules
			}
			if !closeFigure(got, tc.want) {
				t.Fatalf("End =\n %+v\nwant\n %+v", got, tc.want)
			}
			if n := tc.script.offReader.Load(); n != 0 {
				t.Fatalf("%d energy reads not by the counter reader", n)
			}
		})
	}
}

// waitSampled waits until device i's sampler has read its process list n more times.
// Synchronisation, not a timing assertion: it fails only when the sampler stopped.
func waitSampled(t *testing.T, g *gpus, i, n int) {
	t.Helper()
	g.mu.Lock()
	want := g.logs[i].n + n
	g.mu.Unlock()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		g.mu.Lock()
		got := g.logs[i].n
		g.mu.Unlock()
		if got >= want {
			return
		}
	}
	t.Fatalf("the sampler of device %d did not read its processes", i)
}

// TestNVMLEndDoesNotWait: End returns while NVML's energy reads are held (its snapshot and the
// wait for the counter run in the background), with a provisional figure; Settled waits for
// them, or for its context, and then gives the settled figure.
func TestNVMLEndDoesNotWait(t *testing.T) {
	// The board reads 30 W now: the provisional figure's High must still hold what the counter
	// settles to (a step of 50 J a read).
	script := &gpuScript{energy: 5_000_000, step: 50_000, watts: 30, pids: func(int) []uint32 { return []uint32{102} }}
	m, _ := fixtureMeter(t, mockNVML(script))
	s := m.Begin("ollama")
	<-s.c.gpuAlign.done
	waitSampled(t, m.gpu, 0, 1) // the board's instant power has been read
	cpuWork(t, m, 1, 10)
	gate := make(chan struct{})
	script.mu.Lock()
	script.gate = gate
	script.mu.Unlock()
	ended := make(chan energy.Figure)
	go func() { ended <- s.End(Work{CompletionTokens: 5}) }()
	var got energy.Figure
	select {
	case got = <-ended:
	case <-time.After(time.Minute): // deadlock detection, not a timing assertion
		close(gate)
		t.Fatal("End waited for NVML's counter")
	}
	if !got.Provisional || got.GPUJoules <= 0 {
		t.Fatalf("End = %+v, want a provisional GPU figure", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if f, err := s.Settled(ctx); err == nil || f != got {
		t.Fatalf("Settled before the counter was read: %+v, %v; want End's figure and ctx's error", f, err)
	}
	close(gate)
	f, err := s.Settled(context.Background())
	if err != nil || f.Provisional || f.Joules < got.Low || f.Joules > got.High || f.Coverage != energy.CoverageWhole {
		t.Fatalf("settled %+v (%v), not within the provisional %+v", f, err, got)
	}
}

// TestNVMLSettleInline: with SettleInline, End waits and returns the settled figure.
func TestNVMLSettleInline(t *testing.T) {
	script := &gpuScript{energy: 5_000_000, step: 50_000, pids: func(int) []uint32 { return []uint32{102} }}
	m, _ := fixtureMeter(t, mockNVML(script))
	m.opts.SettleInline = true
	s := m.Begin("ollama")
	<-s.c.gpuAlign.done
	cpuWork(t, m, 1, 10)
	f := s.End(Work{})
	if f.Provisional || f.GPUJoules <= 0 || f.Grade != energy.Measured {
		t.Fatalf("End = %+v, want the settled, measured figure", f)
	}
}

// TestNVMLForeignThroughout: another process on the GPU the whole time: no call of fourteen
// gets a whole figure, whatever its utilisation samples say (here: none, as NVML often gives).
func TestNVMLForeignThroughout(t *testing.T) {
	script := &gpuScript{energy: 5_000_000, step: 50_000, pids: func(int) []uint32 { return []uint32{102, 4242} }}
	m, _ := fixtureMeter(t, mockNVML(script))
	for k := range 14 {
		s := m.Begin("ollama")
		<-s.c.gpuAlign.listed // Begin's process lists (9 µs on an H200) are read before the call ends
		cpuWork(t, m, 0.2, 2)
		f := s.End(Work{})
		sf, err := s.Settled(context.Background())
		if err != nil || f.Coverage != energy.CoveragePartial || sf.Coverage != energy.CoveragePartial || !strings.Contains(sf.Reason, ReasonGPUShared) {
			t.Fatalf("call %d: End %+v, settled %+v; want gpu-shared", k, f, sf)
		}
	}
}

// TestNVMLPendingBeforeLists: NVML held so that neither Begin's process lists nor a sampler's
// have been read when the call ends: End's figure cannot know whether the tree was the GPU's
// sole user, so it has no GPU part (partial, gpu-pending, provisional) with a High that holds
// what the boards can draw. With a foreign process on the GPU the settled figure is gpu-shared;
// with the tree alone, whole, and within the pending figure's High.
func TestNVMLPendingBeforeLists(t *testing.T) {
	for _, foreign := range []bool{true, false} {
		pids := []uint32{102}
		if foreign {
			pids = append(pids, 4242)
		}
		pendingThenSettled(t, pids, foreign)
	}
}

func pendingThenSettled(t *testing.T, pids []uint32, foreign bool) {
	t.Helper()
	script := &gpuScript{energy: 5_000_000, step: 50_000, pids: func(int) []uint32 { return pids }}
	m, _ := fixtureMeter(t, mockNVML(script))
	held := make(chan struct{})
	script.mu.Lock()
	script.lists = held
	script.mu.Unlock()
	s := m.Begin("ollama")
	cpuWork(t, m, 0.02, 2)
	f := s.End(Work{})
	close(held)
	sf, err := s.Settled(context.Background())
	if f.Coverage == energy.CoverageWhole || strings.Contains(f.Method, "nvml") || !f.Provisional ||
		!strings.Contains(f.Reason, ReasonGPUPending) || f.GPUJoules != 0 {
		t.Fatalf("End %+v with no process list read; want a pending, partial figure with no GPU part", f)
	}
	if err != nil || sf.Provisional {
		t.Fatalf("settled %+v (%v)", sf, err)
	}
	if shared := sf.Coverage == energy.CoveragePartial && strings.Contains(sf.Reason, ReasonGPUShared); shared != foreign {
		t.Fatalf("foreign process %v: settled %+v", foreign, sf)
	}
	if !foreign && (sf.Coverage != energy.CoverageWhole || sf.GPUJoules <= 0) {
		t.Fatalf("the tree alone on the GPU: settled %+v; want a whole GPU figure", sf)
	}
	if sf.Joules > f.High+1e-9 || sf.High > f.High+1e-9 {
		t.Fatalf("the pending %+v does not hold the settled %+v", f, sf)
	}
}

// TestNVMLSamplersStop: the samplers and the counter readers run while a span is open or
// unsettled, and stop once none is: after End and Settled every device's sampler and counter
// reader stops, and their reads stop counting.
func TestNVMLSamplersStop(t *testing.T) {
	script := &gpuScript{energy: 5_000_000, step: 50_000, pids: func(int) []uint32 { return []uint32{102} }}
	m, _ := fixtureMeter(t, mockNVML(script))
	s := m.Begin("ollama")
	<-s.c.gpuAlign.done
	waitSampled(t, m.gpu, 0, 1)
	cpuWork(t, m, 0.2, 2)
	s.End(Work{})
	if _, err := s.Settled(context.Background()); err != nil {
		t.Fatal(err)
	}
	running := func() bool {
		m.gpu.mu.Lock()
		defer m.gpu.mu.Unlock()
		for _, l := range m.gpu.logs {
			if l.running {
				return true
			}
		}
		for _, c := range m.gpu.counters {
			if c.running {
				return true
			}
		}
		return false
	}
	// Bounded only to catch a sampler that never stops, not a timing assertion.
	for deadline := time.Now().Add(30 * time.Second); running(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a sampler still runs with no span open or unsettled")
		}
	}
	m.gpu.mu.Lock()
	n := m.gpu.logs[0].n
	m.gpu.mu.Unlock()
	e := script.reads.Load()
	time.Sleep(20 * time.Millisecond) // room for a stray read; passing does not depend on it
	m.gpu.mu.Lock()
	defer m.gpu.mu.Unlock()
	if m.gpu.logs[0].n != n || m.gpu.refs != 0 {
		t.Fatalf("reads went on (%d → %d) or spans still hold the samplers (%d)", n, m.gpu.logs[0].n, m.gpu.refs)
	}
	if e == 0 || script.reads.Load() != e {
		t.Fatalf("energy reads: %d during the span, %d after; want some, then none", e, script.reads.Load()-e)
	}
}

// gateDevice is a profileDevice whose energy reads wait for gate, saying each time on entered
// that one began; after counts its reads begun after shut was set (NVML shut down).
type gateDevice struct {
	profileDevice
	entered, gate chan struct{}
	shut          atomic.Bool
	after         atomic.Int32
}

func (d *gateDevice) EnergyMJ() (uint64, error) {
	if d.shut.Load() {
		d.after.Add(1)
	}
	select {
	case d.entered <- struct{}{}:
	default:
	}
	<-d.gate
	return d.profileDevice.EnergyMJ()
}

// TestNVMLCloseWaits: Close waits for Begin's background reads before it shuts NVML down: no
// NVML call after the shutdown, and Begin's goroutine has finished by then.
func TestNVMLCloseWaits(t *testing.T) {
	clk := newFakeClock()
	d := &gateDevice{profileDevice: profileDevice{clk: clk, t0: clk.Now(), idleW: 50}, entered: make(chan struct{}, 1), gate: make(chan struct{})}
	var early atomic.Bool
	var al *gpuAlign
	shutting := make(chan struct{})
	g := &gpus{wait: 250 * time.Millisecond, poll: 5 * time.Millisecond, now: clk.Now, sleep: clk.Advance, devs: []gpuDevice{d}, closed: true}
	g.closeFn = func() error {
		select {
		case <-al.done:
		default:
			early.Store(true) // Begin's reads still in flight
		}
		d.shut.Store(true)
		close(shutting)
		return nil
	}
	al = g.begin(func(p uint32) bool { return p == 7 })
	<-d.entered // Begin's energy read is held
	closed := make(chan error)
	go func() { closed <- g.close() }()
	// Release the read once close has begun (and, without the wait, likely shut NVML down).
	for {
		g.mu.Lock()
		shut := g.shut
		g.mu.Unlock()
		if shut {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// Room for a close that does not wait to shut NVML down, which it does without the gate: on a
	// box loaded by the mutation run's parallel tests that may take more than a few ms. A close
	// that waits does not call closeFn before the gate opens; passing does not depend on the time.
	select {
	case <-shutting:
	case <-time.After(250 * time.Millisecond):
	}
	close(d.gate)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if early.Load() || d.after.Load() != 0 {
		t.Fatalf("NVML shut down with Begin's reads in flight (%v), %d reads after it", early.Load(), d.after.Load())
	}
	if g.track() {
		t.Fatal("a background goroutine counted after close")
	}
}

// slowDevice is a profileDevice whose energy read takes 4 ms (an H200's median is 3.2 ms).
type slowDevice struct{ profileDevice }

func (d *slowDevice) EnergyMJ() (uint64, error) {
	d.clk.Advance(4 * time.Millisecond)
	return d.profileDevice.EnergyMJ()
}

// TestNVMLEndEdge: End's edge is the span's end, taken before any read, not the middle of a read
// taken after it.
func TestNVMLEndEdge(t *testing.T) {
	clk := newFakeClock()
	d := &slowDevice{profileDevice{clk: clk, t0: clk.Now(), idleW: 50}}
	g := &gpus{wait: 250 * time.Millisecond, poll: 5 * time.Millisecond, now: clk.Now, sleep: clk.Advance, devs: []gpuDevice{d}, closed: true}
	al := g.begin(func(p uint32) bool { return p == 7 })
	<-al.done
	end := clk.Now()
	var b gpuSnap
	g.end(al, &b, end)
	if !b.at.Equal(end) || !clk.Now().After(end) {
		t.Fatalf("End's snapshot at %v, the span ended at %v", b.at.Sub(end), end)
	}
}

// TestNVMLEdgeReads: an energy read takes milliseconds (4 ms here), and an update that lands
// between the span's start and Begin's read puts part of the span before the window's first
// reading: the bounds still hold what the span drew. The board draws 250 W over the span (from
// 98 to 400 ms, an update due at 100 ms during Begin's read) and 1 W else.
func TestNVMLEdgeReads(t *testing.T) {
	clk := newFakeClock()
	d := &slowDevice{profileDevice{clk: clk, t0: clk.Now(), idleW: 1, busyW: 250, busyFrom: 98 * time.Millisecond, busyTo: 400 * time.Millisecond}}
	g := &gpus{wait: 250 * time.Millisecond, poll: 5 * time.Millisecond, period: 100 * time.Millisecond, now: clk.Now, sleep: clk.Advance, devs: []gpuDevice{d}, closed: true}
	clk.Advance(98 * time.Millisecond)
	tree := func(p uint32) bool { return p == 7 }
	al := g.begin(tree)
	<-al.done
	clk.Advance(al.start.Add(302 * time.Millisecond).Sub(clk.Now()))
	end := clk.Now()
	var b gpuSnap
	g.end(al, &b, end)
	r := g.attribute(al, &b, tree, al.start, end)
	truth := d.drawn(400*time.Millisecond) - d.drawn(98*time.Millisecond)
	if r.Err != nil || truth < r.Low || truth > r.High {
		t.Fatalf("attribute = %+v; the span drew %v J, outside its bounds", r, truth)
	}
}

// TestNVMLWindow: both ends of a GPU window are counter updates: Begin's is the first update
// after Begin (found in the background), End's the first after End. The counter updates every
// 100 ms at 250 W; Begin comes 1 ms after an update.
func TestNVMLWindow(t *testing.T) {
	tests := []struct {
		name      string
		dev       profileDevice
		endFirst  bool // End's snapshot is taken before Begin's update is seen: no update within the span
		span      time.Duration
		joules    float64
		sub       bool // want SubPeriod
		err       error
		errSubstr string
	}{
		{name: "300 ms span: 400 ms of updates from 100 to 500 ms, not 500 from 0", dev: profileDevice{idleW: 250},
			span: 300 * time.Millisecond, joules: 100},
		{name: "1 s span", dev: profileDevice{idleW: 250}, span: time.Second, joules: 275},
		{name: "span with no update inside: a bracket's split, flagged", dev: profileDevice{idleW: 250}, endFirst: true, joules: 0, sub: true},
		{name: "no update inside the span, and its bracket counted 2000 W", dev: profileDevice{idleW: 250, jump: 175_000, jumpAt: 100 * time.Millisecond},
			endFirst: true, err: ErrCounterRate},
		{name: "a count above 1.5 times the board's enforced power limit (1220 W)", dev: profileDevice{idleW: 250, jump: 400_000, jumpAt: 300 * time.Millisecond},
			span: 300 * time.Millisecond, err: ErrCounterRate},
		{name: "a count within the power limit after a jump", dev: profileDevice{idleW: 250, jump: 100_000, jumpAt: 300 * time.Millisecond},
			span: 300 * time.Millisecond, joules: 200},
		{name: "energy went backwards within the span", dev: profileDevice{idleW: 250, jump: -500_000, jumpAt: 300 * time.Millisecond},
			span: 300 * time.Millisecond, errSubstr: "backwards"},
		{name: "energy went backwards after the span", dev: profileDevice{idleW: 250, jump: -500_000, jumpAt: 500 * time.Millisecond},
			span: 300 * time.Millisecond, errSubstr: "backwards"},
		{name: "a count at 1.5 times the power limit over the window (an excursion), seen a poll late at each end", dev: profileDevice{idleW: 250, jump: 330_000, jumpAt: 300 * time.Millisecond},
			span: 300 * time.Millisecond, joules: 430},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			d := tc.dev
			d.clk, d.t0 = clk, clk.Now()
			clk.Advance(time.Millisecond)
			g := &gpus{wait: 250 * time.Millisecond, poll: 5 * time.Millisecond, period: 100 * time.Millisecond, now: clk.Now, sleep: clk.Advance, devs: []gpuDevice{&d}, closed: true}
			var a, b gpuSnap
			g.snapshot(&a)
			if tc.endFirst {
				g.snapshot(&b)
			}
			al := g.alignBegin(&a)
			<-al.done
			if !tc.endFirst {
				clk.Advance(tc.span)
				g.snapshot(&b)
			}
			r := g.attribute(al, &b, func(p uint32) bool { return p == 7 }, a.at, b.at)
			switch {
			case tc.err != nil || tc.errSubstr != "":
				if r.Err == nil || (tc.err != nil && !errors.Is(r.Err, tc.err)) || !strings.Contains(r.Err.Error(), tc.errSubstr) {
					t.Fatalf("attribute = %+v, want error %v %q", r, tc.err, tc.errSubstr)
				}
			case r.Err != nil || !near(r.Joules, tc.joules) || r.SubPeriod != tc.sub:
				t.Fatalf("attribute = %+v, want %v J (sub-period %v)", r, tc.joules, tc.sub)
			}
		})
	}
}

// alignBegin is gpus.begin from a snapshot already taken, of every device: a test can then
// read End before Begin's update is seen.
func (g *gpus) alignBegin(begin *gpuSnap) *gpuAlign {
	a := g.book(begin.at)
	a.snap = *begin
	for i := range a.mine {
		a.mine[i] = true
	}
	close(a.listed)
	close(a.snapped)
	go g.align(a)
	return a
}

// profileDevice is a GPU that draws idleW, and busyW over [busyFrom, busyTo) after t0; its
// counter publishes the energy drawn since t0 every 100 ms (at t0 + k·100 ms), as NVML's does,
// plus jump mJ from the update at jumpAt on (negative: it goes backwards). Its enforced power
// limit is 700 W.
type profileDevice struct {
	clk              *fakeClock
	t0               time.Time
	idleW, busyW     float64
	busyFrom, busyTo time.Duration
	powerW           float64 // what PowerW reports (0: an error)
	jump             int64
	jumpAt           time.Duration
}

func (d *profileDevice) drawn(upTo time.Duration) float64 {
	busy := max(min(upTo, d.busyTo)-d.busyFrom, 0)
	return d.idleW*(upTo-busy).Seconds() + d.busyW*busy.Seconds()
}
func (d *profileDevice) Name() string { return "profile" }
func (d *profileDevice) EnergyMJ() (uint64, error) {
	updated := d.clk.Now().Sub(d.t0).Truncate(100 * time.Millisecond)
	e := int64(1_000_000 + d.drawn(updated)*1000)
	if d.jump != 0 && updated >= d.jumpAt {
		e += d.jump
	}
	return uint64(e), nil
}
func (d *profileDevice) PIDs(dst []uint32) ([]uint32, error) { return append(dst, 7), nil }
func (d *profileDevice) InstantPowerW() (float64, error) {
	since := d.clk.Now().Sub(d.t0)
	if since >= d.busyFrom && since < d.busyTo {
		return d.busyW, nil
	}
	return d.idleW, nil
}
func (d *profileDevice) Utilization(uint64) ([]procUtil, error) { return nil, nil }
func (d *profileDevice) PowerLimitW() (float64, error)          { return 700, nil }
func (d *profileDevice) PowerW() (float64, error) {
	if d.powerW == 0 {
		return 0, errors.New("not supported")
	}
	return d.powerW, nil
}

// TestNVMLBrackets: a span's GPU energy is the counter between the first updates after Begin
// and after End, less End's bracket's part after End, plus Begin's bracket's part after Begin;
// each bracket split at the board's idle power when nothing else ran in it, by time otherwise.
// The board idles at 50 W and draws 250 W over the span, which starts 52.5 ms into an update
// period (the 5 ms polls see each update exactly, at their midpoint) and lasts span.
func TestNVMLBrackets(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name      string
		span      time.Duration
		powerW    float64       // what the board's power reads (0: unreadable)
		busyW     float64       // what it draws over the span (0: 250 W)
		prevEnd   time.Duration // another span ended this long after t0 (0: none); the idle power is then known, 50 W
		later     bool          // another span began after this one
		noPower   bool          // no instant power was read
		tail      time.Duration // the board draws busyW this long after the span (a power tail)
		before    time.Duration // and this long before it
		joules    float64
		low, high float64
		sub       bool
	}{
		// 250 W × 400 ms (52.5..452.5). Inside: updates 100..400, 75 J. Begin's bracket: 2.625 J
		// idle + 11.875 busy; End's: 13.125 busy + 2.375 idle.
		{name: "idle power known: each bracket split exactly", span: 400 * ms, powerW: 50,
			joules: 100, low: 75, high: 75 + 14.5 + 15.5},
		{name: "idle power unknown: split by time", span: 400 * ms,
			joules: 75 + 14.5*0.475 + 15.5*0.525, low: 75, high: 75 + 14.5 + 15.5},
		// Another span ended 30 ms in: Begin's bracket is not idle outside the span, so it is
		// split by time; End's still at idle power. The board's power reading, which still holds
		// that span's draw, is not taken as its idle power.
		{name: "a span ended in Begin's bracket", span: 400 * ms, powerW: 250, prevEnd: 30 * ms,
			joules: 75 + 14.5*0.475 + 13.125, low: 75, high: 75 + 14.5 + 15.5},
		{name: "a span began after this one", span: 400 * ms, powerW: 50, later: true,
			joules: 75 + 11.875 + 15.5*0.525, low: 75, high: 75 + 14.5 + 15.5},
		// 40 ms inside one bracket (52.5..92.5): 2.625 + 10 + 0.375 J, the span's 10.
		{name: "no update inside the span: one bracket, split", span: 40 * ms, powerW: 50,
			joules: 10, low: 0, high: 13, sub: true},
		// No update inside: the board's instant power over the span (250 W), within the bracket.
		{name: "no update inside the span, idle power unknown", span: 40 * ms,
			joules: 10, low: 0, high: 13, sub: true},
		// No instant power read: the board at its 700 W limit, no more than the bracket.
		{name: "no update inside the span, no instant power", span: 40 * ms, noPower: true,
			joules: 13, low: 0, high: 13, sub: true},
		// A power tail after the span: the idle split would give the span all End's bracket drew
		// above idle (1288 W over its 52.5 ms); it gets no more than 1.5 × 700 W.
		{name: "a power tail after the span: End's bracket's part at most the board's ceiling", span: 400 * ms, powerW: 50,
			busyW: 700, tail: 90 * ms, joules: 210 + 33.25 + 1050*0.0525, low: 210, high: 210 + 35.875 + 70},
		// 2.4 ms inside a bracket the board drew 700 W through (work before, a tail after): the
		// idle split gave such spans 1.9 to 2.8 kW on an H200; instant power gives 700 W.
		{name: "2.4 ms inside a busy bracket: instant power over the span", span: 2400 * time.Microsecond, powerW: 50,
			busyW: 700, tail: 45 * ms, before: 52500 * time.Microsecond, joules: 700 * 0.0024, low: 0, high: 69.935, sub: true},
		// The board idled through a long span, and its power read 80 W: neither bracket looks
		// busy at that idle power, so each is split by time.
		{name: "idle power read above what the brackets drew: split by time", span: 400 * ms, powerW: 80, busyW: 50,
			joules: 20, low: 15, high: 25},
		// The board idled through the span (a call that used no GPU time), and its power read
		// 80 W: the bracket does not look busy at that idle power, so it is split by time.
		{name: "idle power read above what the bracket drew: split by time", span: 40 * ms, powerW: 80, busyW: 50,
			joules: 2, low: 0, high: 5, sub: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			t0 := clk.Now()
			begin := 52500 * time.Microsecond
			d := &profileDevice{clk: clk, t0: t0, idleW: 50, busyW: cmp.Or(tc.busyW, 250), busyFrom: begin - tc.before, busyTo: begin + tc.span + tc.tail, powerW: tc.powerW}
			g := &gpus{wait: 250 * ms, poll: 5 * ms, period: 100 * ms, now: clk.Now, sleep: clk.Advance, devs: []gpuDevice{d}, closed: true}
			if tc.prevEnd > 0 {
				g.lastEnd = t0.Add(tc.prevEnd)
				g.idleW = []float64{50}
			}
			clk.Advance(begin)
			var b gpuSnap
			var al *gpuAlign
			if tc.sub {
				// End is read before Begin's bracket closes; the wait for its update comes after.
				var a gpuSnap
				g.snapshot(&a)
				clk.Advance(tc.span)
				g.snapshot(&b)
				al = g.alignBegin(&a)
				<-al.done
				g.spanEnded(b.at)
			} else {
				al = g.begin(func(p uint32) bool { return p == 7 })
				<-al.done
				clk.Advance(al.snap.at.Add(tc.span).Sub(clk.Now()))
				g.end(al, &b, clk.Now())
			}
			// The sampler's instant power reading in the middle of the span.
			g.logs = make([]devLog, 1)
			if !tc.noPower {
				g.logs[0].power = []powerRead{{at: al.snap.at.Add(tc.span / 2), w: d.busyW}}
			}
			if tc.later {
				g.lastBegin = b.at
			}
			r := g.attribute(al, &b, func(p uint32) bool { return p == 7 }, al.snap.at, b.at)
			truth := d.drawn(tc.span+begin) - d.drawn(begin)
			// No part above what the board can draw over the span: 1.5 × its 700 W limit.
			if most := 1.5 * 700 * tc.span.Seconds(); r.Joules > most+1e-9 {
				t.Fatalf("%v J over %v: more than the board can draw (%v J)", r.Joules, tc.span, most)
			}
			if r.Err != nil || !near(r.Joules, tc.joules) || !near(r.Low, tc.low) || !near(r.High, tc.high) || r.SubPeriod != tc.sub {
				t.Fatalf("attribute = %+v, want %v J in [%v, %v] (sub-period %v; the span drew %v J)", r, tc.joules, tc.low, tc.high, tc.sub, truth)
			}
			if truth < r.Low || truth > r.High {
				t.Fatalf("the span drew %v J, outside the bounds [%v, %v]", truth, r.Low, r.High)
			}
		})
	}
}

// TestNVMLCalibrate: at start the meter measures how often each counter updates and the
// board's power meanwhile (its idle power), over two update periods.
func TestNVMLCalibrate(t *testing.T) {
	clk := newFakeClock()
	d := &profileDevice{clk: clk, t0: clk.Now(), idleW: 60, busyW: 250}
	clk.Advance(2500 * time.Microsecond)
	g := &gpus{wait: 250 * time.Millisecond, poll: 5 * time.Millisecond, now: clk.Now, sleep: clk.Advance, devs: []gpuDevice{d}, closed: true}
	if err := g.calibrate(); err != nil {
		t.Fatal(err)
	}
	if g.period != 100*time.Millisecond || !near(g.idleOf(0), 60) {
		t.Fatalf("period %v, idle %v W; want 100ms and 60 W", g.period, g.idleOf(0))
	}
	frozen := &gpus{wait: 250 * time.Millisecond, poll: 5 * time.Millisecond, now: clk.Now, sleep: clk.Advance, devs: []gpuDevice{&stepDevice{values: []uint64{5}}}}
	if err := frozen.calibrate(); err == nil || frozen.period != 0 {
		t.Fatalf("a frozen counter calibrated: period %v, err %v", frozen.period, err)
	}
}

// countDevice counts its energy reads.
type countDevice struct {
	profileDevice
	reads int
}

func (d *countDevice) EnergyMJ() (uint64, error) { d.reads++; return d.profileDevice.EnergyMJ() }

// quietDevice lists no process.
type quietDevice struct{ countDevice }

func (d *quietDevice) PIDs(dst []uint32) ([]uint32, error) { return dst, nil }

// TestNVMLReadsNearUpdates: once an update has been seen and the period is known, the counter
// reader reads only around when the next one is due (an energy read takes 4 ms on an H200, and
// NVML serialises calls), and still times it exactly: half a poll either side. End's value is
// answered by the first of those reads, exactly: the counter had not moved since the read
// before the span's end.
func TestNVMLReadsNearUpdates(t *testing.T) {
	clk := newFakeClock()
	d := &countDevice{profileDevice: profileDevice{clk: clk, t0: clk.Now(), idleW: 50}}
	g := &gpus{wait: 250 * time.Millisecond, poll: 5 * time.Millisecond, period: 100 * time.Millisecond, now: clk.Now, sleep: clk.Advance, devs: []gpuDevice{d}, closed: true}
	clk.Advance(52500 * time.Microsecond)
	al := g.begin(func(p uint32) bool { return p == 7 })
	<-al.done // no update seen yet: every poll, 52.5 to 102.5 ms
	clk.Advance(50 * time.Millisecond)
	before := d.reads
	end := clk.Now()
	var b gpuSnap
	g.end(al, &b, end)
	var val [1]uint64
	var at [1]time.Time
	if err := g.nextUpdate(&b, []int{0}, val[:], at[:]); err != nil {
		t.Fatal(err)
	}
	// End at 152.5 ms: reads at 187.5, 192.5, 197.5 and 202.5 ms, not every 5 ms from 152.5.
	if n := d.reads - before; n != 4 || !at[0].Equal(d.t0.Add(200*time.Millisecond)) {
		t.Fatalf("%d reads, update at %v; want 4 reads, the update at 200ms", n, at[0].Sub(d.t0))
	}
	g.mu.Lock()
	first := g.counters[0].reads[len(g.counters[0].reads)-4].t0.Sub(d.t0)
	g.mu.Unlock()
	if first != 187500*time.Microsecond || !b.at.Equal(end) || !b.readDone.Equal(end) {
		t.Fatalf("first read after End at %v; End's value at %v, read late by %v; want 187.5ms, exact", first, b.at.Sub(d.t0), b.readDone.Sub(end))
	}
	// Three periods after the last seen update, the phase is not trusted: every poll.
	clk.Advance(250 * time.Millisecond)
	before = d.reads
	g.snapshot(&b)
	if err := g.nextUpdate(&b, []int{0}, val[:], at[:]); err != nil {
		t.Fatal(err)
	}
	if n := d.reads - before; n != 11 { // 452.5 to 502.5 ms
		t.Fatalf("%d reads three periods after the last seen update; want 11, a read every poll", n)
	}
}

// TestNVMLReadsOnlyTheTreesGPUs: Begin and End read the energy only of the GPUs that listed a
// process of the tree at Begin (a read takes 4 ms on an H200, and NVML serialises calls): a
// span on a host whose GPUs run nothing, or only another job, reads none, and its GPU part is
// exactly 0.
func TestNVMLReadsOnlyTheTreesGPUs(t *testing.T) {
	clk := newFakeClock()
	idle := &quietDevice{countDevice{profileDevice: profileDevice{clk: clk, t0: clk.Now(), idleW: 60}}}
	other := &foreignDevice{countDevice{profileDevice: profileDevice{clk: clk, t0: clk.Now(), idleW: 300}}}
	g := &gpus{wait: 250 * time.Millisecond, poll: 5 * time.Millisecond, now: clk.Now, sleep: clk.Advance, devs: []gpuDevice{idle, other}, closed: true}
	tree := func(p uint32) bool { return p == 7 }
	al := g.begin(tree)
	<-al.done
	var b gpuSnap
	g.end(al, &b, clk.Now())
	r := g.attribute(al, &b, tree, al.snap.at, b.at)
	if idle.reads+other.reads != 0 || r.Used || r.Joules != 0 || r.Err != nil {
		t.Fatalf("read the energy %d and %d times (want 0); result %+v", idle.reads, other.reads, r)
	}
}

// lateDevice lists the tree's process only once on is set: a model the call loaded.
type lateDevice struct {
	profileDevice
	on atomic.Bool
}

func (d *lateDevice) PIDs(dst []uint32) ([]uint32, error) {
	if d.on.Load() {
		return append(dst, 7), nil
	}
	return dst, nil
}

// TestNVMLStartedMidSpan: a GPU the tree was not on at Begin had no counter read then: its
// settled GPU part is no counter figure (gpu-started-mid-span), whatever the counter did.
func TestNVMLStartedMidSpan(t *testing.T) {
	clk := newFakeClock()
	d := &lateDevice{profileDevice: profileDevice{clk: clk, t0: clk.Now(), idleW: 60}}
	g := &gpus{wait: 250 * time.Millisecond, poll: 5 * time.Millisecond, now: clk.Now, sleep: clk.Advance, devs: []gpuDevice{d}, closed: true}
	tree := func(p uint32) bool { return p == 7 }
	al := g.begin(tree)
	<-al.done
	d.on.Store(true)
	clk.Advance(300 * time.Millisecond)
	var b gpuSnap
	g.end(al, &b, clk.Now())
	if r := g.attribute(al, &b, tree, al.start, b.at); !r.Used || !errors.Is(r.Err, ErrGPULate) {
		t.Fatalf("attribute = %+v, want the tree used the GPU and %v", r, ErrGPULate)
	}
}

// foreignDevice lists another job's process.
type foreignDevice struct{ countDevice }

func (d *foreignDevice) PIDs(dst []uint32) ([]uint32, error) { return append(dst, 9), nil }

type stepDevice struct {
	mu     sync.Mutex
	values []uint64
}

func (d *stepDevice) Name() string { return "step" }
func (d *stepDevice) EnergyMJ() (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.values[0]
	if len(d.values) > 1 {
		d.values = d.values[1:]
	}
	return v, nil
}
func (d *stepDevice) PowerLimitW() (float64, error)          { return 700, nil }
func (d *stepDevice) PowerW() (float64, error)               { return 0, errors.New("not supported") }
func (d *stepDevice) PIDs(dst []uint32) ([]uint32, error)    { return append(dst, 7), nil }
func (d *stepDevice) InstantPowerW() (float64, error)        { return 0, errors.New("not supported") }
func (d *stepDevice) Utilization(uint64) ([]procUtil, error) { return nil, nil }

// closerFunc makes a close function an io.Closer.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// TestNVMLProbeAtStart: each GPU is probed on its own at start (on a fake clock): one frozen
// GPU beside seven live ones drops NVML, naming it.
func TestNVMLProbeAtStart(t *testing.T) {
	for _, step := range []uint64{0, 50_000} {
		t.Run(fmt.Sprintf("device 0 steps %d mJ", step), func(t *testing.T) {
			now, sleep, _ := sleepClock()
			m, err := New(Options{SysfsRoot: t.TempDir(), ProcRoot: t.TempDir(), DevRoot: t.TempDir(), RAPL: "off",
				nvml:     mockNVML(&gpuScript{energy: 5_000_000, step: step, pids: func(int) []uint32 { return nil }}),
				probeNow: now, probeSleep: sleep})
			if err != nil {
				t.Fatal(err)
			}
			defer closeOK(t, m)
			if step == 0 {
				if m.gpu != nil || reasonFor(m.gpuErr, ReasonNoNVML) != ReasonCounterDead || !strings.Contains(m.gpuErr.Error(), "gpu 0") {
					t.Fatalf("a frozen GPU beside live ones: gpu = %v, err = %v", m.gpu, m.gpuErr)
				}
				return
			}
			if m.gpu == nil {
				t.Fatalf("eight live GPUs dropped: %v", m.gpuErr)
			}
		})
	}
}

// TestNVMLBackwards: a GPU counter that went backwards over a span is an error, not a figure.
func TestNVMLBackwards(t *testing.T) {
	g := &gpus{wait: time.Second, poll: time.Millisecond, now: time.Now, sleep: time.Sleep, closed: true}
	g.devs = []gpuDevice{&stepDevice{values: []uint64{5000, 6000, 6000, 4000}}}
	var a, b gpuSnap
	g.snapshot(&a)
	al := g.alignBegin(&a)
	<-al.done
	g.snapshot(&b)
	r := g.attribute(al, &b, func(p uint32) bool { return p == 7 }, a.at, b.at)
	if r.Err == nil || r.Joules != 0 {
		t.Fatalf("attribute = %+v, want an error", r)
	}
}

// TestGPUBusy: the GPU power model's GPUs-busy is the tree's SM utilisation per sample instant
// over the span, in GPUs: 50% then 30% over two instants is 0.4 of a GPU; another process's
// sample is not the tree's, and makes the tree no sole user (share 0).
func TestGPUBusy(t *testing.T) {
	d := &stepDevice{values: []uint64{1}}
	t0 := time.Unix(1_700_000_000, 0)
	g := &gpus{devs: []gpuDevice{d}, now: time.Now, closed: true, logs: []devLog{{util: []utilRead{
		{procUtil: procUtil{PID: 7, TimeStamp: uint64(t0.UnixMicro()) + 1, SM: 50}}, {procUtil: procUtil{PID: 9, TimeStamp: uint64(t0.UnixMicro()) + 1, SM: 20}},
		{procUtil: procUtil{PID: 7, TimeStamp: uint64(t0.UnixMicro()) + 2, SM: 30}}}}}}
	a := &gpuAlign{snap: gpuSnap{pids: [][]uint32{{7}}, perr: []error{nil}, at: t0}}
	share, busy := g.shares(a, nil, []int{0}, func(p uint32) bool { return p == 7 }, t0, t0.Add(time.Second))
	if !near(busy, 0.4) || share != 0 {
		t.Fatalf("shares = %v, busy = %v; want share 0 (another process's sample), 0.4 GPUs busy", share, busy)
	}
}

// TestGPUSamplesByOwnTime: a utilisation sample counts for a span by its own time stamp, not
// by when a read returned it: another process's sample stamped before the span, read during it
// (NVML's first read returns its whole buffer), is not the span's; one stamped inside it, read
// after it, is.
func TestGPUSamplesByOwnTime(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	us := func(d time.Duration) uint64 { return uint64(t0.Add(d).UnixMicro()) }
	tree := func(p uint32) bool { return p == 7 }
	a := &gpuAlign{snap: gpuSnap{pids: [][]uint32{{7}}, perr: []error{nil}, at: t0}}
	g := &gpus{devs: []gpuDevice{&stepDevice{values: []uint64{1}}}, now: time.Now, closed: true, logs: []devLog{{util: []utilRead{
		{at: t0.Add(100 * time.Millisecond), procUtil: procUtil{PID: 9, TimeStamp: us(-time.Second), SM: 90}},
		{at: t0.Add(100 * time.Millisecond), procUtil: procUtil{PID: 7, TimeStamp: us(50 * time.Millisecond), SM: 60}}}}}}
	if share, busy := g.shares(a, nil, []int{0}, tree, t0, t0.Add(time.Second)); share != 1 || !near(busy, 0.6) {
		t.Fatalf("a foreign sample stamped a second before the span: share %v, busy %v; want 1, 0.6", share, busy)
	}
	g.logs[0].util = append(g.logs[0].util, utilRead{at: t0.Add(2 * time.Second), procUtil: procUtil{PID: 9, TimeStamp: us(900 * time.Millisecond), SM: 10}})
	if share, _ := g.shares(a, nil, []int{0}, tree, t0, t0.Add(time.Second)); share != 0 {
		t.Fatalf("a foreign sample stamped inside the span, read after it: share %v, want 0", share)
	}
}

// TestNVMLOverlapNoSettle: overlapping spans have no GPU figure (span-overlap), so neither is
// provisional and neither reads the counter at its end.
func TestNVMLOverlapNoSettle(t *testing.T) {
	script := &gpuScript{energy: 5_000_000, step: 50_000, pids: func(int) []uint32 { return []uint32{102} }}
	m, _ := fixtureMeter(t, mockNVML(script))
	a := m.Begin("ollama")
	b := m.Begin("ollama")
	<-a.c.gpuAlign.done
	<-b.c.gpuAlign.done
	cpuWork(t, m, 0.5, 5)
	for _, s := range []*Span{a, b} {
		f := s.End(Work{})
		if f.Provisional || s.settle != nil || !strings.Contains(f.Reason, ReasonSpanOverlap) || f.Coverage != energy.CoveragePartial {
			t.Fatalf("End = %+v (settling %v); want a final figure without a GPU part", f, s.settle != nil)
		}
	}
}

// TestSamplerLogBounded: a device's log keeps one run per list (an unchanged list every poll
// of a long stream is one entry), stays within maxRuns and maxPower however long a span
// stays open, and loses no evidence when it merges: a foreign PID or an unreadable list seen
// early stays seen. A run that began before a span and lasted into it is the span's.
func TestSamplerLogBounded(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(k int) time.Time { return t0.Add(time.Duration(k) * 5 * time.Millisecond) }
	var l devLog
	for k := range 5000 {
		l.addRead(at(k), []uint32{7, 3}, nil)
	}
	if len(l.reads) != 1 || !l.reads[0].at.Equal(at(0)) || !l.reads[0].until.Equal(at(4999)) || !slices.Equal(l.reads[0].pids, []uint32{3, 7}) {
		t.Fatalf("an unchanged list: %d runs, first %+v", len(l.reads), l.reads[0])
	}
	g := &gpus{devs: []gpuDevice{&stepDevice{values: []uint64{1}}}, logs: []devLog{l}}
	n := 0
	g.seenBetween(0, at(100), at(101), func(pidRead) { n++ })
	if n != 1 || !g.sampledBetween(at(100), at(101)) {
		t.Fatalf("a run over the span: seen %d times", n)
	}

	l = devLog{}
	l.addRead(at(0), nil, errors.New("unreadable"))
	l.addRead(at(1), []uint32{7, 9}, nil)
	for k := 2; k < 6000; k++ {
		l.addRead(at(k), []uint32{7, uint32(100 + k%2)}, nil)
	}
	if len(l.reads) > maxRuns {
		t.Fatalf("%d runs, more than %d", len(l.reads), maxRuns)
	}
	var foreign, unknown bool
	for _, r := range l.reads {
		foreign = foreign || slices.Contains(r.pids, 9)
		unknown = unknown || r.err != nil
	}
	if !foreign || !unknown || !l.reads[0].at.Equal(at(0)) || !l.reads[len(l.reads)-1].until.Equal(at(5999)) {
		t.Fatalf("merged runs lost evidence: foreign PID %v, unreadable list %v, from %v to %v", foreign, unknown, l.reads[0].at, l.reads[len(l.reads)-1].until)
	}
	for k := range 10000 {
		l.addPower(at(k), 100)
	}
	if len(l.power) > maxPower || !l.power[0].at.Equal(at(0)) {
		t.Fatalf("%d power readings, more than %d, or the oldest lost", len(l.power), maxPower)
	}
}
