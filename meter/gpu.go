package meter

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// ErrCounterStale says a counter did not update after the span ended within the bounded wait,
// so its reading would be short.
var ErrCounterStale = errors.New("meter: counter did not update after the span ended")

// gpuDevice is what the meter needs from one GPU. nvml.go implements it over go-nvml.
type gpuDevice interface {
	Name() string
	// EnergyMJ is the device's total energy since the driver loaded, in mJ (Volta and later).
	EnergyMJ() (uint64, error)
	// PIDs appends the PIDs of the device's compute and graphics processes.
	PIDs(dst []uint32) ([]uint32, error)
	// Utilization returns per-process SM utilisation samples newer than sinceMicros (unix µs).
	Utilization(sinceMicros uint64) ([]procUtil, error)
	// PowerLimitW is the board's enforced power limit (nvmlDeviceGetEnforcedPowerLimit), in W.
	PowerLimitW() (float64, error)
	// PowerW is the board's power draw (nvmlDeviceGetPowerUsage; averaged over about a second
	// on recent parts), in W.
	PowerW() (float64, error)
}

// gpuMaxWatts bounds a GPU's rate when its enforced power limit cannot be read: above the
// largest boards' limits (B200: 1000 W), so it errs towards trust only for absurd counts.
const gpuMaxWatts = 1500.0

// gpuExcursion is how far above its enforced power limit a board may count. Power capping
// holds the average over about a second; over shorter windows boards draw above it (an H200
// capped at 700 W drew 847 W over 186 ms and 714 W over a second: gpu-check, 2026-12-04).
const gpuExcursion = 1.5

// ErrCounterRate says a counter counted faster than its device can draw.
var ErrCounterRate = errors.New("meter: counter counted faster than the device can draw")

// procUtil is one process's SM utilisation (percent) in one NVML sample.
type procUtil struct {
	PID       uint32
	TimeStamp uint64
	SM        uint32
}

// gpus is the set of GPUs NVML sees. It is safe for concurrent use as long as its devices are.
type gpus struct {
	devs    []gpuDevice
	wait    time.Duration // bound on the wait for a counter update after a span
	poll    time.Duration
	period  time.Duration // how often the energy counters update: calibrate measures it (nvmlPeriod until then)
	now     func() time.Time
	sleep   func(time.Duration)
	closeFn func() error

	mu         sync.Mutex  // guards what follows: the spans, for splitting a bracket (splitBracket)
	open       int         // spans between book and spanEnded
	lastBegin  time.Time   // when the latest span began
	lastEnd    time.Time   // when the latest span ended
	idleW      []float64   // per device, its power the last time it was quiet (0: not known)
	lastUpdate []time.Time // per device, when its counter last updated, as far as a read saw
}

// quietFor is how long no span must have been open on the GPUs for a board's power
// (PowerW, averaged over about a second) to be its idle power.
const quietFor = time.Second

// gpuAlign is the Begin end of a span's GPU window, read in the background so that the call
// is not delayed (an energy read takes milliseconds on some boards: 4 ms on an H200): Begin's
// snapshot (written before snapped is closed), whose energy is read only on the devices that
// listed a process of the tree (mine); per device, the value of the first counter update after
// it and when it happened (val, at and err, written before done is closed); and whether another
// span was near enough to have drawn power in the bracket that holds Begin.
type gpuAlign struct {
	snap    gpuSnap
	mine    []bool
	snapped chan struct{}
	done    chan struct{}
	val     []uint64
	at      []time.Time
	err     error
	alone   bool      // no other span was open at Begin
	prevEnd time.Time // when the latest other span ended, as of Begin
	quiet   bool      // no span for quietFor: the boards' power is their idle power
}

// begin books a span's start and, in the background, takes Begin's snapshot: every device's
// processes, then the energy of those that listed a process of the tree (inTree, the tree as
// Begin found it): the others cannot be the span's unless the tree starts on them mid-span,
// which leaves the GPU part an estimate (gpu-started-mid-span), and each read would cost
// milliseconds of NVML's time. Then it waits for the update after it (align).
func (g *gpus) begin(inTree func(uint32) bool) *gpuAlign {
	a := g.book(g.now())
	go func() {
		s := &a.snap
		g.size(s)
		g.readPIDs(s)
		t0 := g.now()
		for i, d := range g.devs {
			s.energy[i], s.eerr[i] = 0, errNotRead
			if a.mine[i] = slices.ContainsFunc(s.pids[i], inTree); a.mine[i] {
				s.energy[i], s.eerr[i] = d.EnergyMJ()
			}
		}
		s.at = midway(t0, g.now())
		close(a.snapped)
		g.align(a)
	}()
	return a
}

// book counts a span begun at now among those open.
func (g *gpus) book(now time.Time) *gpuAlign {
	n := len(g.devs)
	a := &gpuAlign{mine: make([]bool, n), snapped: make(chan struct{}), done: make(chan struct{}), val: make([]uint64, n), at: make([]time.Time, n)}
	g.mu.Lock()
	a.alone, a.prevEnd = g.open == 0, g.lastEnd
	g.open++
	g.lastBegin = now
	a.quiet = a.alone && now.Sub(g.lastEnd) >= quietFor
	g.mu.Unlock()
	return a
}

// align waits, bounded by g.wait, for the counter of each device of the span's (mine) to move
// past its reading in Begin's snapshot. When the GPUs were quiet, it first reads each board's
// power: its idle power, to split the brackets at a span's ends.
func (g *gpus) align(a *gpuAlign) {
	defer close(a.done)
	if a.quiet {
		g.readIdle()
	}
	var mine []int
	for i, m := range a.mine {
		if m {
			mine = append(mine, i)
		}
	}
	a.err = g.nextUpdate(&a.snap, mine, a.val, a.at)
}

// end takes End's snapshot into s and books the span's end: the energy of the devices Begin
// read (mine), first, so that End's time is the span's end, then every device's processes.
func (g *gpus) end(a *gpuAlign, s *gpuSnap) {
	<-a.snapped
	g.size(s)
	t0 := g.now()
	for i, d := range g.devs {
		s.energy[i], s.eerr[i] = 0, errNotRead
		if a.mine[i] {
			s.energy[i], s.eerr[i] = d.EnergyMJ()
		}
	}
	s.at = midway(t0, g.now())
	g.readPIDs(s)
	g.spanEnded(s)
}

// midway is the middle of [a, b]: when a read that began at a and ended at b took its value,
// as best one can tell.
func midway(a, b time.Time) time.Time { return a.Add(b.Sub(a) / 2) }

// errNotRead marks a device whose energy was not read: it listed no process of the tree at Begin.
var errNotRead = errors.New("meter: not read: the device listed no process of the tree at Begin")

// ErrGPULate says the tree started on a GPU mid-span: Begin did not read that GPU's counter.
var ErrGPULate = errors.New("meter: the tree started on a GPU mid-span")

// spanEnded books a span's end, read at end.at: every span that book saw ends here.
func (g *gpus) spanEnded(end *gpuSnap) {
	g.mu.Lock()
	g.open--
	g.lastEnd = later(g.lastEnd, end.at)
	g.mu.Unlock()
}

// readIdle takes each board's power as its idle power.
func (g *gpus) readIdle() {
	for i, d := range g.devs {
		if w, err := d.PowerW(); err == nil && w > 0 {
			g.mu.Lock()
			g.setIdle(i, w)
			g.mu.Unlock()
		}
	}
}

// setIdle records device i's idle power; g.mu is held.
func (g *gpus) setIdle(i int, w float64) {
	if len(g.idleW) != len(g.devs) {
		g.idleW = make([]float64, len(g.devs))
	}
	g.idleW[i] = w
}

// calibrate measures how often the counters update and each board's power meanwhile (its idle
// power: New runs it before any span): over two update periods of each device in turn, bounded
// by a second each (about 0.25 s a board at NVML's 100 ms).
func (g *gpus) calibrate() error {
	var periods []time.Duration
	for i := range g.devs {
		deadline := g.now().Add(time.Second)
		var snap gpuSnap
		g.snapshot(&snap)
		var val [3]uint64
		var at [3]time.Time
		for k := range val {
			one := []int{i}
			v, t := make([]uint64, len(g.devs)), make([]time.Time, len(g.devs))
			if err := g.nextUpdateUntil(&snap, one, v, t, deadline); err != nil {
				return err
			}
			val[k], at[k] = v[i], t[i]
			snap.energy[i], snap.at = v[i], g.now()
		}
		d := at[2].Sub(at[0])
		if d <= 0 || val[2] < val[0] {
			return fmt.Errorf("gpu %d %s: no usable update period", i, g.devs[i].Name())
		}
		periods = append(periods, d/2)
		g.mu.Lock()
		g.setIdle(i, float64(val[2]-val[0])/1000/d.Seconds())
		g.seen(i, at[2])
		g.mu.Unlock()
	}
	g.period = slices.Max(periods)
	return nil
}

// nextUpdate waits, bounded by g.wait, until the counter of each device in devs has moved past
// its reading in from, and puts the new value in val[i] and when it happened in at[i]: the
// middle of the last read that still gave from's value (or from's time) and the read that gave
// the new one.
func (g *gpus) nextUpdate(from *gpuSnap, devs []int, val []uint64, at []time.Time) error {
	return g.nextUpdateUntil(from, devs, val, at, g.now().Add(g.wait))
}

func (g *gpus) nextUpdateUntil(from *gpuSnap, devs []int, val []uint64, at []time.Time, deadline time.Time) error {
	for _, i := range devs {
		if from.eerr[i] != nil {
			return fmt.Errorf("gpu %d %s: %w", i, g.devs[i].Name(), from.eerr[i])
		}
	}
	done := make([]bool, len(g.devs))
	last := make([]time.Time, len(g.devs)) // when the last read that still gave from's value took it
	for _, i := range devs {
		last[i] = from.at
	}
	for {
		all := true
		for _, i := range devs {
			if done[i] {
				continue
			}
			t0 := g.now()
			e, err := g.devs[i].EnergyMJ()
			if err != nil {
				return fmt.Errorf("gpu %d %s: %w", i, g.devs[i].Name(), err)
			}
			now := midway(t0, g.now())
			if e != from.energy[i] {
				val[i], at[i], done[i] = e, midway(last[i], now), true
				g.mu.Lock()
				g.seen(i, at[i])
				g.mu.Unlock()
				continue
			}
			last[i] = now
			all = false
		}
		if all {
			return nil
		}
		now := g.now()
		if !now.Before(deadline) {
			return fmt.Errorf("nvml: %w within %v", ErrCounterStale, g.wait)
		}
		g.sleep(g.untilNextRead(devs, done, now, deadline))
	}
}

// seen records that device i's counter updated at t; g.mu is held.
func (g *gpus) seen(i int, t time.Time) {
	if len(g.lastUpdate) != len(g.devs) {
		g.lastUpdate = make([]time.Time, len(g.devs))
	}
	g.lastUpdate[i] = later(g.lastUpdate[i], t)
}

// untilNextRead is how long to wait before the next read: a poll; or, when the update period is
// known and every device still awaited has an update expected later, one or two periods after
// its last seen update, until two and a half polls before the earliest, so that reads fall half
// a poll either side of it and time it to within half a poll. An energy read takes milliseconds
// on some boards (4 ms on an H200) and NVML serialises calls: reading only near an update spares
// the CPU, and the calls of other spans. No further than two periods: the period measured at
// start may be a few ms off, and an update that came before the wake-up would be timed only to
// within the sleep.
func (g *gpus) untilNextRead(devs []int, done []bool, now, deadline time.Time) time.Duration {
	if g.period <= 0 {
		return g.poll
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var next time.Time
	for _, i := range devs {
		if done[i] {
			continue
		}
		if i >= len(g.lastUpdate) || g.lastUpdate[i].IsZero() {
			return g.poll
		}
		k := now.Sub(g.lastUpdate[i])/g.period + 1
		if k > 2 {
			return g.poll
		}
		if exp := g.lastUpdate[i].Add(k * g.period); next.IsZero() || exp.Before(next) {
			next = exp
		}
	}
	wait := min(next.Sub(now)-5*g.poll/2, deadline.Sub(now))
	return max(wait, g.poll)
}

// gpuSnap is every device's energy and processes at one instant.
type gpuSnap struct {
	energy []uint64
	eerr   []error
	pids   [][]uint32
	at     time.Time // when the energy reads were done
}

func (g *gpus) snapshot(s *gpuSnap) {
	g.size(s)
	t0 := g.now()
	for i, d := range g.devs {
		s.energy[i], s.eerr[i] = d.EnergyMJ()
	}
	s.at = midway(t0, g.now())
	g.readPIDs(s)
}

func (g *gpus) size(s *gpuSnap) {
	n := len(g.devs)
	if cap(s.energy) < n {
		s.energy, s.eerr, s.pids = make([]uint64, n), make([]error, n), make([][]uint32, n)
	}
	s.energy, s.eerr, s.pids = s.energy[:n], s.eerr[:n], s.pids[:n]
}

// readPIDs reads each device's processes into s, sized.
func (g *gpus) readPIDs(s *gpuSnap) {
	for i, d := range g.devs {
		p, err := d.PIDs(s.pids[i][:0])
		if err != nil {
			p = p[:0]
		}
		s.pids[i] = p
	}
}

// gpuResult is what the GPU side of a span comes to, in spanSample's terms.
type gpuResult struct {
	Used     bool
	Err      error
	Joules   float64
	Share    float64
	Vanished bool
	Busy     float64 // GPU-equivalents busy over the span, for the power model; 0 when unknown
	// Low and High bound Joules: what the counters moved inside the span, and over the
	// brackets that hold its ends. SubPeriod: no counter updated inside the span, so Joules
	// is a bracket's split, an estimate.
	Low, High float64
	SubPeriod bool
}

// attribute works out the GPU side of a span: which devices the tree used, whether it was their
// sole user, and the energy they spent. It waits, bounded by g.wait, for each used device's
// energy counter to update after the span ended, so the delta is not short.
func (g *gpus) attribute(align *gpuAlign, end *gpuSnap, inTree func(uint32) bool, start time.Time) gpuResult {
	<-align.snapped
	begin := &align.snap
	r := gpuResult{Share: 1}
	var buf [64]int
	used, vanished := g.usedDevices(begin, end, inTree, buf[:0])
	r.Vanished = vanished
	if len(used) == 0 {
		return r
	}
	r.Used = true
	// Shares and utilisation first: they do not depend on the wait.
	r.Share, r.Busy = g.shares(begin, end, used, inTree, start)
	j, err := g.joules(begin, end, align, used)
	r.Joules, r.Low, r.High, r.SubPeriod, r.Err = j.Joules, j.Low, j.High, j.SubPeriod, err
	return r
}

// usedDevices appends to dst the devices on which a process of the tree ran at either end of
// the span, and reports whether a process of the tree listed at the start was gone at the end.
func (g *gpus) usedDevices(begin, end *gpuSnap, inTree func(uint32) bool, dst []int) (used []int, vanished bool) {
	for i := range g.devs {
		if i >= len(begin.pids) || i >= len(end.pids) {
			break
		}
		onBegin, onEnd := false, false
		for _, p := range begin.pids[i] {
			if inTree(p) {
				onBegin = true
				if !slices.Contains(end.pids[i], p) {
					vanished = true
				}
			}
		}
		for _, p := range end.pids[i] {
			if inTree(p) {
				onEnd = true
			}
		}
		if (onBegin || onEnd) && len(dst) < cap(dst) {
			dst = append(dst, i)
		}
	}
	return dst, vanished
}

// shares returns the tree's smallest share of a used device's process time (1 when no other
// process was listed on it) and how many GPUs' worth it kept busy, from NVML's per-process
// utilisation since start (0 when unknown).
func (g *gpus) shares(begin, end *gpuSnap, used []int, inTree func(uint32) bool, start time.Time) (share, busy float64) {
	since := uint64(start.UnixMicro())
	share = 1
	busyKnown := true
	for _, i := range used {
		others := false
		for _, ps := range [][]uint32{begin.pids[i], end.pids[i]} {
			for _, p := range ps {
				if !inTree(p) {
					others = true
				}
			}
		}
		samples, err := g.devs[i].Utilization(since)
		var tree, all uint64
		stamps := map[uint64]bool{}
		for _, s := range samples {
			all += uint64(s.SM)
			stamps[s.TimeStamp] = true
			if inTree(s.PID) {
				tree += uint64(s.SM)
			} else {
				others = true // in no PID list, perhaps, but it used the GPU
			}
		}
		if err != nil || len(stamps) == 0 {
			busyKnown = false
		} else {
			busy += float64(tree) / 100 / float64(len(stamps))
		}
		devShare := 1.0
		if others {
			devShare = 0
			if err == nil && all > 0 {
				devShare = float64(tree) / float64(all)
			}
		}
		share = min(share, devShare)
	}
	if !busyKnown {
		busy = 0
	}
	return share, busy
}

// joules returns the used devices' energy over the span, in J, with bounds. The counters update every period or so, so each end of the span lies inside a
// bracket between two updates: Begin's between its reading and the first update after it
// (align), End's between its reading and the first update after it (waited for here, bounded
// by g.wait). What the counter moved between those two first updates, less the part of End's
// bracket after End, plus the part of Begin's bracket after Begin, is the span's energy; each
// bracket is split by splitBracket. low is what the counter moved inside the span, high what it
// moved over both brackets: the span's energy lies between them whatever the split. A span with
// no update inside it lies in one bracket: its energy is that bracket's split, sub says so. A
// counter that went backwards, or counted faster than the board's enforced power limit allows
// over the window, is an error.
func (g *gpus) joules(begin, end *gpuSnap, align *gpuAlign, used []int) (r gpuResult, err error) {
	<-align.done // bounded by g.wait
	for _, i := range used {
		if !align.mine[i] {
			return r, fmt.Errorf("gpu %d %s: %w", i, g.devs[i].Name(), ErrGPULate)
		}
	}
	if align.err != nil {
		return r, fmt.Errorf("after Begin: %w", align.err)
	}
	for _, i := range used {
		if e0, e1, e2 := begin.energy[i], align.val[i], end.energy[i]; e1 < e0 || e2 < e0 || (e2 != e0 && e2 < e1) {
			return r, fmt.Errorf("gpu %d %s: energy went backwards", i, g.devs[i].Name())
		}
	}
	final := make([]uint64, len(g.devs))
	at := make([]time.Time, len(g.devs))
	if err := g.nextUpdate(end, used, final, at); err != nil {
		return r, err
	}
	g.mu.Lock()
	// Another span began after this one: it may have drawn power in End's bracket.
	endAlone := !g.lastBegin.After(begin.at)
	g.mu.Unlock()
	period := cmp.Or(g.period, nvmlPeriod)
	for _, i := range used {
		e0, e1, e2, e3 := begin.energy[i], align.val[i], end.energy[i], final[i]
		if e3 < e2 {
			return r, fmt.Errorf("gpu %d %s: energy went backwards", i, g.devs[i].Name())
		}
		limit, err := g.devs[i].PowerLimitW()
		ceiling := gpuExcursion * limit
		if err != nil || limit <= 0 {
			limit, ceiling = gpuMaxWatts, gpuMaxWatts
		}
		idle := g.idleOf(i)
		// The update before Begin's reading is a period before the first one after it, and
		// no later than the reading.
		u0 := earlier(align.at[i].Add(-period), begin.at)
		beginQuiet := align.alone && align.prevEnd.Before(u0)
		first := float64(e1-e0) / 1000 // Begin's bracket
		var j float64
		if e2 == e0 {
			// No update inside the span: it lies in the bracket that align closed.
			r.SubPeriod = true
			j = splitBracket(first, u0, align.at[i], begin.at, earlier(end.at, align.at[i]), idle, beginQuiet && endAlone)
			r.High += first
			// Each update is seen at most a poll late: the bracket is at most this long.
			if w := align.at[i].Sub(u0) + 2*g.poll; first > ceiling*w.Seconds() {
				return r, fmt.Errorf("gpu %d %s: %w: %.3f J in %v, limit %.0f W", i, g.devs[i].Name(), ErrCounterRate, first, w, limit)
			}
		} else {
			inner := float64(e2-e1) / 1000
			// End's bracket began with the last update before End: a period before the first
			// after it, and no earlier than Begin's first.
			u2 := later(earlier(at[i].Add(-period), end.at), align.at[i])
			j = inner +
				splitBracket(first, u0, align.at[i], begin.at, align.at[i], idle, beginQuiet) +
				splitBracket(float64(e3-e2)/1000, u2, at[i], u2, end.at, idle, endAlone)
			r.Low += inner
			r.High += float64(e3-e0) / 1000
			// Each update is seen at most a poll late: the window is at most this long.
			w := at[i].Sub(align.at[i]) + 2*g.poll
			if moved := float64(e3-e1) / 1000; moved > ceiling*w.Seconds() {
				return r, fmt.Errorf("gpu %d %s: %w: %.3f J in %v, limit %.0f W", i, g.devs[i].Name(), ErrCounterRate, moved, w, limit)
			}
		}
		r.Joules += j
	}
	return r, nil
}

// splitBracket is the part of a bracket's energy (joules over [from, to], between two counter
// updates) drawn over [a, b], the span's part of it. When nothing else was running in the
// bracket (quiet) and the board's idle power is known, the rest of the bracket drew idle power
// and the span the remainder, as long as that is at least idle power: a span starts or ends
// work on the GPU, so its part of a bracket draws more than the idle rest. Otherwise the
// bracket's energy is split by time.
func splitBracket(joules float64, from, to, a, b time.Time, idleW float64, quiet bool) float64 {
	d := to.Sub(from).Seconds()
	ours := min(max(b.Sub(a).Seconds(), 0), d)
	if d <= 0 || ours >= d {
		return joules
	}
	rest := d - ours
	if quiet && idleW > 0 {
		if busy := joules - idleW*rest; busy >= idleW*ours {
			return busy
		}
	}
	return joules * ours / d
}

func (g *gpus) idleOf(i int) float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if i < len(g.idleW) {
		return g.idleW[i]
	}
	return 0
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (g *gpus) close() error {
	if g == nil || g.closeFn == nil {
		return nil
	}
	return g.closeFn()
}
