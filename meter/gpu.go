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
	// InstantPowerW is the board's power now (the NVML_FI_DEV_POWER_INSTANT field), in W: it
	// follows the load within one of the energy counter's update periods.
	InstantPowerW() (float64, error)
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
	sleep   func(time.Duration) // how a counter reader waits between reads: its pace (tests: a fake clock's)
	closeFn func() error

	mu         sync.Mutex  // guards what follows: the spans, for splitting a bracket (splitBracket)
	open       int         // spans between book and spanEnded
	lastBegin  time.Time   // when the latest span began
	lastEnd    time.Time   // when the latest span ended
	idleW      []float64   // per device, its power the last time it was quiet (0: not known)
	lastUpdate []time.Time // per device, when its counter last updated, as far as a read saw
	lastVal    []uint64    // per device, the value it updated to then
	limits     []float64   // per device, its enforced power limit as last read (0: not read)

	// The samplers: one goroutine per device, running while a span is open or unsettled
	// (refs), reading its process list, instant power and utilisation samples into logs.
	pace     func(time.Duration) // how a sampler waits between reads (time.Sleep; real time in tests too)
	refs     int
	closed   bool
	logs     []devLog
	samplers sync.WaitGroup
	// bg counts Begin's and settle's background goroutines, which read NVML and /proc: close
	// waits for them before shutting NVML down. Added to only under mu before shut (track).
	bg sync.WaitGroup
	// The counter readers: one goroutine per device, running while a want of a span's (its
	// counter's value at an edge, or the update after it) is unanswered (counter.go).
	counters []counterRec
	readers  sync.WaitGroup
	shut     bool                   // close began: no more background reads
	live     map[*gpuAlign]struct{} // the spans that hold the samplers
	oldest   time.Time              // when the oldest of them began
}

// quietFor is how long no span must have been open on the GPUs for a board's power
// (PowerW, averaged over about a second) to be its idle power.
const quietFor = time.Second

// gpuAlign is the Begin end of a span's GPU window, taken in the background so that the call
// is not delayed (an energy read takes milliseconds on some boards: 4 ms on an H200): Begin's
// snapshot (written before snapped is closed), whose energy is asked of the counter readers only
// on the devices that listed a process of the tree (mine); per device, the value of the first
// counter update after it and when it happened (val, at and err, written before done is
// closed); and whether another span was near enough to have drawn power in the bracket that
// holds Begin.
type gpuAlign struct {
	snap    gpuSnap
	mine    []bool
	listed  chan struct{} // closed once Begin's process lists (snap.pids, listAt) and mine are written
	snapped chan struct{}
	done    chan struct{}
	val     []uint64
	at      []time.Time
	err     error
	alone   bool      // no other span was open at Begin
	prevEnd time.Time // when the latest other span ended, as of Begin
	quiet   bool      // no span for quietFor: the boards' power is their idle power
	start   time.Time // when it was booked: the samplers' logs are kept back to it
	held    bool      // it holds the samplers (acquire); released once its figure is final
}

// begin books a span's start and, in the background, takes Begin's snapshot: every device's
// processes, then the counter's value at the span's start on those that listed a process of the
// tree (inTree, the tree as Begin found it), as their counter readers answer: the others cannot
// be the span's unless the tree starts on them mid-span, which leaves the GPU part an estimate
// (gpu-started-mid-span), and each read would cost milliseconds of NVML's time. Then it waits
// for the update after it (align).
func (g *gpus) begin(inTree func(uint32) bool) *gpuAlign {
	a := g.book(g.now())
	if !g.track() {
		// Closed: NVML is shut down, or about to be. Nothing is read; no GPU figure.
		a.err = errClosed
		close(a.listed)
		close(a.snapped)
		close(a.done)
		return a
	}
	go func() {
		defer g.bg.Done()
		s := &a.snap
		g.size(s)
		t0 := g.now()
		g.readPIDs(s)
		s.listAt = midway(t0, g.now())
		for i := range g.devs {
			a.mine[i] = slices.ContainsFunc(s.pids[i], inTree)
		}
		close(a.listed) // the lists are known: a provisional figure can use them
		g.readEnergy(s, devsOf(a.mine), a.start)
		for i, mine := range a.mine {
			if mine && g.limitOf(i) == gpuMaxWatts/gpuExcursion {
				_, _ = g.readLimit(i) // for the provisional figure's ceiling; unread, it assumes gpuMaxWatts
			}
		}
		close(a.snapped)
		g.align(a)
	}()
	return a
}

// book counts a span begun at now among those open.
func (g *gpus) book(now time.Time) *gpuAlign {
	n := len(g.devs)
	a := &gpuAlign{mine: make([]bool, n), listed: make(chan struct{}), snapped: make(chan struct{}), done: make(chan struct{}), val: make([]uint64, n), at: make([]time.Time, n)}
	a.start = now
	g.mu.Lock()
	a.alone, a.prevEnd = g.open == 0, g.lastEnd
	g.open++
	g.lastBegin = now
	a.quiet = a.alone && now.Sub(g.lastEnd) >= quietFor
	a.held = true
	if g.live == nil {
		g.live = map[*gpuAlign]struct{}{}
	}
	g.live[a] = struct{}{}
	g.oldest = g.oldestLive()
	g.acquire()
	g.mu.Unlock()
	return a
}

// done says a span's figure is final: it no longer holds the samplers.
func (g *gpus) done(a *gpuAlign) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !a.held {
		return
	}
	a.held = false
	delete(g.live, a)
	g.oldest = g.oldestLive()
	g.release()
}

// oldestLive is when the oldest span that holds the samplers began; g.mu is held.
func (g *gpus) oldestLive() time.Time {
	var t time.Time
	for a := range g.live {
		if t.IsZero() || a.start.Before(t) {
			t = a.start
		}
	}
	return t
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

// end books the span's end, at (taken before any read: the span's edge), and then takes End's
// snapshot into s: every device's processes, then the counter's value at the edge on the
// devices Begin read (mine), as their counter readers answer. It runs off the request path
// (Span.End returns first), except with SettleInline. The value is timed at the span's end; a
// read that might have taken an update after the end is late by s.readDone, which the bounds
// allow for.
func (g *gpus) end(a *gpuAlign, s *gpuSnap, at time.Time) {
	g.spanEnded(at)
	<-a.snapped
	g.size(s)
	g.readPIDs(s)
	g.readEnergy(s, devsOf(a.mine), at)
	s.at = at // the span's edge, not when the reads returned
}

// midway is the middle of [a, b]: when a read that began at a and ended at b took its value,
// as best one can tell.
func midway(a, b time.Time) time.Time { return a.Add(b.Sub(a) / 2) }

// errNotRead marks a device whose energy was not read: it listed no process of the tree at Begin.
var errNotRead = errors.New("meter: not read: the device listed no process of the tree at Begin")

// ErrGPULate says the tree started on a GPU mid-span: Begin did not read that GPU's counter.
var ErrGPULate = errors.New("meter: the tree started on a GPU mid-span")

// spanEnded books a span's end at at: every span that book saw ends here.
func (g *gpus) spanEnded(at time.Time) {
	g.mu.Lock()
	g.open--
	g.lastEnd = later(g.lastEnd, at)
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
		g.size(&snap)
		g.readEnergy(&snap, []int{i}, g.now())
		var val [3]uint64
		var at [3]time.Time
		for k := range val {
			u, err := g.updates(&snap, []int{i}, deadline)
			if err != nil {
				return err
			}
			val[k], at[k] = u[i].v, u[i].at
			snap.energy[i], snap.eseq[i], snap.at = u[i].v, u[i].seq, g.now()
		}
		d := at[2].Sub(at[0])
		if d <= 0 || val[2] < val[0] {
			return fmt.Errorf("gpu %d %s: no usable update period", i, g.devs[i].Name())
		}
		periods = append(periods, d/2)
		g.mu.Lock()
		g.setIdle(i, float64(val[2]-val[0])/1000/d.Seconds())
		g.seen(i, at[2], val[2])
		g.mu.Unlock()
	}
	g.period = slices.Max(periods)
	return nil
}

// nextUpdate waits, bounded by g.wait, until the counter of each device in devs has moved past
// its reading in from, and puts the new value in val[i] and when it happened in at[i]: the
// middle of the last read that still gave from's value (or from's time) and the read that gave
// the new one. The devices' counter readers read; nextUpdate reads nothing.
func (g *gpus) nextUpdate(from *gpuSnap, devs []int, val []uint64, at []time.Time) error {
	u, err := g.updates(from, devs, g.now().Add(g.wait))
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, i := range devs {
		val[i], at[i] = u[i].v, u[i].at
		g.seen(i, at[i], val[i])
	}
	return nil
}

// seen records that device i's counter updated to v at t; g.mu is held.
func (g *gpus) seen(i int, t time.Time, v uint64) {
	if len(g.lastUpdate) != len(g.devs) {
		g.lastUpdate, g.lastVal = make([]time.Time, len(g.devs)), make([]uint64, len(g.devs))
	}
	if t.After(g.lastUpdate[i]) {
		g.lastUpdate[i], g.lastVal[i] = t, v
	}
}

// untilNextRead is how long device i's counter reader waits after a read that returned at now:
// a poll; or, when the update period is known and an update is expected later, until two and a
// half polls before the next update expected one or two periods after the last seen, so that
// reads fall half a poll either side of it and time it to within half a poll; no later than
// deadline when it is not zero. An energy read takes milliseconds on some boards (4 ms on an
// H200) and NVML serialises calls: reading only near an update spares the CPU, and NVML's other
// calls. No further than two periods: the period measured at start may be a few ms off, and an
// update that came before the wake-up would be timed only to within the sleep. g.mu is held.
func (g *gpus) untilNextRead(i int, now, deadline time.Time) time.Duration {
	if g.period <= 0 || i >= len(g.lastUpdate) || g.lastUpdate[i].IsZero() {
		return g.poll
	}
	k := now.Sub(g.lastUpdate[i])/g.period + 1
	if k > 2 {
		return g.poll
	}
	wait := g.lastUpdate[i].Add(k*g.period).Sub(now) - 5*g.poll/2
	if !deadline.IsZero() {
		wait = min(wait, deadline.Sub(now))
	}
	return max(wait, g.poll)
}

// gpuSnap is every device's energy and processes at one instant.
type gpuSnap struct {
	energy []uint64
	eerr   []error
	eseq   []uint64 // per device, the counter reader's read that gave energy
	pids   [][]uint32
	perr   []error   // per device, why its process list could not be read: unknown, not empty
	at     time.Time // when the energy reads were done
	listAt time.Time // when the process lists were read
	// readDone: when the energy reads of Begin's or End's snapshot were done (zero: with the
	// snapshot). An update between the span's edge and the read is inside the span.
	readDone time.Time
}

// snapshot takes every device's counter value now, as their readers answer, then processes.
func (g *gpus) snapshot(s *gpuSnap) {
	g.size(s)
	g.readEnergy(s, devsOf(slices.Repeat([]bool{true}, len(g.devs))), g.now())
	t0 := g.now()
	g.readPIDs(s)
	s.listAt = midway(t0, g.now())
}

func (g *gpus) size(s *gpuSnap) {
	n := len(g.devs)
	if cap(s.energy) < n || cap(s.perr) < n || cap(s.eseq) < n {
		s.energy, s.eerr, s.eseq, s.pids, s.perr = make([]uint64, n), make([]error, n), make([]uint64, n), make([][]uint32, n), make([]error, n)
	}
	s.energy, s.eerr, s.eseq, s.pids, s.perr = s.energy[:n], s.eerr[:n], s.eseq[:n], s.pids[:n], s.perr[:n]
}

// readPIDs reads each device's processes into s, sized.
func (g *gpus) readPIDs(s *gpuSnap) {
	for i, d := range g.devs {
		p, err := d.PIDs(s.pids[i][:0])
		if err != nil {
			p = p[:0]
		}
		s.pids[i], s.perr[i] = p, err
	}
}

// gpuResult is what the GPU side of a span comes to, in spanSample's terms.
type gpuResult struct {
	Used     bool
	Unknown  bool // the tree was seen on no GPU, but a process list could not be read at some moment of the span
	Err      error
	Joules   float64
	Share    float64
	Vanished bool
	Busy     float64 // GPU-equivalents busy over the span, for the power model; 0 when unknown
	// Low and High bound Joules: what the counters moved inside the span, and over the
	// brackets that hold its ends. SubPeriod: no counter updated inside the span, so Joules
	// is instant power over the span, an estimate.
	Low, High float64
	SubPeriod bool
	// LimitW: the used boards' enforced power limits, summed. Provisional: the counter had not
	// updated past the span's end: Joules since the last update is instant power × time, Low
	// and High hold the settled figure.
	LimitW      float64
	Provisional bool
}

// lists is every read of device i's process list over the span [start, end], in time order:
// Begin's snapshot's, the sampler's, and End's snapshot's when it was taken (end not nil).
func (g *gpus) lists(i int, a *gpuAlign, end *gpuSnap, start, endT time.Time) []pidRead {
	var out []pidRead
	if b := &a.snap; listed(a) && i < len(b.pids) {
		out = append(out, pidRead{at: b.listAt, pids: b.pids[i], err: b.perr[i]})
	}
	g.mu.Lock()
	g.seenBetween(i, start, endT, func(r pidRead) { out = append(out, r) })
	g.mu.Unlock()
	if end != nil && i < len(end.pids) {
		out = append(out, pidRead{at: endT, pids: end.pids[i], err: end.perr[i]})
	}
	return out
}

// seenPIDs is every PID a process list of a device showed over the span (lists), once each.
func (g *gpus) seenPIDs(a *gpuAlign, end *gpuSnap, start, endT time.Time) []uint32 {
	var out []uint32
	for i := range g.devs {
		for _, l := range g.lists(i, a, end, start, endT) {
			for _, p := range l.pids {
				if !slices.Contains(out, p) {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// listed reports whether Begin's process lists have been read.
func listed(a *gpuAlign) bool {
	select {
	case <-a.listed:
		return true
	default:
		return false
	}
}

// attribute works out the settled GPU side of a span that ended at endT, End's snapshot taken:
// which devices the tree used, whether it was their sole user over the whole span, and the
// energy they spent. It waits, bounded by g.wait, for each used device's energy counter to
// update after the span ended, so the delta is not short.
func (g *gpus) attribute(a *gpuAlign, end *gpuSnap, inTree func(uint32) bool, start, endT time.Time) gpuResult {
	<-a.snapped
	// Shares and utilisation first: they do not depend on the wait.
	r, used := g.usage(a, end, inTree, start, endT)
	if !r.Used {
		return r
	}
	j, err := g.joules(&a.snap, end, a, used, start, endT)
	r.Joules, r.Low, r.High, r.SubPeriod, r.LimitW, r.Err = j.Joules, j.Low, j.High, j.SubPeriod, j.LimitW, err
	return r
}

// usage is what attribute and provisional share: the devices the tree used over the span (end
// is End's snapshot, nil before one is read) and its share and utilisation of them. r.Used is
// false when it used none (r.Unknown when that is not known); r is then complete.
func (g *gpus) usage(a *gpuAlign, end *gpuSnap, inTree func(uint32) bool, start, endT time.Time) (r gpuResult, used []int) {
	r = gpuResult{Share: 1}
	used, vanished, unknown := g.usedDevices(a, end, inTree, start, endT)
	r.Vanished = vanished
	if len(used) == 0 {
		r.Unknown = unknown
		return r, nil
	}
	r.Used = true
	r.Share, r.Busy = g.shares(a, end, used, inTree, start, endT)
	return r, used
}

// provisional is the GPU side of a span as End knows it at once, reading nothing: the process
// lists that Begin's snapshot and the samplers read up to endT, the counter up to the last
// update a read saw, and instant power since. Its Low and High hold the settled figure
// (attribute): Low is 0, since a process list read at End may still show another process on
// the device (the settled figure then has no GPU part), and High is what the counter moved up
// to its last update plus the boards' ceiling since. Only a figure whose GPU part is the
// counter's, whole, is provisional; any other is final as it stands.
func (g *gpus) provisional(a *gpuAlign, inTree func(uint32) bool, start, endT time.Time) gpuResult {
	begun := listed(a)
	if !begun && !g.sampledBetween(start, endT) {
		// Begin's snapshot is still being read (NVML is busy) and no sampler has read a process
		// list since: whether the tree used a GPU, and alone, is not known yet, so the figure
		// has no GPU part, pending (partial), until the settled one reads the lists. Its High
		// holds what the boards can draw over the span.
		r := gpuResult{Unknown: true, Share: 1, Provisional: true}
		for i := range g.devs {
			r.LimitW += g.limitOf(i)
		}
		return r
	}
	r, used := g.usage(a, nil, inTree, start, endT)
	if !r.Used {
		return r
	}
	for _, i := range used {
		if begun && !a.mine[i] {
			r.Err = fmt.Errorf("gpu %d %s: %w", i, g.devs[i].Name(), ErrGPULate)
			return r
		}
	}
	if r.Vanished || r.Share < dominantShare {
		return r // no GPU figure: final
	}
	aligned := false
	select {
	case <-a.done:
		aligned = true
		if a.err != nil {
			r.Err = fmt.Errorf("after Begin: %w", a.err)
			return r
		}
	default:
	}
	r.Provisional = true
	period := cmp.Or(g.period, nvmlPeriod)
	for _, i := range used {
		limit := g.limitOf(i)
		ceil := gpuExcursion * limit
		r.LimitW += limit
		if !aligned || a.at[i].After(endT) {
			// No update seen inside the span yet: instant power over it.
			r.SubPeriod = true
			d := endT.Sub(start).Seconds()
			r.Joules += g.power(i, start, endT, limit, ceil) * d
			r.High += ceil * (d + 2*g.poll.Seconds())
			continue
		}
		e0, e1, t1 := a.snap.energy[i], a.val[i], a.at[i]
		ej, tj := e1, t1
		g.mu.Lock()
		if i < len(g.lastVal) && !g.lastUpdate[i].After(endT) && g.lastUpdate[i].After(t1) && g.lastVal[i] >= e1 {
			ej, tj = g.lastVal[i], g.lastUpdate[i]
		}
		g.mu.Unlock()
		if e1 < e0 {
			r.Err = fmt.Errorf("gpu %d %s: energy went backwards", i, g.devs[i].Name())
			return r
		}
		u0 := earlier(t1.Add(-period), a.snap.at)
		first := float64(e1-e0) / 1000
		begin := clampSplit(splitBracket(first, u0, t1, a.snap.at, t1, g.idleOf(i), a.alone && a.prevEnd.Before(u0)),
			first, t1.Sub(a.snap.at), a.snap.at.Sub(u0), ceil)
		since := endT.Sub(tj)
		r.Joules += begin + float64(ej-e1)/1000 + g.power(i, tj, endT, limit, ceil)*since.Seconds()
		// As in joules: an update during Begin's energy read left part of the span before e0.
		late := ceil * max(a.snap.readDone.Sub(start), 0).Seconds()
		r.High += float64(ej-e0)/1000 + ceil*(since+2*g.poll).Seconds() + late
	}
	r.High = max(r.High, r.Joules)
	return r
}

// power is device i's mean instant power over [from, to] for an estimate: no more than the
// board's ceiling; its enforced limit when no reading was taken.
func (g *gpus) power(i int, from, to time.Time, limit, ceil float64) float64 {
	g.mu.Lock()
	w, ok := g.meanPower(i, from, to)
	g.mu.Unlock()
	if !ok {
		w = limit
	}
	return min(max(w, 0), ceil)
}

// limitOf is device i's enforced power limit as last read (gpuMaxWatts / gpuExcursion until
// one is read, or when it cannot be).
func (g *gpus) limitOf(i int) float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if i < len(g.limits) && g.limits[i] > 0 {
		return g.limits[i]
	}
	return gpuMaxWatts / gpuExcursion
}

// readLimit reads device i's enforced power limit and keeps it for limitOf.
func (g *gpus) readLimit(i int) (limit float64, err error) {
	limit, err = g.devs[i].PowerLimitW()
	if err == nil && limit <= 0 {
		err = errors.New("not positive")
	}
	if err != nil {
		return gpuMaxWatts / gpuExcursion, fmt.Errorf("power limit: %w", err)
	}
	g.mu.Lock()
	if len(g.limits) != len(g.devs) {
		g.limits = make([]float64, len(g.devs))
	}
	g.limits[i] = limit
	g.mu.Unlock()
	return limit, nil
}

// usedDevices returns the devices on which a process of the tree was listed at some moment of
// the span (lists), whether a process of the tree listed then was gone from the last list read,
// and whether some list could not be read (so the tree's use of that device is unknown).
func (g *gpus) usedDevices(a *gpuAlign, end *gpuSnap, inTree func(uint32) bool, start, endT time.Time) (used []int, vanished, unknown bool) {
	for i := range g.devs {
		ls := g.lists(i, a, end, start, endT)
		var seen []uint32
		var last []uint32
		for _, l := range ls {
			if l.err != nil {
				unknown = true
				continue
			}
			last = l.pids
			for _, p := range l.pids {
				if inTree(p) && !slices.Contains(seen, p) {
					seen = append(seen, p)
				}
			}
		}
		if len(seen) == 0 {
			continue
		}
		used = append(used, i)
		for _, p := range seen {
			if !slices.Contains(last, p) {
				vanished = true
			}
		}
	}
	return used, vanished, unknown
}

// shares returns the tree's share of the used devices: 1 when sole use is proven, 0 otherwise.
// Sole use needs every process list read over the span (Begin's, the samplers', End's) to have
// been read and to list no process outside the tree, and no utilisation sample of the span to
// name one: a process that held a context at any moment may have used the device then, and a
// missing utilisation sample is no evidence that it did not (NVML often returns none). It
// also returns how many GPUs' worth the tree kept busy, from the samplers' utilisation samples
// (0 when unknown).
func (g *gpus) shares(a *gpuAlign, end *gpuSnap, used []int, inTree func(uint32) bool, start, endT time.Time) (share, busy float64) {
	from, to := uint64(max(start.UnixMicro(), 0)), uint64(max(endT.UnixMicro(), 0))
	share = 1
	busyKnown := true
	for _, i := range used {
		others := false
		for _, l := range g.lists(i, a, end, start, endT) {
			if l.err != nil {
				others = true // unknown, not empty
			}
			for _, p := range l.pids {
				if !inTree(p) {
					others = true
				}
			}
		}
		var tree uint64
		stamps := map[uint64]bool{}
		g.mu.Lock()
		if i < len(g.logs) {
			for _, s := range g.logs[i].util {
				if s.TimeStamp < from || s.TimeStamp > to {
					continue // the sample's own time, not when a read returned it
				}
				stamps[s.TimeStamp] = true
				if inTree(s.PID) {
					tree += uint64(s.SM)
				} else {
					others = true // in no PID list, perhaps, but it used the GPU
				}
			}
		}
		g.mu.Unlock()
		if len(stamps) == 0 {
			busyKnown = false
		} else {
			busy += float64(tree) / 100 / float64(len(stamps))
		}
		if others {
			share = 0
		}
	}
	if !busyKnown {
		busy = 0
	}
	return share, busy
}

// joules returns the used devices' energy over the span [start, endT], in J, with bounds. The
// counters update every period or so, so each end of the span lies inside a bracket between
// two updates: Begin's between its reading and the first update after it (align), End's
// between the update before it and the first update after it (waited for here, bounded by
// g.wait). What the counter moved between those two first updates, less the part of End's
// bracket after End, plus the part of Begin's bracket after Begin, is the span's energy; each
// bracket is split by splitBracket, within what the board can draw (clampSplit). low is what
// the counter moved inside the span, high what it moved over both brackets: the span's energy
// lies between them whatever the split. A span with no update inside it lies in one bracket:
// its energy is the board's instant power over it, bounded by the bracket and the board's
// ceiling; sub says so. A counter that went backwards, or counted faster than the board's
// enforced power limit allows over the window, is an error.
func (g *gpus) joules(begin, end *gpuSnap, align *gpuAlign, used []int, start, endT time.Time) (r gpuResult, err error) {
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
		limit, err := g.readLimit(i)
		ceiling := gpuExcursion * limit
		if err != nil {
			limit, ceiling = gpuMaxWatts/gpuExcursion, gpuMaxWatts
		}
		r.LimitW += limit
		// An update between the span's start and Begin's energy read put part of the span's
		// energy before the window's reading; one between the span's end and End's read put
		// energy after the end inside it: at most the board's ceiling over each read's lateness.
		lateB := ceiling * max(begin.readDone.Sub(start), 0).Seconds()
		lateE := ceiling * max(end.readDone.Sub(endT), 0).Seconds()
		if begin.readDone.IsZero() {
			lateB = 0
		}
		if end.readDone.IsZero() {
			lateE = 0
		}
		idle := g.idleOf(i)
		// The update before Begin's reading is a period before the first one after it, and
		// no later than the reading.
		u0 := earlier(align.at[i].Add(-period), begin.at)
		beginQuiet := align.alone && align.prevEnd.Before(u0)
		first := float64(e1-e0) / 1000 // Begin's bracket
		var j float64
		if e2 == e0 {
			// No update inside the span: it lies in the bracket that align closed. Its part is
			// the board's instant power over the span, within what the bracket and the board
			// allow: at most the bracket, and the board's ceiling over the span; at least what
			// the bracket holds beyond the ceiling over the rest of it.
			r.SubPeriod = true
			// Each update is seen at most a poll late: the bracket is at most this long.
			w := align.at[i].Sub(u0) + 2*g.poll
			if first > ceiling*w.Seconds() {
				return r, fmt.Errorf("gpu %d %s: %w: %.3f J in %v, limit %.0f W", i, g.devs[i].Name(), ErrCounterRate, first, w, limit)
			}
			ours := endT.Sub(start)
			rest := max(align.at[i].Sub(u0)-ours, 0) + 2*g.poll
			est := g.power(i, start, endT, limit, ceiling) * ours.Seconds()
			j = clampSplit(est, first, ours, rest, ceiling)
			r.Low += min(max(first-ceiling*rest.Seconds()-lateE, 0), j)
			r.High += first + lateB
		} else {
			inner := float64(e2-e1) / 1000
			// End's bracket began with the last update before End: a period before the first
			// after it, and no earlier than Begin's first.
			u2 := later(earlier(at[i].Add(-period), end.at), align.at[i])
			last := float64(e3-e2) / 1000
			j = inner +
				clampSplit(splitBracket(first, u0, align.at[i], begin.at, align.at[i], idle, beginQuiet), first, align.at[i].Sub(begin.at), begin.at.Sub(u0), ceiling) +
				clampSplit(splitBracket(last, u2, at[i], u2, end.at, idle, endAlone), last, end.at.Sub(u2), at[i].Sub(end.at), ceiling)
			r.Low += max(inner-lateE, 0)
			r.High += float64(e3-e0)/1000 + lateB
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

// clampSplit keeps a bracket's part (j of joules, over ours of the bracket, the rest lasting
// rest) within what the board can draw: no more than its ceiling over ours, no less than what
// the bracket holds beyond its ceiling over the rest, and within [0, joules]. Without it, a split
// by idle power would give a short span everything the bracket moved above idle, far above what
// the board can draw over the span.
func clampSplit(j, joules float64, ours, rest time.Duration, ceil float64) float64 {
	lo := max(joules-ceil*max(rest, 0).Seconds(), 0)
	hi := min(joules, ceil*max(ours, 0).Seconds())
	return max(min(j, hi), min(lo, hi))
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

// errClosed says the meter was closed before the span's GPU side could be read.
var errClosed = errors.New("meter: closed")

// track counts one more background goroutine of a span's (bg), unless close began.
func (g *gpus) track() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut {
		return false
	}
	g.bg.Add(1)
	return true
}

// close stops the samplers, waits for the spans' background goroutines (each bounded by the
// wait for a counter update) and the counter readers answering them, then shuts NVML down.
func (g *gpus) close() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	g.shut = true
	g.mu.Unlock()
	g.stopSamplers()
	g.bg.Wait()
	g.readers.Wait()
	if g.closeFn == nil {
		return nil
	}
	return g.closeFn()
}
