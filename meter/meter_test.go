package meter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

func noGPU() (*gpus, error) { return nil, fmt.Errorf("%w: test", ErrNoData) }

// cpuFixtureMeter meters the fixture Ollama with the one-socket RAPL fixture and no NVML.
func cpuFixtureMeter(t *testing.T, edit func(*Options)) (*Meter, string) {
	t.Helper()
	procRoot, _ := procFixture(t)
	o := Options{
		SysfsRoot: sysFixture(t, "sys-one-socket.txtar"), ProcRoot: procRoot, DevRoot: t.TempDir(),
		SkipProbe: true, nvml: noGPU,
		Backends: []BackendInfo{
			{Name: "ollama", URL: "http://127.0.0.1:11434"},
			{Name: "nothing", URL: "http://127.0.0.1:1"},
			{Name: "openai", URL: "https://api.openai.com/v1"},
			{Name: "pidfile", URL: "http://gpu-box:8000", PIDFile: filepath.Join(procRoot, "ollama.pid")},
			{Name: "cgroup", URL: "http://gpu-box:8000", Cgroup: filepath.Join(procRoot, "cgroup", "ollama.service")},
		},
	}
	clk := newFakeClock()
	// Each reading of the clock takes a microsecond: a read gap is never 0.
	o.now = func() time.Time { clk.Advance(time.Microsecond); return clk.Now() }
	if edit != nil {
		edit(&o)
	}
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	fixtureClocks.Store(m, clk)
	t.Cleanup(func() { fixtureClocks.Delete(m); closeOK(t, m) })
	return m, procRoot
}

func TestEstimates(t *testing.T) {
	m, err := New(Options{SysfsRoot: t.TempDir(), SkipProbe: true, nvml: noGPU,
		Backends: []BackendInfo{
			{Name: "openai", URL: "https://api.openai.com/v1"},
			{Name: "groq", URL: "https://api.groq.com/openai/v1", JoulesPerToken: 0.2},
		},
		TokenModels: []TokenModel{{Patterns: []string{"gpt-4o*"}, JPerPrompt: 0.01, JPerCompletion: 0.3}}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, m)
	tests := []struct {
		name    string
		backend string
		work    Work
		joules  float64
		reason  string
	}{
		{name: "token model pattern", backend: "openai", work: Work{Model: "gpt-4o-mini", PromptTokens: 100, CompletionTokens: 10}, joules: 4, reason: ReasonRemoteBackend},
		{name: "remote default", backend: "openai", work: Work{Model: "o3", PromptTokens: 100, CompletionTokens: 10}, joules: 100*0.04 + 10*0.4, reason: ReasonRemoteBackend},
		{name: "backend's own price", backend: "groq", work: Work{Model: "llama", PromptTokens: 100, CompletionTokens: 10}, joules: 100*0.02 + 10*0.2, reason: ReasonRemoteBackend},
		{name: "unknown backend is remote", backend: "who", work: Work{CompletionTokens: 1}, joules: 0.4, reason: ReasonRemoteBackend},
		{name: "failed call with no tokens", backend: "openai", work: Work{Failed: true}, joules: 0, reason: ReasonRemoteBackend},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := m.Begin(tc.backend).End(tc.work)
			if f.Grade != energy.Estimated || f.Method != MethodTokenModel || f.Reason != tc.reason ||
				f.Joules < tc.joules-1e-9 || f.Joules > tc.joules+1e-9 {
				t.Fatalf("figure = %+v, want %v J", f, tc.joules)
			}
		})
	}
	var nilm *Meter
	if f := nilm.Begin("x").End(Work{CompletionTokens: 1}); f.Joules != DefaultRemoteJPerCompletion || f.Grade != energy.Estimated {
		t.Fatalf("nil meter figure = %+v", f)
	}
	if nilm.Close() != nil {
		t.Fatal("nil meter")
	}
}

func TestSpanEndTwice(t *testing.T) {
	m, _ := cpuFixtureMeter(t, nil)
	s := m.Begin("ollama")
	a := s.End(Work{})
	b := s.End(Work{CompletionTokens: 1000})
	if a != b {
		t.Fatalf("second End changed the figure: %+v then %+v", a, b)
	}
	if m.active != 0 {
		t.Fatalf("active = %d after End twice", m.active)
	}
}

func TestFixtureMeasured(t *testing.T) {
	m, _ := cpuFixtureMeter(t, nil)
	s := m.Begin("ollama")
	cpuWork(t, m, 1, 20) // the tree is the host's only user
	f := s.End(Work{})
	if f.Grade != energy.Measured || f.Method != MethodRAPL || f.Coverage != energy.CoverageWhole || f.Reason != "" || !near(f.Joules, 20) {
		t.Fatalf("figure = %+v", f)
	}
	// The counter was read before the span began and after it ended: the read gap is in the
	// inputs and widens the low bound beyond the two counter updates.
	ins := f.Inputs.All()
	if len(ins) != 1 || ins[0].RAPLGapNS <= 0 || !(f.Low < f.Joules-(2*raplUpdate).Seconds()*f.Joules/(time.Duration(ins[0].WallNS)+time.Duration(ins[0].RAPLGapNS)).Seconds()) {
		t.Fatalf("figure %v [%v, %v], inputs %+v: no read gap", f.Joules, f.Low, f.High, ins)
	}
}

func TestOverlap(t *testing.T) {
	m, _ := cpuFixtureMeter(t, nil)
	type step struct {
		span  string
		begin bool
	}
	tests := []struct {
		name    string
		steps   []step
		overlap map[string]bool
	}{
		{name: "one after the other", steps: []step{{"a", true}, {"a", false}, {"b", true}, {"b", false}},
			overlap: map[string]bool{"a": false, "b": false}},
		{name: "nested", steps: []step{{"a", true}, {"b", true}, {"b", false}, {"a", false}},
			overlap: map[string]bool{"a": true, "b": true}},
		{name: "staggered", steps: []step{{"a", true}, {"b", true}, {"a", false}, {"b", false}},
			overlap: map[string]bool{"a": true, "b": true}},
		{name: "remote spans do not overlap local ones", steps: []step{{"a", true}, {"r", true}, {"r", false}, {"a", false}},
			overlap: map[string]bool{"a": false, "r": false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spans := map[string]*Span{}
			figs := map[string]energy.Figure{}
			for _, st := range tc.steps {
				backend := "ollama"
				if st.span == "r" {
					backend = "openai"
				}
				if st.begin {
					spans[st.span] = m.Begin(backend)
				} else {
					cpuWork(t, m, 0.5, 5)
					figs[st.span] = spans[st.span].End(Work{})
				}
			}
			for name, want := range tc.overlap {
				f := figs[name]
				if got := strings.Contains(f.Reason, ReasonSpanOverlap); got != want {
					t.Errorf("span %s: %+v, overlap want %v", name, f, want)
				}
				if name != "r" && f.Measured() == want {
					t.Errorf("span %s: measured %v with overlap %v", name, f.Measured(), want)
				}
			}
		})
	}
}

func TestConcurrentSpans(t *testing.T) {
	m, _ := cpuFixtureMeter(t, nil)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 20 {
				b := "ollama"
				if i%2 == 1 {
					b = "openai"
				}
				m.Begin(b).End(Work{CompletionTokens: 1})
			}
		})
	}
	wg.Wait()
	if m.active != 0 {
		t.Fatalf("active = %d", m.active)
	}
}

// TestPermissionOnce: a refused energy_uj makes RAPL unavailable at start, with that reason,
// and no span tries it again.
func TestPermissionOnce(t *testing.T) {
	rfs := &refusingFS{suffixes: []string{"energy_uj"}}
	m, _ := cpuFixtureMeter(t, func(o *Options) { o.fs = rfs })
	if m.rapl != nil || reasonFor(m.raplErr, ReasonNoRAPL) != ReasonPermission {
		t.Fatalf("rapl = %v, err = %v", m.rapl, m.raplErr)
	}
	before := rfs.refused.Load()
	for range 3 {
		f := m.Begin("ollama").End(Work{})
		if f.Reason != ReasonPermission || f.Grade != energy.Estimated || f.Method != MethodCPUTimeModel {
			t.Fatalf("figure = %+v", f)
		}
	}
	if after := rfs.refused.Load(); after != before {
		t.Fatalf("spans retried the refused counter %d times", after-before)
	}
}

func TestCounterSwitches(t *testing.T) {
	if _, err := New(Options{SysfsRoot: t.TempDir(), SkipProbe: true, nvml: noGPU, RAPL: "on"}); err == nil {
		t.Fatal(`rapl "on" without RAPL did not fail`)
	}
	if _, err := New(Options{RAPL: "maybe"}); err == nil {
		t.Fatal("a bad switch was accepted")
	}
	if _, err := New(Options{CPUWattsPerCore: -1}); err == nil {
		t.Fatal("negative watts were accepted")
	}
	m, _ := cpuFixtureMeter(t, func(o *Options) { o.RAPL = "off" })
	if f := m.Begin("ollama").End(Work{}); f.Reason != ReasonNoRAPL {
		t.Fatalf("rapl off: %+v", f)
	}
}

func TestPIDFileAndCgroup(t *testing.T) {
	m, procRoot := cpuFixtureMeter(t, func(o *Options) { o.RAPL = "off" })
	pids, err := m.treePIDs(m.backends["pidfile"], nil)
	if err != nil || fmt.Sprint(pids) != "[101 102]" {
		t.Fatalf("pid file tree = %v, %v", pids, err)
	}
	// The cgroup's usage_usec is the CPU time, exited processes included.
	s := m.Begin("cgroup")
	cpuWork(t, m, 2, 0) // the clock: 2 s of a core's CPU time needs a second of wall time at least
	writeFile(t, filepath.Join(procRoot, "cgroup", "ollama.service", "cpu.stat"), "usage_usec 3234567\n")
	f := s.End(Work{})
	if f.Method != MethodCPUTimeModel || f.CPUJoules < 20-1e-9 || f.CPUJoules > 20+1e-9 {
		t.Fatalf("cgroup figure = %+v, want 2 s × 10 W", f)
	}
}

func TestNoProcess(t *testing.T) {
	m, _ := cpuFixtureMeter(t, nil)
	f := m.Begin("nothing").End(Work{PromptTokens: 10, CompletionTokens: 10})
	if f.Method != MethodTokenModel || f.Reason != ReasonNoProcess || f.Joules != 10*DefaultLocalJPerCompletion*1.1 {
		t.Fatalf("figure = %+v", f)
	}
}

func TestGPUNodesWithoutNVML(t *testing.T) {
	// /dev has an NVIDIA device and the fixture's 102 holds /dev/nvidia0 open: it used a GPU
	// that nothing can measure, so the GPU power model estimates.
	m, _ := cpuFixtureMeter(t, func(o *Options) {
		o.DevRoot = t.TempDir()
		writeFile(t, filepath.Join(o.DevRoot, "nvidia0"), "")
	})
	s := m.Begin("ollama")
	cpuWork(t, m, 1, 10)
	f := s.End(Work{})
	if f.Method != "rapl+gpu-model" || f.Reason != ReasonNoNVML || f.GPUJoules <= 0 {
		t.Fatalf("figure = %+v", f)
	}
	// The tree's descriptors cannot be read: whether it used the GPU is unknown, not 0.
	m.fs = &refusingFS{suffixes: []string{"/fd"}}
	m.proc.fs = m.fs
	s = m.Begin("ollama")
	cpuWork(t, m, 1, 10)
	if f := s.End(Work{}); f.Coverage != energy.CoveragePartial || f.Reason != ReasonGPUUnattributed || f.GPUJoules != 0 {
		t.Fatalf("unreadable descriptors: %+v, want partial, %s", f, ReasonGPUUnattributed)
	}
}

// TestProbeAtStart: fixture counters stand still, so without SkipProbe RAPL is dropped as dead.
func TestProbeAtStart(t *testing.T) {
	m, _ := cpuFixtureMeter(t, func(o *Options) { o.SkipProbe = false; o.probeNow, o.probeSleep, _ = sleepClock() })
	if m.rapl != nil || reasonFor(m.raplErr, ReasonNoRAPL) != ReasonCounterDead {
		t.Fatalf("a still RAPL passed the probe: %v", m.raplErr)
	}
	if f := m.Begin("ollama").End(Work{}); f.Reason != ReasonCounterDead {
		t.Fatalf("figure = %+v", f)
	}
}

func TestStatus(t *testing.T) {
	m, _ := cpuFixtureMeter(t, func(o *Options) { o.probeNow, o.probeSleep, _ = sleepClock() })
	rep := m.Status(context.Background(), 10*time.Millisecond)
	byName := map[string]CounterStatus{}
	for _, c := range rep.Counters {
		byName[strings.SplitN(c.Name, ":", 2)[0]] = c
	}
	if c := byName["rapl"]; c.Live || c.Reason != ReasonCounterDead || c.Name != "rapl:package-0+dram" {
		t.Fatalf("rapl status = %+v", c)
	}
	if c := byName["nvml"]; c.Live || c.Reason != ReasonNoNVML {
		t.Fatalf("nvml status = %+v", c)
	}
	if c := byName["proxy-cpu"]; !c.Live || c.ReadCostUS <= 0 {
		t.Fatalf("proxy-cpu status = %+v", c)
	}
	var ollama BackendStatus
	for _, b := range rep.Backends {
		if b.Name == "ollama" {
			ollama = b
		}
	}
	if ollama.Source != "listen:11434" || len(ollama.Processes) != 3 || ollama.Processes[2].Comm != "gpu (worker) x" {
		t.Fatalf("ollama status = %+v", ollama)
	}
}

// TestNoProcessHostJPerToken: when a backend's processes are not found, a model this host has
// measured is priced at its own measured J per token (method host-token-model), not at the
// published default; a model never measured here keeps the default.
func TestNoProcessHostJPerToken(t *testing.T) {
	m, _ := cpuFixtureMeter(t, nil)
	// An estimate is not learnt: here host-unknown (the host's busy time did not move), 0 J.
	if f := m.Begin("ollama").End(Work{Model: "llama3", CompletionTokens: 1000}); f.Measured() {
		t.Fatalf("a span on still counters was measured: %+v", f)
	}
	s := m.Begin("ollama")
	cpuWork(t, m, 1, 20)
	if f := s.End(Work{Model: "llama3", PromptTokens: 100, CompletionTokens: 10}); !f.Measured() || !near(f.Joules, 20) {
		t.Fatalf("measured span: %+v", f)
	}
	// 20 J for 10 output tokens and 100 prompt tokens at a tenth: 1 J per output token.
	f := m.Begin("nothing").End(Work{Model: "llama3", PromptTokens: 10, CompletionTokens: 5})
	if f.Method != MethodHostTokenModel || f.Reason != ReasonNoProcess || f.Grade != energy.Estimated || !near(f.Joules, 6) {
		t.Fatalf("no process, a model measured here: %+v, want 6 J by %s", f, MethodHostTokenModel)
	}
	f = m.Begin("nothing").End(Work{Model: "mistral", CompletionTokens: 5})
	if f.Method != MethodTokenModel || !near(f.Joules, 5*DefaultLocalJPerCompletion) {
		t.Fatalf("no process, a model never measured here: %+v", f)
	}
}

// TestTreeCores: the cap on a tree's CPU time counts the cores the tree may run on: the
// host's online CPUs, no more than its processes' affinities together, no more than the quotas
// of their cgroups (each the tightest of a cgroup and its ancestors, summed over the tree's
// cgroups), no more than the backend's own cgroup's; never the proxy's own limits.
func TestTreeCores(t *testing.T) {
	m, procRoot := cpuFixtureMeter(t, func(o *Options) { o.RAPL = "off" })
	sys := m.opts.SysfsRoot
	mkdir := func(p string) {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tree := []int{100, 101, 102}
	mkdir(filepath.Join(sys, "devices", "system", "cpu"))
	writeFile(t, filepath.Join(sys, "devices", "system", "cpu", "online"), "0-63\n")
	if c := m.treeCores(m.backends["ollama"], tree); c != 64 {
		t.Fatalf("no affinity, no quota read: %v cores, want the host's 64", c)
	}
	// The proxy's own cgroup at a quarter core says nothing of the backend's.
	mkdir(filepath.Join(procRoot, "self"))
	writeFile(t, filepath.Join(procRoot, "self", "cgroup"), "0::/proxy.slice\n")
	mkdir(filepath.Join(sys, "fs", "cgroup", "proxy.slice"))
	writeFile(t, filepath.Join(sys, "fs", "cgroup", "proxy.slice", "cpu.max"), "25000 100000\n")
	if c := m.treeCores(m.backends["ollama"], tree); c != 64 {
		t.Fatalf("the proxy's cgroup capped the tree: %v cores, want 64", c)
	}
	for pid, cpus := range map[int]string{100: "0-1", 101: "1-2", 102: "8"} {
		writeFile(t, filepath.Join(procRoot, strconv.Itoa(pid), "status"), "Name:\tx\nCpus_allowed:\tff\nCpus_allowed_list:\t"+cpus+"\nVoluntary_ctxt_switches:\t1\n")
	}
	if c := m.treeCores(m.backends["ollama"], tree); c != 4 {
		t.Fatalf("affinities 0-1, 1-2 and 8: %v cores, want 4", c)
	}
	for pid, cg := range map[int]string{100: "/backend.slice/a", 101: "/backend.slice/a", 102: "/backend.slice/b"} {
		writeFile(t, filepath.Join(procRoot, strconv.Itoa(pid), "cgroup"), "1:cpu:/\n0::"+cg+"\n")
	}
	mkdir(filepath.Join(sys, "fs", "cgroup", "backend.slice", "a"))
	mkdir(filepath.Join(sys, "fs", "cgroup", "backend.slice", "b"))
	writeFile(t, filepath.Join(sys, "fs", "cgroup", "backend.slice", "cpu.max"), "300000 100000\n")
	writeFile(t, filepath.Join(sys, "fs", "cgroup", "backend.slice", "a", "cpu.max"), "50000 100000\n")
	writeFile(t, filepath.Join(sys, "fs", "cgroup", "backend.slice", "b", "cpu.max"), "max 100000\n")
	if c := m.treeCores(m.backends["ollama"], tree); c != 3.5 {
		t.Fatalf("cgroups a (half a core) and b (its parent's 3): %v cores, want 3.5", c)
	}
	writeFile(t, filepath.Join(procRoot, "cgroup", "ollama.service", "cpu.max"), "20000 100000\n")
	if c := m.treeCores(m.backends["cgroup"], tree); c != 0.2 {
		t.Fatalf("the backend's cgroup at a fifth of a core: %v cores", c)
	}
	// Cached per set of PIDs: read again when the tree changes.
	b := m.backends["ollama"]
	ps := func(pids ...int) []procSample {
		var out []procSample
		for _, p := range pids {
			out = append(out, procSample{pid: p})
		}
		return out
	}
	if c := m.coresOf(b, ps(100, 101), ps(101, 102)); c != 3.5 {
		t.Fatalf("coresOf: %v, want 3.5", c)
	}
	if c := m.coresOf(b, ps(102), nil); c != 1 {
		t.Fatalf("coresOf the tree of 102 alone (affinity 8): %v, want 1", c)
	}
}

// TestCPUCappedAtCores: a tree whose CPU clocks (read in ticks, at instants that are not the
// span's edges) came to more than its cores could run over the span is billed the cores × the
// wall time, its bounds no higher (issue 34); the cores are the tree's (here: pinned to one),
// not the proxy's (its cgroup at a quarter core).
func TestCPUCappedAtCores(t *testing.T) {
	m, procRoot := cpuFixtureMeter(t, func(o *Options) { o.RAPL = "off" })
	for _, pid := range []int{100, 101, 102} {
		writeFile(t, filepath.Join(procRoot, strconv.Itoa(pid), "status"), "Cpus_allowed_list:\t3\n")
	}
	if err := os.MkdirAll(filepath.Join(procRoot, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(procRoot, "self", "cgroup"), "0::/proxy.slice\n")
	dir := filepath.Join(m.opts.SysfsRoot, "fs", "cgroup", "proxy.slice")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "cpu.max"), "25000 100000\n")
	const cores = 1.0
	s := m.Begin("ollama")
	cpuBurst(t, m, 1, 3*cores, 0)
	f := s.End(Work{})
	in := f.Inputs.All()[0]
	wall := time.Duration(in.WallNS).Seconds()
	if most := cores * wall * DefaultCPUWattsPerCore; in.Cores != cores || f.Method != MethodCPUTimeModel || !near(f.CPUJoules, most) || f.High > most*energy.CPUModelHigh+1e-9 {
		t.Fatalf("figure %+v (%v cores recorded); want %v J (%v cores × %v s × 10 W), High no more than ×1.5", f, in.Cores, most, cores, wall)
	}
	if d, err := Recompute(f); err != nil || Disagreement(f, d) != "" {
		t.Fatalf("recompute: %v %s", err, Disagreement(f, d))
	}
}
