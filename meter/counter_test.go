//go:build !nonvml && cgo

package meter

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// fromReader reports whether its caller runs in a device's counter reader.
func fromReader() bool {
	pc := make([]uintptr, 64)
	frames := runtime.CallersFrames(pc[:runtime.Callers(2, pc)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, ".(*gpus).readCounter") {
			return true
		}
		if !more {
			return false
		}
	}
}

// readerDevice is a profileDevice that counts its energy reads, and those not made by a counter
// reader.
type readerDevice struct {
	profileDevice
	reads, off atomic.Int32
	hold       chan struct{} // when not nil, reads wait for it to close
}

func (d *readerDevice) EnergyMJ() (uint64, error) {
	if d.hold != nil {
		<-d.hold
	}
	d.reads.Add(1)
	if !fromReader() {
		d.off.Add(1)
	}
	return d.profileDevice.EnergyMJ()
}

// TestNVMLOneReaderForKSpans: eight spans open and closed together on one device cost the energy
// reads one span costs, all the device's counter reader's, and each gets the figure one span
// alone gets, within bounds that hold what the board drew. The board idles at 50 W and draws
// 250 W over the spans (52.5 to 452.5 ms); its counter updates every 100 ms.
func TestNVMLOneReaderForKSpans(t *testing.T) {
	const ms = time.Millisecond
	run := func(k int) (int32, []gpuResult, float64) {
		clk := newFakeClock()
		// The reads wait until every span has begun: the reader's pace moves the clock.
		d := &readerDevice{profileDevice: profileDevice{clk: clk, t0: clk.Now(), idleW: 50, busyW: 250, busyFrom: 52500 * time.Microsecond, busyTo: 452500 * time.Microsecond},
			hold: make(chan struct{})}
		g := &gpus{wait: 250 * ms, poll: 5 * ms, period: 100 * ms, now: clk.Now, sleep: clk.Advance, devs: []gpuDevice{d}, closed: true}
		tree := func(p uint32) bool { return p == 7 }
		clk.Advance(52500 * time.Microsecond)
		als := make([]*gpuAlign, k)
		for j := range als {
			als[j] = g.begin(tree)
		}
		close(d.hold)
		for _, al := range als {
			<-al.done
		}
		clk.Advance(als[0].start.Add(400 * ms).Sub(clk.Now()))
		end := clk.Now()
		bs := make([]gpuSnap, k)
		rs := make([]gpuResult, k)
		var wg sync.WaitGroup
		for j := range als {
			wg.Go(func() {
				g.end(als[j], &bs[j], end)
				rs[j] = g.attribute(als[j], &bs[j], tree, als[j].start, end)
			})
		}
		wg.Wait()
		if n := d.off.Load(); n != 0 {
			t.Fatalf("%d spans: %d energy reads not by the counter reader", k, n)
		}
		return d.reads.Load(), rs, d.drawn(452500*time.Microsecond) - d.drawn(52500*time.Microsecond)
	}
	one, r1, truth := run(1)
	eight, r8, _ := run(8)
	t.Logf("energy reads: %d for one span, %d for eight", one, eight)
	if eight != one {
		t.Fatalf("8 spans cost %d energy reads, one span %d: the count grew with the spans", eight, one)
	}
	for j, r := range append(r1, r8...) {
		if r.Err != nil || r.SubPeriod || !near(r.Joules, r1[0].Joules) || truth < r.Low || truth > r.High {
			t.Fatalf("span %d: %+v; want %v J as one span alone, bounds holding the %v J drawn", j, r, r1[0].Joules, truth)
		}
	}
}

// TestNVMLSpansNeverReadTheCounter: Begin, End, the settled figure and SettleInline's wait
// leave every energy read to the device's counter reader.
func TestNVMLSpansNeverReadTheCounter(t *testing.T) {
	for _, inline := range []bool{false, true} {
		script := &gpuScript{energy: 5_000_000, step: 50_000, pids: func(int) []uint32 { return []uint32{102} }}
		m, _ := fixtureMeter(t, mockNVML(script))
		m.opts.SettleInline = inline
		s := m.Begin("ollama")
		<-s.c.gpuAlign.done
		cpuWork(t, m, 0.3, 3)
		f := s.End(Work{})
		sf, err := s.Settled(context.Background())
		if err != nil || sf.Provisional || sf.Coverage != energy.CoverageWhole || f.Provisional == inline {
			t.Fatalf("inline %v: End %+v, settled %+v (%v)", inline, f, sf, err)
		}
		if n, off := script.reads.Load(), script.offReader.Load(); n == 0 || off != 0 {
			t.Fatalf("inline %v: %d energy reads, %d of them not by the counter reader", inline, n, off)
		}
	}
}

// TestCounterValueAt: the counter reader's answers from the reads it kept. The value at an
// instant is the first read's that began at or after it, exact (held at the instant, no read
// late) only when the read before returned by then with the same value; an update is timed
// between the last read that still gave the old value and the first that gave the new one.
func TestCounterValueAt(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	g := &gpus{devs: []gpuDevice{&stepDevice{values: []uint64{1}}}, counters: []counterRec{{reads: []counterRead{
		{seq: 1, t0: ms(0), t1: ms(4), v: 10},
		{seq: 2, t0: ms(50), t1: ms(54), v: 10},
		{seq: 3, t0: ms(90), t1: ms(94), v: 20},
	}}}}
	for _, tc := range []struct {
		at           time.Time
		v            uint64
		when, readAt time.Time
	}{
		{at: ms(20), v: 10, when: ms(20), readAt: ms(20)}, // reads 1 and 2 agree: exact
		{at: ms(2), v: 10, when: ms(52), readAt: ms(54)},  // read 1 was not done by then
		{at: ms(60), v: 20, when: ms(92), readAt: ms(94)}, // the counter moved between reads 2 and 3
	} {
		w := &counterWant{at: tc.at}
		if !g.answer(0, w) || w.err != nil || w.res.v != tc.v || !w.res.at.Equal(tc.when) || !w.res.readDone.Equal(tc.readAt) {
			t.Fatalf("value at %v: %+v (%v); want %d held at %v, read by %v", tc.at.Sub(t0), w.res, w.err, tc.v, tc.when.Sub(t0), tc.readAt.Sub(t0))
		}
	}
	if w := (&counterWant{at: ms(95)}); g.answer(0, w) {
		t.Fatalf("value at 95ms answered before any read began then: %+v", w.res)
	}
	w := &counterWant{update: true, after: 1, base: 10, from: ms(2)}
	if !g.answer(0, w) || w.res.v != 20 || !w.res.at.Equal(ms(72)) || w.res.seq != 3 {
		t.Fatalf("update after read 1: %+v; want 20 at 72ms (between reads 2 and 3)", w.res)
	}
	if w := (&counterWant{update: true, after: 3, base: 20, from: ms(92)}); g.answer(0, w) {
		t.Fatalf("update after the last read answered: %+v", w.res)
	}
}
