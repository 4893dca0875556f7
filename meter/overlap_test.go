package meter

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// TestOverlapUnionBound: two overlapping calls on one backend, with or without RAPL, both say
// span-overlap, neither is measured, their model is named, and together they bill no more than
// the tree's CPU time over the union of their spans × W per core. Between two span edges the
// tree's time is split equally among the calls open (cpu-time-share).
func TestOverlapUnionBound(t *testing.T) {
	for _, rapl := range []string{"off", "auto"} {
		t.Run("rapl "+rapl, func(t *testing.T) {
			m, _ := cpuFixtureMeter(t, func(o *Options) { o.RAPL = rapl })
			burn := func(sec float64) { cpuWork(t, m, sec, sec*10) }
			a := m.Begin("ollama")
			burn(1) // a alone
			b := m.Begin("ollama")
			burn(2) // a and b
			fa := a.End(Work{CompletionTokens: 10})
			burn(1) // b alone
			fb := b.End(Work{CompletionTokens: 10})
			union := 4 * DefaultCPUWattsPerCore
			for name, f := range map[string]energy.Figure{"a": fa, "b": fb} {
				if !strings.Contains(f.Reason, ReasonSpanOverlap) || f.Grade != energy.Estimated || f.Method != MethodCPUTimeShare {
					t.Errorf("%s: %+v, want an estimate by %s saying %s", name, f, MethodCPUTimeShare, ReasonSpanOverlap)
				}
				if !near(f.Joules, union/2) {
					t.Errorf("%s: %v J, want %v (1 s alone + half of 2 s shared, at 10 W)", name, f.Joules, union/2)
				}
				// The share's bounds: at least the 1 s alone at 5 W, at most all 3 s open at 15 W;
				// each wider by a clock tick (10 ms) per process read at each end (3 processes).
				if !near(f.Low, 5-0.06*5) || !near(f.High, 45+0.06*15) {
					t.Errorf("%s: bounds [%v, %v], want [4.7, 45.9]", name, f.Low, f.High)
				}
				if d, err := Recompute(f); err != nil || Disagreement(f, d) != "" {
					t.Errorf("%s: recompute: %v %s", name, err, Disagreement(f, d))
				}
			}
			if sum := fa.Joules + fb.Joules; sum > union+1e-9 {
				t.Errorf("overlapping calls bill %v J together, more than the tree's %v J over their union", sum, union)
			}
			// After the overlap, a call alone is billed its tree's whole time again.
			c := m.Begin("ollama")
			burn(0.5)
			fc := c.End(Work{})
			if strings.Contains(fc.Reason, ReasonSpanOverlap) || !near(fc.CPUJoules, 5) {
				t.Errorf("a later call alone: %+v, want 5 J and no overlap", fc)
			}
		})
	}
}

// TestOverlapOtherBackend: calls on two backends overlap (so a host-wide counter is not one
// call's), but each tree's time is its own call's: the model is not split.
func TestOverlapOtherBackend(t *testing.T) {
	m, _ := cpuFixtureMeter(t, func(o *Options) { o.RAPL = "off" })
	burn := func(sec float64) { cpuWork(t, m, sec, sec*10) }
	a := m.Begin("ollama")
	r := m.Begin("cgroup")
	burn(2)
	fa := a.End(Work{})
	r.End(Work{})
	if !strings.Contains(fa.Reason, ReasonSpanOverlap) || fa.Method != MethodCPUTimeModel || !near(fa.CPUJoules, 20) {
		t.Errorf("figure = %+v, want 2 s × 10 W by %s, saying %s", fa, MethodCPUTimeModel, ReasonSpanOverlap)
	}
}

func near(x, y float64) bool { d := x - y; return d < 1e-6 && d > -1e-6 }

// TestOverlapGPUModel: two overlapping calls on a tree that holds a GPU nothing can measure are
// priced by the GPU power model on their shares of the wall time: together no more than one
// busy GPU over the union of their spans.
func TestOverlapGPUModel(t *testing.T) {
	m, _ := cpuFixtureMeter(t, func(o *Options) {
		o.RAPL = "off"
		o.DevRoot = t.TempDir()
		writeFile(t, filepath.Join(o.DevRoot, "nvidia0"), "")
	})
	t0 := m.opts.now()
	a := m.Begin("ollama")
	b := m.Begin("ollama")
	cpuWork(t, m, 0.1, 0)
	fa := a.End(Work{})
	fb := b.End(Work{})
	union := m.opts.now().Sub(t0)
	for _, f := range []energy.Figure{fa, fb} {
		if f.Method != MethodCPUTimeShare+"+"+MethodGPUModel || !strings.Contains(f.Reason, ReasonSpanOverlap) || f.GPUJoules <= 0 {
			t.Fatalf("figure = %+v, want the shared CPU model and the GPU model, saying span-overlap", f)
		}
	}
	if sum, most := fa.GPUJoules+fb.GPUJoules, DefaultGPUWatts*union.Seconds(); sum > most {
		t.Errorf("GPU model: %v J together, more than one busy GPU over the union (%v J)", sum, most)
	}
}
