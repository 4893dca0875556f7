package meter

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// countingFS counts what the meter reads, by kind and by file name (the last path element), so
// a test can state what one span costs in reads.
type countingFS struct {
	osFS
	mu sync.Mutex
	n  map[string]int // "kind name": count; kinds read, readall, readdir, readlink, open, sample
}

func newCountingFS() *countingFS { return &countingFS{n: map[string]int{}} }

func (c *countingFS) add(kind, name string) {
	c.mu.Lock()
	c.n[kind+" "+filepath.Base(name)]++
	c.mu.Unlock()
}

// take returns the counts so far and starts again.
func (c *countingFS) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

func (c *countingFS) ReadFile(name string, buf []byte) (int, error) {
	c.add("read", name)
	return c.osFS.ReadFile(name, buf)
}

func (c *countingFS) ReadAll(name string) ([]byte, error) {
	c.add("readall", name)
	return c.osFS.ReadAll(name)
}

func (c *countingFS) ReadDirNames(name string) ([]string, error) {
	c.add("readdir", name)
	return c.osFS.ReadDirNames(name)
}

func (c *countingFS) Readlink(name string) (string, error) {
	c.add("readlink", name)
	return c.osFS.Readlink(name)
}

func (c *countingFS) Open(name string) (sampleFile, error) {
	c.add("open", name)
	f, err := c.osFS.Open(name)
	if err != nil {
		return nil, err
	}
	return &countingFile{sampleFile: f, c: c, name: name}, nil
}

type countingFile struct {
	sampleFile
	c    *countingFS
	name string
}

func (f *countingFile) ReadStart(buf []byte) (int, error) {
	f.c.add("sample", f.name)
	return f.sampleFile.ReadStart(buf)
}

// clockCounter stands in for the meter's clocks and counts their calls: the proxy's CPU clock,
// the boot clock, and the per-process CPU clocks (from cpu, by PID; an absent PID has exited).
type clockCounter struct {
	mu    sync.Mutex
	calls map[string]int
	cpu   map[int]uint64
}

func countClocks(m *Meter, cpu map[int]uint64) *clockCounter {
	c := &clockCounter{calls: map[string]int{}, cpu: cpu}
	m.selfCPU = func() (uint64, error) { c.add("self"); return 1, nil }
	m.bootTicks = func() (uint64, error) { c.add("boot"); return bootTicks() }
	m.proc.cpuClock = func(pid int) (uint64, error) {
		c.add("process")
		c.mu.Lock()
		defer c.mu.Unlock()
		v, ok := c.cpu[pid]
		if !ok {
			return 0, errors.New("no such process")
		}
		c.cpu[pid] = v + 1_000_000
		return v, nil
	}
	return c
}

func (c *clockCounter) add(k string) {
	c.mu.Lock()
	c.calls[k]++
	c.mu.Unlock()
}

func (c *clockCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.calls
	c.calls = map[string]int{}
	return n
}

// TestRemoteAndNoProcessReadNothing: a remote backend, an upstream listening in this process,
// and a local backend with no process read no file and no clock per span once the first span
// has looked, and allocate nothing but the Span.
func TestRemoteAndNoProcessReadNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }() // a test listener: nothing to lose
	cfs := newCountingFS()
	m, err := New(Options{SkipProbe: true, nvml: noGPU, SysfsRoot: sysFixture(t, "sys-one-socket.txtar"),
		DevRoot: t.TempDir(), fs: cfs, Backends: []BackendInfo{
			{Name: "fake", URL: fmt.Sprintf("http://%s", ln.Addr())},
			{Name: "openai", URL: "https://api.openai.com/v1"},
			{Name: "nothing", URL: "http://127.0.0.1:1"},
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, m)
	clk := countClocks(m, map[int]uint64{})
	for _, b := range []string{"fake", "nothing"} {
		if f := m.Begin(b).End(Work{CompletionTokens: 1}); f.Reason != ReasonNoProcess {
			t.Fatalf("%s: %+v", b, f)
		}
	}
	cfs.take()
	clk.take()
	tests := []struct {
		name, backend, reason string
	}{
		{name: "remote", backend: "openai", reason: ReasonRemoteBackend},
		{name: "in-process upstream", backend: "fake", reason: ReasonNoProcess},
		{name: "local backend not found", backend: "nothing", reason: ReasonNoProcess},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfs.take()
			clk.take()
			for range 50 {
				if f := m.Begin(tc.backend).End(Work{CompletionTokens: 1}); f.Reason != tc.reason || f.Method != MethodTokenModel {
					t.Fatalf("figure = %+v", f)
				}
			}
			if n := cfs.take(); len(n) != 0 {
				t.Errorf("50 spans read %v", n)
			}
			if n := clk.take(); len(n) != 0 {
				t.Errorf("50 spans read the clocks %v", n)
			}
			if raceEnabled {
				return // the race detector's allocations would count
			}
			if a := testing.AllocsPerRun(100, func() { m.Begin(tc.backend).End(Work{CompletionTokens: 1}) }); a > 2 {
				t.Errorf("%v allocations per span, want the Span's and its recorded inputs' only", a)
			}
		})
	}
}

// localFixtureMeter meters the fixture Ollama (100, 101, 102) through a counting file system,
// with clocks that count, as on the live /proc (one CPU clock read per process).
func localFixtureMeter(t *testing.T, edit func(o *Options, procRoot string)) (*Meter, *countingFS, *clockCounter, string) {
	t.Helper()
	procRoot, _ := procFixture(t)
	writeFile(t, filepath.Join(procRoot, "loadavg"), "0.12 0.30 0.25 1/93 5000\n")
	cfs := newCountingFS()
	o := Options{SysfsRoot: t.TempDir(), ProcRoot: procRoot, DevRoot: t.TempDir(), SkipProbe: true, nvml: noGPU,
		fs: cfs, Backends: []BackendInfo{{Name: "ollama", URL: "http://127.0.0.1:11434"}}}
	if edit != nil {
		edit(&o, procRoot)
	}
	m, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeOK(t, m) })
	clk := countClocks(m, map[int]uint64{100: 1e9, 101: 2e9, 102: 3e9})
	return m, cfs, clk, procRoot
}

// TestLocalSpanReads states what one span of a local backend reads once its tree is known and
// no process was created: each process's CPU clock at each end, the last PID at the end (Begin
// trusts the tree an End confirmed less than treeTTL ago), and the root's liveness at the end
// (an epoll_wait on its pidfd's watch on the live /proc; /proc/<pid>/stat on a fixture).
// /proc/stat, the proxy's CPU clock and RAPL only when RAPL can make the figure.
func TestLocalSpanReads(t *testing.T) {
	tests := []struct {
		name    string
		sys     string // RAPL fixture; "" for none
		overlap bool   // another span is open throughout
		reads   map[string]int
		clocks  map[string]int
	}{
		{name: "no RAPL",
			reads:  map[string]int{"sample loadavg": 1, "read stat": 1},
			clocks: map[string]int{"process": 6}},
		{name: "RAPL",
			sys:    "sys-one-socket.txtar",
			reads:  map[string]int{"sample loadavg": 1, "read stat": 1, "sample stat": 2, "sample energy_uj": 4},
			clocks: map[string]int{"process": 6, "self": 2}},
		{name: "RAPL, overlapped: the figure cannot be measured",
			sys: "sys-one-socket.txtar", overlap: true,
			reads:  map[string]int{"sample loadavg": 1, "read stat": 1},
			clocks: map[string]int{"process": 6}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, cfs, clk, _ := localFixtureMeter(t, func(o *Options, _ string) {
				if tc.sys != "" {
					o.SysfsRoot = sysFixture(t, tc.sys)
				}
			})
			m.Begin("ollama").End(Work{}) // discovery and the first walk
			if tc.overlap {
				defer m.Begin("ollama").End(Work{}) // Begin now, End when done
			}
			cfs.take()
			clk.take()
			f := m.Begin("ollama").End(Work{})
			if f.Method == MethodTokenModel {
				t.Fatalf("figure = %+v", f)
			}
			if got := cfs.take(); !mapsEqual(got, tc.reads) {
				t.Errorf("one span read %v, want %v", got, tc.reads)
			}
			if got := clk.take(); !mapsEqual(got, tc.clocks) {
				t.Errorf("one span read the clocks %v, want %v", got, tc.clocks)
			}
		})
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestLocalSpanAllocs: a span of a local backend on the live /proc whose tree did not change
// allocates the Span (its counters in the same object) and its figure's inputs, nothing else.
// A process created on the host during a try makes End look at it, or walk: that try does not
// count.
func TestLocalSpanAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's allocations would count")
	}
	port, _, _ := startBackend(t, false)
	m, err := New(Options{SkipProbe: true, nvml: noGPU, SysfsRoot: t.TempDir(), DevRoot: t.TempDir(),
		Backends: []BackendInfo{{Name: "local", URL: fmt.Sprintf("http://127.0.0.1:%d", port)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, m)
	if f := m.Begin("local").End(Work{}); f.Method != MethodCPUTimeModel {
		t.Fatalf("figure = %+v", f)
	}
	b := m.backends["local"]
	var allocs float64
	for range 20 {
		b.mu.Lock()
		cur := b.treeCur
		b.mu.Unlock()
		allocs = testing.AllocsPerRun(20, func() { m.Begin("local").End(Work{CompletionTokens: 1}) })
		b.mu.Lock()
		moved := b.treeCur != cur
		b.mu.Unlock()
		if !moved {
			if allocs > 2 {
				t.Fatalf("%v allocations per span, want the Span's and its recorded inputs' only", allocs)
			}
			return
		}
	}
	t.Skipf("a PID was handed out on the host during every try (last: %v allocations per span)", allocs)
}

// TestTreeFollowsLastPID: the tree walked last is reused while /proc/loadavg's last PID stands
// still, and walked again at End once it moved, so a child born inside the span is found and
// counted whole.
func TestTreeFollowsLastPID(t *testing.T) {
	// Each reading of the clock is a second later: a span is long enough for the CPU time the
	// fixture's processes count (the CPU model caps it at the cores × the span's wall time).
	wall := newFakeClock()
	m, cfs, clk, procRoot := localFixtureMeter(t, func(o *Options, _ string) {
		o.now = func() time.Time { wall.Advance(time.Second); return wall.Now() }
	})
	b := m.backends["ollama"]
	addChild := func(pid, parent int, started uint64) {
		dir := filepath.Join(procRoot, fmt.Sprint(pid))
		writeFile(t, filepath.Join(procRoot, fmt.Sprint(parent), "task", fmt.Sprint(parent), "children"), fmt.Sprint(pid))
		if err := os.MkdirAll(filepath.Join(dir, "task", fmt.Sprint(pid)), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "stat"), fmt.Sprintf("%d (runner) S %d %d %d 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 %d 0 0", pid, parent, pid, pid, started))
		writeFile(t, filepath.Join(dir, "task", fmt.Sprint(pid), "children"), "")
		clk.mu.Lock()
		clk.cpu[pid] = 500_000_000
		clk.mu.Unlock()
	}
	setLastPID := func(pid int) {
		writeFile(t, filepath.Join(procRoot, "loadavg"), fmt.Sprintf("0.12 0.30 0.25 1/93 %d\n", pid))
	}
	tree := func() []int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return slices.Clone(b.tree)
	}

	m.Begin("ollama").End(Work{})
	if b.walks != 1 || !slices.Equal(tree(), []int{100, 101, 102}) {
		t.Fatalf("first span: %d walks, tree %v", b.walks, tree())
	}
	cfs.take()
	// No PID handed out: the tree cannot have grown (the fixture breaks that rule on purpose, to
	// show the walk is skipped).
	addChild(5001, 102, 1)
	m.Begin("ollama").End(Work{})
	if n := cfs.take(); b.walks != 1 || n["read children"] != 0 || n["readdir task"] != 0 {
		t.Fatalf("a span walked the tree though the last PID stood still: %d walks, reads %v", b.walks, n)
	}
	// A PID was handed out before the span, to a child of the tree: End walks; Begin, within
	// treeTTL, may not.
	setLastPID(5001)
	m.Begin("ollama").End(Work{})
	if !slices.Equal(tree(), []int{100, 101, 102, 5001}) {
		t.Fatalf("tree after the last PID moved = %v", tree())
	}
	// A runner born inside the span: found at End, and counted whole.
	now, err := bootTicks()
	if err != nil {
		t.Skip("no boot clock:", err)
	}
	s := m.Begin("ollama")
	addChild(5002, 5001, now+1)
	setLastPID(5002)
	f := s.End(Work{})
	if !slices.Contains(tree(), 5002) || f.Method != MethodCPUTimeModel || f.Reason != ReasonNoRAPL {
		t.Fatalf("runner born in the span: tree %v, figure %+v", tree(), f)
	}
	// Every process but 5002 advanced 1 ms between two reads; 5002 counts its 0.5 s whole.
	if want := (4*0.001 + 0.5) * DefaultCPUWattsPerCore; f.CPUJoules < want-1e-9 || f.CPUJoules > want+1e-9 {
		t.Fatalf("CPU joules = %v, want %v", f.CPUJoules, want)
	}
}

// TestTreeNewPIDsOutside: a few PIDs handed out to processes or threads outside the tree, or
// to processes already gone, are looked at one by one instead of walking the tree; a reused
// tree PID, a child of the tree found behind other PIDs, a stat that cannot be read, too many
// PIDs or a wrap of the PID counter make End walk.
func TestTreeNewPIDsOutside(t *testing.T) {
	m, cfs, _, procRoot := localFixtureMeter(t, nil)
	b := m.backends["ollama"]
	setLastPID := func(pid int) {
		writeFile(t, filepath.Join(procRoot, "loadavg"), fmt.Sprintf("0.12 0.30 0.25 1/93 %d\n", pid))
	}
	addProc := func(pid, parent int) {
		if err := os.MkdirAll(filepath.Join(procRoot, fmt.Sprint(pid)), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(procRoot, fmt.Sprint(pid), "stat"), fmt.Sprintf("%d (other) S %d %d %d 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 7 0 0", pid, parent, pid, pid))
	}
	tree := func() []int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return slices.Clone(b.tree)
	}
	span := func(wantWalks uint64, what string) {
		t.Helper()
		before := b.walks
		m.Begin("ollama").End(Work{})
		if got := b.walks - before; got != wantWalks {
			t.Fatalf("%s: %d walks, want %d (tree %v)", what, got, wantWalks, tree())
		}
	}
	span(1, "first span")
	cfs.take()
	// 5001: an unrelated process; 5002: gone; 5003: a thread of the root, whose stat shows the
	// root's parent (1).
	addProc(5001, 77)
	addProc(5003, 1)
	setLastPID(5003)
	span(0, "PIDs outside the tree")
	if n := cfs.take(); n["read stat"] != 4 || n["read children"] != 0 || n["readdir task"] != 0 {
		t.Fatalf("PIDs outside the tree: reads %v, want the three new PIDs' stats and the root's", n)
	}
	span(0, "the same PIDs again")
	// A child of the tree behind an unrelated PID.
	addProc(5004, 55)
	addProc(5005, 102)
	writeFile(t, filepath.Join(procRoot, "102", "task", "102", "children"), "5005")
	setLastPID(5005)
	span(1, "a child of the tree")
	if !slices.Contains(tree(), 5005) {
		t.Fatalf("tree %v lacks the new child", tree())
	}
	// A stat that cannot be read (here a directory) may be anyone's.
	if err := os.MkdirAll(filepath.Join(procRoot, "5006", "stat"), 0o755); err != nil {
		t.Fatal(err)
	}
	setLastPID(5006)
	span(1, "an unreadable stat")
	// More PIDs than maxNewPIDs: a walk is cheaper.
	setLastPID(5006 + maxNewPIDs + 1)
	span(1, "many new PIDs")
	// A wrap: the counter went back to 50, and 50 is a child of the tree.
	addProc(50, 100)
	writeFile(t, filepath.Join(procRoot, "100", "task", "100", "children"), "50")
	setLastPID(50)
	span(1, "a wrap")
	if !slices.Contains(tree(), 50) {
		t.Fatalf("tree %v lacks the child born after the wrap", tree())
	}
	// After the wrap 102 ended and its PID went to a process outside the tree: the walk
	// drops it rather than read a stranger's CPU time.
	setLastPID(101)
	span(1, "many new PIDs after the wrap")
	addProc(102, 1)
	writeFile(t, filepath.Join(procRoot, "101", "task", "101", "children"), "")
	setLastPID(102)
	span(1, "a tree PID reused")
	if slices.Contains(tree(), 102) {
		t.Fatalf("tree %v keeps the reused PID 102", tree())
	}
}

// TestTreeLooksAgainAtAnUnbornPID: the kernel shows a PID in loadavg a moment before its process
// can be seen in /proc. A check that finds a new PID without a /proc entry keeps the tree, but
// looks at that PID once more at the next check: a child of the tree born since is walked and
// counted then, not missed for good. Missing twice, the PID is gone.
func TestTreeLooksAgainAtAnUnbornPID(t *testing.T) {
	m, _, _, procRoot := localFixtureMeter(t, nil)
	b := m.backends["ollama"]
	setLastPID := func(pid int) {
		writeFile(t, filepath.Join(procRoot, "loadavg"), fmt.Sprintf("0.12 0.30 0.25 1/93 %d\n", pid))
	}
	span := func(wantWalks uint64, what string) {
		t.Helper()
		before := b.walks
		m.Begin("ollama").End(Work{})
		if got := b.walks - before; got != wantWalks {
			t.Fatalf("%s: %d walks, want %d", what, got, wantWalks)
		}
	}
	tree := func() []int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return slices.Clone(b.tree)
	}
	span(1, "first span") // the fixture's last PID is 5000
	setLastPID(5001)      // handed out; /proc/5001 not there yet
	span(0, "a PID not yet in /proc")
	// Born: a child of the tree.
	if err := os.MkdirAll(filepath.Join(procRoot, "5001", "task", "5001"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(procRoot, "5001", "stat"), "5001 (runner) S 102 5001 5001 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 7 0 0")
	writeFile(t, filepath.Join(procRoot, "5001", "task", "5001", "children"), "")
	writeFile(t, filepath.Join(procRoot, "102", "task", "102", "children"), "5001")
	span(1, "the PID born since, a child of the tree")
	if !slices.Contains(tree(), 5001) {
		t.Fatalf("tree %v lacks the child born after its PID was handed out", tree())
	}
	// A PID that never shows: looked at twice, then gone; the tree stays.
	setLastPID(5002)
	span(0, "a PID not in /proc")
	span(0, "the same PID, still not in /proc")
	b.mu.Lock()
	cur := b.treeCur
	b.mu.Unlock()
	if cur != 5002 {
		t.Fatalf("cursor at %d after the PID was missing twice, want 5002", cur)
	}
}

// TestTreeWalkedWhenLastPIDUnreadable: a last PID that can no longer be read (here a malformed
// loadavg) leaves nothing to trust the cached tree by, so the span walks and finds a new child.
func TestTreeWalkedWhenLastPIDUnreadable(t *testing.T) {
	m, _, _, procRoot := localFixtureMeter(t, nil)
	b := m.backends["ollama"]
	m.Begin("ollama").End(Work{})
	walks := b.walks
	writeFile(t, filepath.Join(procRoot, "loadavg"), "not a loadavg line\n")
	if err := os.MkdirAll(filepath.Join(procRoot, "5001", "task", "5001"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(procRoot, "5001", "stat"), "5001 (runner) S 102 5001 5001 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 7 0 0")
	writeFile(t, filepath.Join(procRoot, "5001", "task", "5001", "children"), "")
	writeFile(t, filepath.Join(procRoot, "102", "task", "102", "children"), "5001")
	m.Begin("ollama").End(Work{})
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.walks == walks || !slices.Contains(b.tree, 5001) {
		t.Fatalf("%d walks after loadavg went bad, tree %v: the cached tree was trusted", b.walks-walks, b.tree)
	}
}

// TestLastPIDFromNsLastPID: where /proc/sys/kernel/ns_last_pid opens, a span reads the last PID
// there and not in loadavg; the tree follows it as it follows loadavg's (a child handed the PID
// is walked), and a malformed number leaves nothing to trust the cached tree by.
func TestLastPIDFromNsLastPID(t *testing.T) {
	m, cfs, _, procRoot := localFixtureMeter(t, func(_ *Options, procRoot string) {
		if err := os.MkdirAll(filepath.Join(procRoot, "sys", "kernel"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(procRoot, "sys", "kernel", "ns_last_pid"), "5000\n")
	})
	nsFile := filepath.Join(procRoot, "sys", "kernel", "ns_last_pid")
	b := m.backends["ollama"]
	m.Begin("ollama").End(Work{})
	cfs.take()
	m.Begin("ollama").End(Work{})
	if n := cfs.take(); n["sample ns_last_pid"] != 1 || n["sample loadavg"] != 0 {
		t.Fatalf("one span read %v, want the last PID from ns_last_pid once", n)
	}
	addChild := func(pid int) {
		if err := os.MkdirAll(filepath.Join(procRoot, fmt.Sprint(pid), "task", fmt.Sprint(pid)), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(procRoot, fmt.Sprint(pid), "stat"), fmt.Sprintf("%d (runner) S 102 %d %d 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 7 0 0", pid, pid, pid))
		writeFile(t, filepath.Join(procRoot, fmt.Sprint(pid), "task", fmt.Sprint(pid), "children"), "")
		writeFile(t, filepath.Join(procRoot, "102", "task", "102", "children"), fmt.Sprint(pid))
	}
	tree := func() []int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return slices.Clone(b.tree)
	}
	// A child of the tree handed the next PID: ns_last_pid moves, loadavg (stale) does not.
	addChild(5001)
	writeFile(t, nsFile, "5001\n")
	m.Begin("ollama").End(Work{})
	if !slices.Contains(tree(), 5001) {
		t.Fatalf("tree after ns_last_pid moved = %v", tree())
	}
	for _, bad := range []string{"", "\n", "-1\n", "5001x\n", "99999999999999999999999\n"} {
		walks := b.walks
		writeFile(t, nsFile, bad)
		m.Begin("ollama").End(Work{})
		if b.walks == walks {
			t.Errorf("ns_last_pid %q: the cached tree was trusted", bad)
		}
	}
}

// TestLastPIDLive: on the live /proc the meter reads the last PID where the kernel has
// ns_last_pid, and it is loadavg's number.
func TestLastPIDLive(t *testing.T) {
	if _, err := os.Stat("/proc/sys/kernel/ns_last_pid"); err != nil {
		t.Skip("no ns_last_pid:", err)
	}
	m, err := New(Options{SkipProbe: true, nvml: noGPU, SysfsRoot: t.TempDir(), DevRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, m)
	if !m.proc.lastPIDNs {
		t.Fatal("the meter reads loadavg where ns_last_pid opens")
	}
	loadavg := &procfs{fs: osFS{}, root: "/proc"}
	loadavg.lastPIDFile, err = osFS{}.Open("/proc/loadavg")
	if err != nil {
		t.Skip("no loadavg:", err)
	}
	defer loadavg.close()
	// PIDs handed out between the reads move both on: read loadavg around ns_last_pid.
	before, ok1 := loadavg.lastPID()
	ns, ok2 := m.proc.lastPID()
	after, ok3 := loadavg.lastPID()
	if !ok1 || !ok2 || !ok3 {
		t.Fatalf("last PID unread: %v %v %v", ok1, ok2, ok3)
	}
	if before <= after && (ns < before || ns > after) {
		t.Fatalf("ns_last_pid %d, loadavg %d then %d", ns, before, after)
	}
}

// TestRootDeathSeenAtEnd: a root that died (a zombie, its socket closed) while no PID was
// handed out is noticed at End: the backend has no process.
func TestRootDeathSeenAtEnd(t *testing.T) {
	m, _, _, procRoot := localFixtureMeter(t, nil)
	m.Begin("ollama").End(Work{})
	s := m.Begin("ollama")
	writeFile(t, filepath.Join(procRoot, "100", "stat"), "100 (ollama) Z 1 100 100 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 2 0 1000 0 0")
	if err := os.Remove(filepath.Join(procRoot, "100", "fd", "3")); err != nil {
		t.Fatal(err)
	}
	if f := s.End(Work{CompletionTokens: 1}); f.Reason != ReasonNoProcess {
		t.Fatalf("figure after the root died = %+v", f)
	}
}

// TestOtherNamespaceProc: a /proc whose self is not this process belongs to another PID
// namespace, whose new processes loadavg does not show: the tree is walked at every span.
func TestOtherNamespaceProc(t *testing.T) {
	m, _, _, _ := localFixtureMeter(t, func(_ *Options, procRoot string) {
		if err := os.Symlink("4242", filepath.Join(procRoot, "self")); err != nil {
			t.Fatal(err)
		}
	})
	m.Begin("ollama").End(Work{})
	b := m.backends["ollama"]
	before := b.walks
	for range 3 {
		m.Begin("ollama").End(Work{})
	}
	if w := b.walks - before; w != 3 {
		t.Fatalf("%d walks in 3 spans, want one at each End", w)
	}
}

// TestRunnerStartedDuringSpan: on the live /proc, a child the backend starts inside the span
// (Ollama starting a runner) is found at End and counted whole, not as a short count.
func TestRunnerStartedDuringSpan(t *testing.T) {
	port, pid, _, spawn := startSpawningBackend(t, false)
	m, err := New(Options{SkipProbe: true, nvml: noGPU, SysfsRoot: t.TempDir(), DevRoot: t.TempDir(),
		Backends: []BackendInfo{{Name: "local", URL: fmt.Sprintf("http://127.0.0.1:%d", port)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOK(t, m)
	b := m.backends["local"]
	m.Begin("local").End(Work{})
	if b.pid != pid {
		t.Fatalf("root = %d, want %d", b.pid, pid)
	}
	if fd, err := pidfdOpen(os.Getpid()); err == nil {
		closeFD(fd)
		if b.pidfd < 0 || b.pidep < 0 {
			t.Error("pidfds work here, but the root has none, or no watch on it")
		}
	}
	s := m.Begin("local")
	runner := spawn()
	time.Sleep(100 * time.Millisecond)
	f := s.End(Work{CompletionTokens: 1})
	b.mu.Lock()
	tree := slices.Clone(b.tree)
	b.mu.Unlock()
	if !slices.Contains(tree, runner) {
		t.Fatalf("the runner %d started in the span is not in the tree %v", runner, tree)
	}
	if f.Method != MethodCPUTimeModel || f.CPUJoules <= 0 {
		t.Fatalf("figure = %+v; want the runner's CPU time counted", f)
	}
}

func TestCounters(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Options)
		want string
	}{
		{name: "RAPL live", want: "rapl:true: nvml:false:no-nvml"},
		{name: "RAPL off", edit: func(o *Options) { o.RAPL = "off" }, want: "rapl:false:no-rapl nvml:false:no-nvml"},
		{name: "RAPL refused", edit: func(o *Options) { o.fs = &refusingFS{suffixes: []string{"energy_uj"}} },
			want: "rapl:false:permission-denied nvml:false:no-nvml"},
	}
	show := func(cs []CounterState) string {
		var s []string
		for _, c := range cs {
			s = append(s, fmt.Sprintf("%s:%v:%s", c.Name, c.Live, c.Reason))
		}
		return strings.Join(s, " ")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := cpuFixtureMeter(t, tc.edit)
			if got := show(m.Counters()); got != tc.want {
				t.Fatalf("Counters = %s, want %s", got, tc.want)
			}
		})
	}
	var nilm *Meter
	if got := show(nilm.Counters()); got != "rapl:false:no-rapl nvml:false:no-nvml" {
		t.Fatalf("nil meter: %s", got)
	}
}

func FuzzParseLastPID(f *testing.F) {
	f.Add([]byte("0.35 3.74 5.55 2/108 15847\n"))
	f.Add([]byte("0 0 0 0 \n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, ok := parseLastPID(b); ok && len(b) < 9 {
			t.Fatalf("accepted %q", b)
		}
	})
}
