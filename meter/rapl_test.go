package meter

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"
	"time"
)

func TestDetectRAPL(t *testing.T) {
	tests := []struct {
		name    string
		archive string // "" for a sysfs with no powercap at all
		refuse  []string
		zones   string
		uj      uint64 // the first reading's sum
		err     error
		reason  string
	}{
		{name: "one socket", archive: "sys-one-socket.txtar", zones: "package-0+dram", uj: 1_200_000},
		{name: "two sockets", archive: "sys-two-socket.txtar", zones: "package-0+package-1+dram+dram", uj: 3_400_000},
		{name: "psys present", archive: "sys-psys.txtar", zones: "psys", uj: 5_000_000},
		{name: "hex names", archive: "sys-hex.txtar", zones: "package-0+package-10+dram+dram", uj: 8_400_000},
		{name: "no powercap", err: ErrNoData, reason: ReasonNoRAPL},
		{name: "refused read", archive: "sys-one-socket.txtar", refuse: []string{"energy_uj"},
			err: fs.ErrPermission, reason: ReasonPermission},
		{name: "refused psys only", archive: "sys-psys.txtar", refuse: []string{"intel-rapl:1/energy_uj"},
			err: fs.ErrPermission, reason: ReasonPermission},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.archive != "" {
				root = sysFixture(t, tc.archive)
			}
			var fsys fileSystem = osFS{}
			if tc.refuse != nil {
				fsys = &refusingFS{suffixes: tc.refuse}
			}
			r, err := detectRAPL(fsys, root, time.Now, 0)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				if got := reasonFor(err, ReasonNoRAPL); got != tc.reason {
					t.Fatalf("reason = %q, want %q", got, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := r.zoneNames(); got != tc.zones {
				t.Fatalf("zones = %q, want %q", got, tc.zones)
			}
			a, err := r.read()
			if err != nil {
				t.Fatal(err)
			}
			// Detection took the baseline; nothing moved since.
			if a.uj != 0 {
				t.Fatalf("first read advanced %d µJ on a still fixture", a.uj)
			}
			var sum uint64
			for _, z := range r.zones {
				sum += z.last
			}
			if sum != tc.uj {
				t.Fatalf("raw sum = %d, want %d", sum, tc.uj)
			}
		})
	}
}

func TestRAPLDeltaAndWrap(t *testing.T) {
	root := sysFixture(t, "sys-wrap.txtar") // package-0 at 999000 µJ of a 1000000 µJ range
	energy := filepath.Join(root, "class", "powercap", "intel-rapl:0", "energy_uj")
	clk := newFakeClock()
	// At 10 W a 1 J range wraps in 100 ms: a reader must come back within that.
	r, err := detectRAPL(osFS{}, root, clk.Now, 10)
	if err != nil {
		t.Fatal(err)
	}
	if w := r.window(); w != 100*time.Millisecond {
		t.Fatalf("window = %v, want 100ms", w)
	}
	step := func(d time.Duration, uj string) raplReading {
		t.Helper()
		clk.Advance(d)
		writeFile(t, energy, uj+"\n")
		v, err := r.read()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	a := step(0, "999000")
	b := step(20*time.Millisecond, "999500") // 0.0005 J
	c := step(20*time.Millisecond, "1000")   // wrapped once: 500 + 1000 µJ
	if j, err := r.joules(a, b); err != nil || j != 0.0005 {
		t.Fatalf("plain delta = %v, %v; want 0.0005 J", j, err)
	}
	if j, err := r.joules(b, c); err != nil || j != 0.0015 {
		t.Fatalf("delta across one wrap = %v, %v; want 0.0015 J", j, err)
	}
	if j, err := r.joules(a, c); err != nil || j != 0.002 {
		t.Fatalf("span delta = %v, %v; want 0.002 J", j, err)
	}

	// Unread for longer than the window: it may have wrapped twice.
	d := step(150*time.Millisecond, "2000")
	if _, err := r.joules(c, d); !errors.Is(err, ErrCounterWrap) {
		t.Fatalf("after a gap past the window: err = %v, want ErrCounterWrap", err)
	}
	if reasonFor(ErrCounterWrap, ReasonNoRAPL) != ReasonCounterWrap {
		t.Fatal("ErrCounterWrap does not map to counter-wrap")
	}
	// A step more than 10 W could draw in 20 ms is not a reading either.
	e := step(20*time.Millisecond, "900000")
	if _, err := r.joules(d, e); !errors.Is(err, ErrCounterWrap) {
		t.Fatalf("after an implausible step: err = %v, want ErrCounterWrap", err)
	}
	// Later spans within the window are fine again.
	f := step(20*time.Millisecond, "900100")
	if j, err := r.joules(e, f); err != nil || j != 0.0001 {
		t.Fatalf("after recovery: %v, %v", j, err)
	}
}

func TestRAPLGarbage(t *testing.T) {
	root := sysFixture(t, "sys-wrap.txtar")
	energy := filepath.Join(root, "class", "powercap", "intel-rapl:0", "energy_uj")
	r, err := detectRAPL(osFS{}, root, time.Now, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"2000000\n", "not a number\n", ""} {
		writeFile(t, energy, v)
		if _, err := r.read(); err == nil {
			t.Fatalf("energy_uj %q read without error", v)
		}
	}
}

func TestIsRAPLZoneName(t *testing.T) {
	for n, want := range map[string]bool{
		"intel-rapl:0": true, "intel-rapl:0:1": true, "intel-rapl:a": true, "intel-rapl:1f:2": true,
		"intel-rapl": false, "intel-rapl-mmio:0": false, "intel-rapl:": false, "intel-rapl:0:1:2": false,
		"intel-rapl:G": false, "dtpm": false,
	} {
		if got := isRAPLZoneName(n); got != want {
			t.Errorf("isRAPLZoneName(%q) = %v, want %v", n, got, want)
		}
	}
}
