package meter

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// good is a local span where every rule allows a measured, whole figure: RAPL read cleanly, no
// overlap, the tree and the proxy had all the host's busy time, and the tree was the GPU's sole
// user.
func good() spanSample {
	return spanSample{
		Local: true, Wall: 2 * time.Second,
		PromptTokens: 100, CompletionTokens: 50, JPerPrompt: 0.4, JPerCompletion: 4,
		TreeFound: true, TreeCPU: 3 * time.Second, ProxyCPU: 50 * time.Millisecond,
		HostBusy: 3050 * time.Millisecond, CPUWatts: 10,
		RAPLJoules: 120,
		GPUUsed:    true, GPUJoules: 400, GPUShare: 1, GPUBusy: 0.5, GPUWatts: 300,
	}
}

func TestAttribute(t *testing.T) {
	tokens := 100*0.4 + 50*4.0
	tests := []struct {
		name string
		edit func(*spanSample)
		want energy.Figure
	}{
		{name: "measured: sole user of CPU and GPU", edit: func(*spanSample) {},
			want: energy.Figure{Joules: 520, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: "rapl+nvml", CPUJoules: 120, GPUJoules: 400}},
		{name: "remote backend is priced by tokens", edit: func(s *spanSample) { s.Local = false },
			want: energy.Figure{Joules: tokens, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: MethodTokenModel, Reason: ReasonRemoteBackend}},
		{name: "local backend without processes is priced by tokens", edit: func(s *spanSample) { s.TreeFound = false },
			want: energy.Figure{Joules: tokens, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: MethodTokenModel, Reason: ReasonNoProcess}},
		{name: "no RAPL: CPU time model", edit: func(s *spanSample) { s.RAPLErr = fmt.Errorf("%w: no powercap", ErrNoData) },
			want: energy.Figure{Joules: 430, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "cpu-time-model+nvml", Reason: ReasonNoRAPL, CPUJoules: 30, GPUJoules: 400}},
		{name: "refused RAPL read", edit: func(s *spanSample) {
			s.RAPLErr = &fs.PathError{Op: "open", Path: "energy_uj", Err: fs.ErrPermission}
		},
			want: energy.Figure{Joules: 430, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "cpu-time-model+nvml", Reason: ReasonPermission, CPUJoules: 30, GPUJoules: 400}},
		{name: "RAPL may have wrapped twice", edit: func(s *spanSample) { s.RAPLErr = fmt.Errorf("rapl: %w", ErrCounterWrap) },
			want: energy.Figure{Joules: 430, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "cpu-time-model+nvml", Reason: ReasonCounterWrap, CPUJoules: 30, GPUJoules: 400}},
		{name: "dead RAPL", edit: func(s *spanSample) { s.RAPLErr = errCounterDead },
			want: energy.Figure{Joules: 430, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "cpu-time-model+nvml", Reason: ReasonCounterDead, CPUJoules: 30, GPUJoules: 400}},
		{name: "overlap: CPU estimated and no GPU figure", edit: func(s *spanSample) { s.Overlap = true },
			want: energy.Figure{Joules: 30, Grade: energy.Estimated, Coverage: energy.CoveragePartial, Method: MethodCPUTimeModel, Reason: "span-overlap;gpu-shared", CPUJoules: 30}},
		{name: "host shared: 98.9% of busy time", edit: func(s *spanSample) { s.HostBusy = time.Duration(float64(s.TreeCPU+s.ProxyCPU) / 0.989) },
			want: energy.Figure{Joules: 430, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "cpu-time-model+nvml", Reason: ReasonHostShared, CPUJoules: 30, GPUJoules: 400}},
		{name: "host exactly 99%: measured", edit: func(s *spanSample) { s.HostBusy = time.Duration(float64(s.TreeCPU+s.ProxyCPU) / 0.99) },
			want: energy.Figure{Joules: 520, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: "rapl+nvml", CPUJoules: 120, GPUJoules: 400}},
		{name: "the proxy's time counts with the tree's", edit: func(s *spanSample) { s.HostBusy = s.TreeCPU + s.ProxyCPU; s.ProxyCPU = 0 },
			want: energy.Figure{Joules: 430, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "cpu-time-model+nvml", Reason: ReasonHostShared, CPUJoules: 30, GPUJoules: 400}},
		{name: "host busy 0 ticks: unknown, not sole user", edit: func(s *spanSample) { s.HostBusy = 0 },
			want: energy.Figure{Joules: 430, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "cpu-time-model+nvml", Reason: ReasonHostUnknown, CPUJoules: 30, GPUJoules: 400}},
		{name: "host busy 0 and tree 0: still unknown", edit: func(s *spanSample) { s.HostBusy, s.TreeCPU, s.ProxyCPU = 0, 0, 0 },
			want: energy.Figure{Joules: 400, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "cpu-time-model+nvml", Reason: ReasonHostUnknown, CPUJoules: 0, GPUJoules: 400}},
		{name: "zero RAPL delta beside tree CPU: stale", edit: func(s *spanSample) { s.RAPLJoules = 0 },
			want: energy.Figure{Joules: 430, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "cpu-time-model+nvml", Reason: ReasonCounterStale, CPUJoules: 30, GPUJoules: 400}},
		{name: "host time unreadable", edit: func(s *spanSample) { s.HostErr = errors.New("boom") },
			want: energy.Figure{Joules: 430, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "cpu-time-model+nvml", Reason: ReasonCounterError, CPUJoules: 30, GPUJoules: 400}},
		{name: "vanished CPU process: short count is never a figure", edit: func(s *spanSample) { s.TreeShort = true; s.Overlap = true },
			want: energy.Figure{Joules: tokens, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: MethodTokenModel, Reason: "span-overlap;process-vanished"}},
		{name: "vanished CPU process with RAPL sole user: still measured", edit: func(s *spanSample) { s.TreeShort = true },
			want: energy.Figure{Joules: 520, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: "rapl+nvml", CPUJoules: 120, GPUJoules: 400}},
		{name: "no GPU time: exactly zero, no rail read", edit: func(s *spanSample) { s.GPUUsed = false; s.GPUErr = errors.New("rail unreadable") },
			want: energy.Figure{Joules: 120, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: MethodRAPL, CPUJoules: 120, GPUJoules: 0}},
		{name: "no GPU time without NVML", edit: func(s *spanSample) { s.GPUUsed = false; s.GPUErr = ErrNoData; s.RAPLErr = ErrNoData },
			want: energy.Figure{Joules: 30, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: MethodCPUTimeModel, Reason: ReasonNoRAPL, CPUJoules: 30}},
		{name: "GPU shared: 98% of process time", edit: func(s *spanSample) { s.GPUShare = 0.98 },
			want: energy.Figure{Joules: 120, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: MethodRAPL, Reason: ReasonGPUShared, CPUJoules: 120}},
		{name: "GPU exactly 99%", edit: func(s *spanSample) { s.GPUShare = 0.99 },
			want: energy.Figure{Joules: 520, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: "rapl+nvml", CPUJoules: 120, GPUJoules: 400}},
		{name: "GPU process vanished mid-span", edit: func(s *spanSample) { s.GPUVanished = true },
			want: energy.Figure{Joules: 120, Grade: energy.Measured, Coverage: energy.CoveragePartial, Method: MethodRAPL, Reason: ReasonGPUVanished, CPUJoules: 120}},
		{name: "GPU used without NVML: power model", edit: func(s *spanSample) { s.GPUErr = fmt.Errorf("%w: no library", ErrNoData); s.GPUBusy = 0 },
			want: energy.Figure{Joules: 720, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "rapl+gpu-model", Reason: ReasonNoNVML, CPUJoules: 120, GPUJoules: 600}},
		{name: "no NVML update inside the span: the bracket's split, estimated", edit: func(s *spanSample) { s.GPUSubPeriod = true },
			want: energy.Figure{Joules: 520, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "rapl+nvml", Reason: ReasonGPUSubPeriod, CPUJoules: 120, GPUJoules: 400}},
		{name: "stale NVML counter: power model at the tree's utilisation", edit: func(s *spanSample) { s.GPUErr = fmt.Errorf("nvml: %w", ErrCounterStale) },
			want: energy.Figure{Joules: 420, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "rapl+gpu-model", Reason: ReasonCounterStale, CPUJoules: 120, GPUJoules: 300}},
		{name: "everything wrong at once", edit: func(s *spanSample) {
			s.RAPLErr = ErrNoData
			s.GPUVanished = true
		},
			want: energy.Figure{Joules: 30, Grade: energy.Estimated, Coverage: energy.CoveragePartial, Method: MethodCPUTimeModel, Reason: "no-rapl;gpu-process-vanished", CPUJoules: 30}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := good()
			tc.edit(&s)
			got := attribute(s)
			if !closeFigure(got, tc.want) {
				t.Fatalf("attribute =\n %+v\nwant\n %+v", got, tc.want)
			}
			if (got.Reason == "") != (got.Grade == energy.Measured && got.Coverage == energy.CoverageWhole) {
				t.Fatalf("reason %q with grade %s and coverage %s", got.Reason, got.Grade, got.Coverage)
			}
			checkBounds(t, got)
			// The sample written down as ledger inputs and read back gives the same figure.
			if rt := attribute(fromInputs(toInputs(s))); !closeFigure(rt, got) || rt.Low != got.Low || rt.High != got.High {
				t.Fatalf("from its inputs =\n %+v\nwant\n %+v", rt, got)
			}
		})
	}
}

func closeFigure(a, b energy.Figure) bool {
	near := func(x, y float64) bool { d := x - y; return d < 1e-9 && d > -1e-9 }
	return near(a.Joules, b.Joules) && near(a.CPUJoules, b.CPUJoules) && near(a.GPUJoules, b.GPUJoules) &&
		a.Grade == b.Grade && a.Coverage == b.Coverage && a.Method == b.Method && a.Reason == b.Reason
}

// TestZeroGPUIsExact guards the exact zero: a tree with no GPU time gets 0, whatever the rail.
func TestZeroGPUIsExact(t *testing.T) {
	s := good()
	s.GPUUsed = false
	s.GPUJoules = 123.456 // what a rail read would have said
	if f := attribute(s); f.GPUJoules != 0 || f.Joules != s.RAPLJoules || f.Grade != energy.Measured {
		t.Fatalf("no GPU time gave %+v", f)
	}
}

func TestTreeDelta(t *testing.T) {
	startedInSpan := func(pid int) bool { return pid >= 1000 }
	tests := []struct {
		name  string
		a, b  []procSample
		ns    uint64
		short bool
	}{
		{name: "same processes", a: []procSample{{1, 100}, {2, 50}}, b: []procSample{{1, 300}, {2, 60}}, ns: 210},
		{name: "child born in the span counts whole", a: []procSample{{1, 100}}, b: []procSample{{1, 150}, {1000, 70}}, ns: 120},
		{name: "process older than the span joined: short", a: []procSample{{1, 100}}, b: []procSample{{1, 150}, {7, 70}}, ns: 50, short: true},
		{name: "process vanished: short", a: []procSample{{1, 100}, {2, 50}}, b: []procSample{{1, 150}}, ns: 50, short: true},
		{name: "reused PID: short", a: []procSample{{1, 100}}, b: []procSample{{1, 10}}, ns: 0, short: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns, short := treeDelta(tc.a, tc.b, startedInSpan)
			if ns != tc.ns || short != tc.short {
				t.Fatalf("treeDelta = %d, %v; want %d, %v", ns, short, tc.ns, tc.short)
			}
		})
	}
}
