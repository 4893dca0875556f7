//go:build !nonvml && cgo

package meter

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

// h200 is one board as an H200 behaved under pynvml (issue 27; gpu-check on a 700 W H200):
//   - the total-energy counter publishes every 97 to 103 ms;
//   - an energy read takes 3 to 16 ms (3.2 ms median), and NVML serialises calls: a process
//     list read waits behind an energy read in flight;
//   - a process list takes microseconds (9 µs) and lists every process holding a context;
//   - nvmlDeviceGetProcessUtilization gives at most one sample per process, and every other
//     call none (NOT_FOUND);
//   - the instant power field (4 µs a read) follows the load within a sample, here 20 ms late
//     (80 W idle, 700 to 770 W busy, above the 700 W limit for fractions of a second), while
//     nvmlDeviceGetPowerUsage is a one-second average;
//   - after work the board's power falls back to idle over a tail of 150 ms;
//   - processes come and go between reads.
//
// Time is the test's fake clock: a read moves it by its cost.
type h200 struct {
	mu    sync.Mutex
	clk   *fakeClock
	t0    time.Time
	loads []h200Load
	procs []h200Proc
	reads int // energy reads so far
	utils int // utilisation calls so far
}

// h200Load is work on the board: w watts over [from, to) after t0.
type h200Load struct {
	from, to time.Duration
	w        float64
}

// h200Proc is a process holding a context on the board over [from, to) after t0.
type h200Proc struct {
	pid      uint32
	from, to time.Duration
}

const (
	h200IdleW  = 80.0
	h200LimitW = 700.0
	h200Tail   = 150 * time.Millisecond
	h200Step   = 100 * time.Microsecond // the integration step of the board's energy
	h200Lag    = 20 * time.Millisecond  // how late the instant power field follows the load
	h200List   = 9 * time.Microsecond   // a process list read's cost
	h200Field  = 4 * time.Microsecond   // an instant power read's cost
)

// nvmlLock serialises NVML's calls across the boards of a mock, as the driver does.
var nvmlLock sync.Mutex

// h200Periods is the sequence of update periods the counter cycles through.
var h200Periods = []time.Duration{100, 97, 103, 99, 101, 98, 102}

// h200ReadCost is the sequence of energy read costs, in 100 µs units (3.2 ms median, 16 at worst).
var h200ReadCost = []time.Duration{32, 30, 41, 32, 160, 35, 31}

func (h *h200) power(t time.Duration) float64 {
	w := h200IdleW
	for _, l := range h.loads {
		switch {
		case t >= l.from && t < l.to:
			w += l.w - h200IdleW
		case t >= l.to && t < l.to+h200Tail:
			w += (l.w - h200IdleW) * float64(l.to+h200Tail-t) / float64(h200Tail)
		}
	}
	return w
}

// drawn is the energy the board drew over [a, b) after t0, in J.
func (h *h200) drawn(a, b time.Duration) float64 {
	var j float64
	for t := a; t < b; t += h200Step {
		j += h.power(t) * min(h200Step, b-t).Seconds()
	}
	return j
}

// published is the counter's value at t: the energy drawn up to its last update, in mJ.
func (h *h200) published(t time.Duration) uint64 {
	var last, at time.Duration
	for k := 0; ; k++ {
		next := at + h200Periods[k%len(h200Periods)]*time.Millisecond
		if next > t {
			break
		}
		at = next
	}
	if at > last {
		last = at
	}
	return 50_000_000 + uint64(h.drawn(0, last)*1000)
}

func (h *h200) since() time.Duration { return h.clk.Now().Sub(h.t0) }

func (h *h200) energy() (uint64, nvml.Return) {
	nvmlLock.Lock()
	defer nvmlLock.Unlock()
	h.mu.Lock()
	cost := h200ReadCost[h.reads%len(h200ReadCost)] * 100 * time.Microsecond
	h.reads++
	h.mu.Unlock()
	h.clk.Advance(cost / 2)
	h.mu.Lock()
	v := h.published(h.since())
	h.mu.Unlock()
	h.clk.Advance(cost - cost/2)
	return v, nvml.SUCCESS
}

func (h *h200) pids() ([]nvml.ProcessInfo, nvml.Return) {
	nvmlLock.Lock()
	defer nvmlLock.Unlock()
	h.clk.Advance(h200List)
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.since()
	var out []nvml.ProcessInfo
	for _, p := range h.procs {
		if t >= p.from && t < p.to {
			out = append(out, nvml.ProcessInfo{Pid: p.pid, UsedGpuMemory: 4 << 30})
		}
	}
	return out, nvml.SUCCESS
}

func (h *h200) util(since uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	nvmlLock.Lock()
	defer nvmlLock.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.utils++
	if h.utils%2 == 0 {
		return nil, nvml.ERROR_NOT_FOUND
	}
	t := h.since()
	var out []nvml.ProcessUtilizationSample
	for _, p := range h.procs {
		if t >= p.from && t < p.to {
			sm := uint32(0)
			if h.power(t) > 2*h200IdleW {
				sm = 90 // whose work it is, NVML's one sample may not tell
			}
			out = append(out, nvml.ProcessUtilizationSample{Pid: p.pid, TimeStamp: uint64(h.clk.Now().UnixMicro()), SmUtil: sm})
		}
	}
	if len(out) == 0 {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return out, nvml.SUCCESS
}

// add puts work and processes on the board, in times after t0.
func (h *h200) add(loads []h200Load, procs []h200Proc) {
	h.mu.Lock()
	h.loads = append(h.loads, loads...)
	h.procs = append(h.procs, procs...)
	h.mu.Unlock()
}

// mockH200 builds an 8-board mock whose board 0 is h; the others idle with no process.
func mockH200(h *h200) func() (*gpus, error) {
	srv := dgxh100.New()
	for i, d := range srv.Devices {
		dev := d.(*server.Device)
		dev.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return h200LimitW * 1000, nvml.SUCCESS }
		dev.GetGraphicsRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
		if i > 0 {
			dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return h200IdleW * 1000, nvml.SUCCESS }
			dev.GetFieldValuesFunc = func(v []nvml.FieldValue) nvml.Return { return fieldPower(v, h200IdleW) }
			dev.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return 1_000_000, nvml.SUCCESS }
			dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
			dev.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) { return nil, nvml.ERROR_NOT_FOUND }
			continue
		}
		dev.GetTotalEnergyConsumptionFunc = h.energy
		dev.GetComputeRunningProcessesFunc = h.pids
		dev.GetProcessUtilizationFunc = h.util
		dev.GetFieldValuesFunc = func(v []nvml.FieldValue) nvml.Return {
			nvmlLock.Lock()
			defer nvmlLock.Unlock()
			h.clk.Advance(h200Field)
			h.mu.Lock()
			w := h.power(h.since() - h200Lag)
			h.mu.Unlock()
			return fieldPower(v, uint32(w))
		}
		dev.GetPowerUsageFunc = func() (uint32, nvml.Return) {
			h.mu.Lock()
			defer h.mu.Unlock()
			t := h.since()
			return uint32(h.drawn(max(t-time.Second, 0), t) * 1000), nvml.SUCCESS // a one-second average, in mW
		}
	}
	return func() (*gpus, error) { return openNVML(srv) }
}

// h200Meter meters the fixture Ollama (its GPU worker is PID 102) on board 0 of a mock H200, on
// the fixture's fake clock; RAPL measures the CPU side.
func h200Meter(t *testing.T) (*Meter, *h200, string) {
	t.Helper()
	h := &h200{}
	m, procRoot := fixtureMeter(t, func() (*gpus, error) {
		g, err := mockH200(h)()
		return g, err
	})
	clk, _ := fixtureClocks.Load(m)
	h.clk = clk.(*fakeClock)
	h.t0 = h.clk.Now()
	m.gpu.now, m.gpu.sleep, m.gpu.wait = h.clk.Now, h.clk.Advance, 250*time.Millisecond
	return m, h, procRoot
}

// h200Span runs one call of span on the mock: the tree's work (watts, 0 for none) over the
// span, the CPU side's 1 J, End, Settled. It returns End's and the settled figures, the
// span's edges on the clock and the energy the board drew between them. Begin's first update
// is awaited before the clock moves when the span is long enough to hold it.
func h200Span(t *testing.T, m *Meter, h *h200, span time.Duration, watts float64, during func(from time.Duration)) (end, settled energy.Figure, truth float64) {
	t.Helper()
	from := h.since()
	if watts > 0 {
		h.add([]h200Load{{from: from, to: from + span, w: watts}}, nil)
	}
	s := m.Begin("ollama")
	if span >= 150*time.Millisecond {
		<-s.c.gpuAlign.done
	}
	if during != nil {
		during(from)
	}
	if left := from + span - h.since(); left > 0 {
		cpuBurst(t, m, left.Seconds(), 0.001, 1)
	} else {
		cpuBurst(t, m, 0, 0.001, 1)
	}
	end = s.End(Work{CompletionTokens: 10})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	settled, err := s.Settled(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, b := s.c.gpuStart.Sub(h.t0), s.c.gpuEnd.Sub(h.t0)
	h.mu.Lock()
	truth = h.drawn(a, b)
	h.mu.Unlock()
	// Physics: no figure, Low or High above 1.5 × the limit × the span's own wall time (plus
	// the CPU side's figure and bounds).
	// End's figure, made before Begin's process lists were read, covers every board the tree
	// might be on (its recorded limits): each within its own ceiling.
	for k, f := range []energy.Figure{end, settled} {
		boards := 1.0
		if ins := f.Inputs.All(); k == 0 && len(ins) == 1 && ins[0].GPULimitW > h200LimitW {
			boards = ins[0].GPULimitW / h200LimitW
		}
		most := 1.5 * h200LimitW * boards * (b - a).Seconds()
		if f.GPUJoules > most+1e-9 || f.High > most+1.1 {
			t.Fatalf("a figure above what the board can draw over %v: %+v", b-a, f)
		}
	}
	if end.Provisional && settled.Coverage == end.Coverage && (settled.Joules < end.Low-1e-9 || settled.Joules > end.High+1e-9) {
		t.Fatalf("the provisional %+v does not hold the settled %+v", end, settled)
	}
	if d, err := Recompute(settled); err != nil || Disagreement(settled, d) != "" {
		t.Fatalf("the settled figure does not recompute: %v %s", err, Disagreement(settled, d))
	}
	if d, err := Recompute(end); err != nil || Disagreement(end, d) != "" {
		t.Fatalf("End's figure does not recompute: %v %s", err, Disagreement(end, d))
	}
	cpuBurst(t, m, 1.5, 0, 0) // a quiet gap before the next call
	return end, settled, truth
}

// TestH200Table runs the cases of issue 27's table against the H200 mock.
func TestH200Table(t *testing.T) {
	t.Run("solo 200 ms and 1 s: within their bounds", func(t *testing.T) {
		m, h, _ := h200Meter(t)
		h.add(nil, []h200Proc{{pid: 102, to: time.Hour}})
		for _, span := range []time.Duration{200 * time.Millisecond, time.Second} {
			for k := range 3 {
				end, f, truth := h200Span(t, m, h, span, 700, nil)
				gpu := f.GPUJoules
				if f.Coverage != energy.CoverageWhole || !strings.HasSuffix(f.Method, "+nvml") || truth+f.CPUJoules < f.Low-1e-6 || truth+f.CPUJoules > f.High+1e-6 {
					t.Fatalf("%v call %d: settled %+v; the board drew %v J", span, k, f, truth)
				}
				t.Logf("%v: provisional %.2f J, settled %.2f J in [%.2f, %.2f], the board drew %.2f J (%+.1f%%)",
					span, end.GPUJoules, gpu, f.Low-f.CPUJoules, f.High-f.CPUJoules, truth, 100*(gpu-truth)/truth)
			}
		}
	})
	t.Run("a foreign process runs kernels throughout: gpu-shared every time", func(t *testing.T) {
		m, h, _ := h200Meter(t)
		h.add([]h200Load{{to: time.Hour, w: 400}}, []h200Proc{{pid: 102, to: time.Hour}, {pid: 4242, to: time.Hour}})
		for k := range 14 {
			end, f, _ := h200Span(t, m, h, 200*time.Millisecond, 300, nil)
			if f.Coverage != energy.CoveragePartial || !strings.Contains(f.Reason, ReasonGPUShared) || end.Coverage == energy.CoverageWhole {
				t.Fatalf("call %d: End %+v, settled %+v; want gpu-shared", k, end, f)
			}
		}
	})
	t.Run("a foreign process at Begin, 60 ms of kernels, gone before End: not whole", func(t *testing.T) {
		m, h, _ := h200Meter(t)
		now := h.since()
		h.add([]h200Load{{from: now, to: now + 60*time.Millisecond, w: 700}},
			[]h200Proc{{pid: 102, to: time.Hour}, {pid: 4242, to: now + 100*time.Millisecond}})
		for range 2 {
			_, f, _ := h200Span(t, m, h, 400*time.Millisecond, 700, nil)
			if f.Coverage == energy.CoverageWhole && strings.Contains(f.Method, "nvml") {
				t.Fatalf("settled %+v; want no whole GPU figure", f)
			}
			now := h.since()
			h.add([]h200Load{{from: now, to: now + 60*time.Millisecond, w: 700}}, []h200Proc{{pid: 4242, from: now, to: now + 100*time.Millisecond}})
		}
	})
	t.Run("a foreign process born and gone inside a 4 s span: not whole", func(t *testing.T) {
		m, h, _ := h200Meter(t)
		h.add(nil, []h200Proc{{pid: 102, to: time.Hour}})
		for range 2 {
			_, f, _ := h200Span(t, m, h, 4*time.Second, 700, func(from time.Duration) {
				h.add([]h200Load{{from: from + time.Second, to: from + 1060*time.Millisecond, w: 770}},
					[]h200Proc{{pid: 4242, from: from + time.Second, to: from + 1080*time.Millisecond}})
				cpuBurst(t, m, (from + 1030*time.Millisecond - h.since()).Seconds(), 0, 0)
				waitSampled(t, m.gpu, 0, 2) // the sampler read the board while it lived
				cpuBurst(t, m, 0.1, 0, 0)
				waitSampled(t, m.gpu, 0, 2)
			})
			if f.Coverage == energy.CoverageWhole && strings.Contains(f.Method, "nvml") {
				t.Fatalf("settled %+v; want no whole GPU figure", f)
			}
		}
	})
	t.Run("2.4 ms spans after work: no part above 1.5 × the limit × the span", func(t *testing.T) {
		m, h, _ := h200Meter(t)
		h.add(nil, []h200Proc{{pid: 102, to: time.Hour}})
		for range 3 {
			now := h.since()
			h.add([]h200Load{{from: now, to: now + 80*time.Millisecond, w: 770}}, nil)
			cpuBurst(t, m, 0.08, 0, 0)
			h200Span(t, m, h, 2400*time.Microsecond, 700, nil) // the physics check is h200Span's
		}
	})
	t.Run("a CPU-only backend beside the foreign process: exact 0", func(t *testing.T) {
		m, h, procRoot := h200Meter(t)
		if err := os.Remove(filepath.Join(procRoot, "102", "fd", "7")); err != nil {
			t.Fatal(err)
		}
		h.add([]h200Load{{to: time.Hour, w: 700}}, []h200Proc{{pid: 200, to: time.Hour}})
		for range 3 {
			end, f, _ := h200Span(t, m, h, 200*time.Millisecond, 0, nil)
			if f.GPUJoules != 0 || f.Coverage != energy.CoverageWhole || end != f {
				t.Fatalf("End %+v, settled %+v; want an exact GPU zero", end, f)
			}
		}
	})
}
