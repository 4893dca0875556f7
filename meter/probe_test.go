package meter

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// sleepClock is a fake clock whose sleep moves it: a probe on it reads the counter exactly 80
// times per 20 ms interval (a pause of 250 µs), whatever the machine's load.
func sleepClock() (now func() time.Time, sleep func(time.Duration), clk *fakeClock) {
	clk = newFakeClock()
	return clk.Now, clk.Advance, clk
}

// scripted is a probe target of period 1 ms (intervals of 20 ms, 80 reads each, 15 intervals
// in the 300 ms window) whose parts advance on read i (1-based; read 0 is the baseline) of
// interval i/80 when moves(part, read, interval) says so.
func scripted(parts int, moves func(part, read, interval int) bool) probeTarget {
	now, sleep, _ := sleepClock()
	vals := make([]float64, parts)
	reads := 0
	t := probeTarget{name: "scripted", period: time.Millisecond, now: now, sleep: sleep}
	for i := range parts {
		t.parts = append(t.parts, "part"+string(rune('0'+i)))
	}
	t.readParts = func(dst []float64) error {
		if reads > 0 {
			for p := range vals {
				if moves(p, reads, (reads-1)/80) {
					vals[p]++
				}
			}
		}
		reads++
		copy(dst, vals)
		return nil
	}
	return t
}

func TestProbeThresholds(t *testing.T) {
	every := func(k int) func(int, int, int) bool { return func(_, r, _ int) bool { return r%k == 0 } }
	inIntervals := func(live func(iv int) bool) func(int, int, int) bool {
		return func(_, _, iv int) bool { return live(iv) }
	}
	tests := []struct {
		name  string
		parts int
		moves func(part, read, interval int) bool
		live  bool
	}{
		{"5 advances per interval: live", 1, every(16), true},
		{"4 advances per interval: dead", 1, every(20), false},
		{"moves in 12 of 15 intervals (80%): live", 1, inIntervals(func(iv int) bool { return iv%5 != 0 }), true},
		{"moves in 11 of 15 intervals: dead", 1, inIntervals(func(iv int) bool { return iv%5 != 0 && iv != 14 }), false},
		{"moves for the first 100 ms only: dead over the 300 ms window", 1, inIntervals(func(iv int) bool { return iv < 5 }), false},
		{"never moves: dead", 1, func(int, int, int) bool { return false }, false},
		{"every part moves: live", 3, every(1), true},
		{"one part of three frozen: dead, though the sum moves", 3, func(p, _, _ int) bool { return p != 1 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := runProbe(scripted(tc.parts, tc.moves), false)
			if res.Live != tc.live || res.Err != nil {
				t.Fatalf("probe = %+v, want live %v", res, tc.live)
			}
			if !tc.live && tc.parts > 1 && !strings.Contains(res.Detail, "part1") {
				t.Fatalf("detail %q does not name the frozen part", res.Detail)
			}
		})
	}
	// The window: at least probeWindow of the probe's clock, in at least five intervals.
	now, sleep, clk := sleepClock()
	t0 := clk.Now()
	n := 0.0
	runProbe(probeTarget{name: "moving", period: time.Millisecond, now: now, sleep: sleep,
		read: func() (float64, error) { n++; return n, nil }}, false)
	if took := clk.Now().Sub(t0); took < probeWindow {
		t.Fatalf("the probe read for %v, less than its window %v", took, probeWindow)
	}
	failing := runProbe(probeTarget{name: "err", period: time.Millisecond, now: now, sleep: sleep,
		read: func() (float64, error) { return 0, errors.New("eio") }}, false)
	if failing.Live || failing.Err == nil {
		t.Fatalf("a failing counter: %+v", failing)
	}
}

// tickingFS serves the energy_uj of the zones whose directory ends with one of ticking as a
// counter that advances 1000 µJ on every read; the other files are the fixture's.
type tickingFS struct {
	osFS
	ticking []string
	mu      sync.Mutex
	n       map[string]uint64
}

func (f *tickingFS) value(name string) (string, bool) {
	for _, t := range f.ticking {
		if strings.HasSuffix(name, t+"/energy_uj") {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.n == nil {
				f.n = map[string]uint64{}
			}
			f.n[name] += 1000
			return strconv.FormatUint(f.n[name], 10) + "\n", true
		}
	}
	return "", false
}

func (f *tickingFS) ReadFile(name string, buf []byte) (int, error) {
	if v, ok := f.value(name); ok {
		return copy(buf, v), nil
	}
	return f.osFS.ReadFile(name, buf)
}

func (f *tickingFS) Open(name string) (sampleFile, error) {
	if _, ok := f.value(name); ok {
		return tickingFile{f: f, name: name}, nil
	}
	return f.osFS.Open(name)
}

type tickingFile struct {
	f    *tickingFS
	name string
}

func (t tickingFile) ReadStart(buf []byte) (int, error) {
	v, _ := t.f.value(t.name)
	return copy(buf, v), nil
}
func (t tickingFile) Close() error { return nil }

// TestRAPLProbeAtStart: RAPL's zones are probed each on its own at start, on a fake clock; a
// frozen psys falls back to the packages and DRAM it covers.
func TestRAPLProbeAtStart(t *testing.T) {
	tests := []struct {
		name, archive string
		ticking       []string
		zones         string // "" : dead
	}{
		{"one socket, all live", "sys-one-socket.txtar", []string{"intel-rapl:0", "intel-rapl:0:1"}, "package-0+dram"},
		{"one socket, DRAM frozen beside a live package", "sys-one-socket.txtar", []string{"intel-rapl:0"}, ""},
		{"psys live", "sys-psys.txtar", []string{"intel-rapl:1"}, "psys"},
		{"psys frozen: packages and DRAM", "sys-psys.txtar", []string{"intel-rapl:0", "intel-rapl:0:2"}, "package-0+dram"},
		{"psys and DRAM frozen", "sys-psys.txtar", []string{"intel-rapl:0"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now, sleep, _ := sleepClock()
			m, err := New(Options{SysfsRoot: sysFixture(t, tc.archive), ProcRoot: t.TempDir(), DevRoot: t.TempDir(),
				nvml: noGPU, NVML: "off", fs: &tickingFS{ticking: tc.ticking}, probeNow: now, probeSleep: sleep})
			if err != nil {
				t.Fatal(err)
			}
			defer closeOK(t, m)
			switch {
			case tc.zones == "" && (m.rapl != nil || reasonFor(m.raplErr, ReasonNoRAPL) != ReasonCounterDead):
				t.Fatalf("rapl = %v, err = %v; want dead", m.rapl, m.raplErr)
			case tc.zones != "" && (m.rapl == nil || m.rapl.zoneNames() != tc.zones):
				t.Fatalf("rapl = %v, err = %v; want live on %s", m.rapl, m.raplErr, tc.zones)
			}
		})
	}
}
