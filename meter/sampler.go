package meter

import (
	"cmp"
	"slices"
	"time"
)

// devLog is what a device's sampler read while spans were open: its process lists, each kept
// once for the run of reads that gave it (a list that could not be read is kept, as unknown),
// at most maxRuns runs; the board's instant power, at most maxPower readings; and per-process
// utilisation samples. g.mu guards it.
type devLog struct {
	running bool
	reads   []pidRead
	power   []powerRead
	util    []utilRead
	n       int // reads so far, ever (tests wait on it)
}

// utilRead is a utilisation sample and when the sampler read it: a sample counts for a span
// when its own time stamp falls within the span (at only ages it out of the log).
type utilRead struct {
	at time.Time
	procUtil
}

// pidRead is a run of reads of a device's process list that gave the same PIDs (sorted), or
// could not be read: from the first at at to the last at until.
type pidRead struct {
	at, until time.Time
	pids      []uint32
	err       error
}

// maxRuns and maxPower bound a device's log while a span stays open for long: a sampler reads
// every poll (a 1-hour stream: 720,000 reads).
const (
	maxRuns  = 1024
	maxPower = 4096
)

// addRead logs a process-list read: it extends the last run when it gave the same list (or
// could not be read either), else starts a run. Past maxRuns, the two oldest runs become one
// whose list is both lists' PIDs and which is unknown when either was: a process seen then
// stays seen, only when within the run is lost.
func (l *devLog) addRead(at time.Time, pids []uint32, err error) {
	slices.Sort(pids)
	if n := len(l.reads); n > 0 {
		last := &l.reads[n-1]
		if (err != nil) == (last.err != nil) && slices.Equal(last.pids, pids) {
			last.until = at
			return
		}
	}
	l.reads = append(l.reads, pidRead{at: at, until: at, pids: pids, err: err})
	if len(l.reads) > maxRuns {
		a, b := l.reads[0], l.reads[1]
		u := slices.Concat(a.pids, b.pids)
		slices.Sort(u)
		l.reads[1] = pidRead{at: a.at, until: b.until, pids: slices.Compact(u), err: cmp.Or(a.err, b.err)}
		l.reads = slices.Delete(l.reads, 0, 1)
	}
}

// addPower logs an instant power reading; past maxPower, the two oldest become their mean.
func (l *devLog) addPower(at time.Time, w float64) {
	l.power = append(l.power, powerRead{at: at, w: w})
	if len(l.power) > maxPower {
		l.power[1] = powerRead{at: l.power[0].at, w: (l.power[0].w + l.power[1].w) / 2}
		l.power = slices.Delete(l.power, 0, 1)
	}
}

// powerRead is one reading of a board's instant power.
type powerRead struct {
	at time.Time
	w  float64
}

// keepLog is how far back a device's log reaches before the oldest open span: Begin's bracket
// (a period before Begin) with room.
const keepLog = 2 * time.Second

// utilEvery is how many process-list reads a sampler makes per utilisation read: NVML keeps a
// per-process sample per about a sixth of a second, and returns at most one per process.
const utilEvery = 10

// acquire counts one more span that needs the samplers (open, or ended and not yet settled),
// and starts the sampler of every device that has none running. g.mu is held.
func (g *gpus) acquire() {
	g.refs++
	if len(g.logs) != len(g.devs) {
		g.logs = make([]devLog, len(g.devs))
	}
	if g.closed {
		return
	}
	for i := range g.devs {
		if !g.logs[i].running {
			g.logs[i].running = true
			g.samplers.Add(1)
			go g.sample(i)
		}
	}
}

// release counts one span less; the samplers stop when none is left. g.mu is held.
func (g *gpus) release() { g.refs-- }

// sample is device i's sampler: it reads the device's processes and instant power every poll
// (microseconds each), and its utilisation samples every utilEvery polls, until no span needs
// it. NVML's energy counter, whose read takes milliseconds, is not read here.
func (g *gpus) sample(i int) {
	defer g.samplers.Done()
	d := g.devs[i]
	pace := g.pace
	if pace == nil {
		pace = time.Sleep
	}
	var since uint64
	for k := 0; ; k++ {
		g.mu.Lock()
		if g.refs <= 0 || g.closed {
			g.logs[i].running = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		t0 := g.now()
		pids, err := d.PIDs(nil)
		at := midway(t0, g.now())
		if err != nil {
			pids = nil
		}
		w, werr := d.InstantPowerW()
		wAt := g.now()
		var util []procUtil
		var uAt time.Time
		if k%utilEvery == 0 {
			if u, err := d.Utilization(since); err == nil {
				util, uAt = u, g.now()
				for _, s := range u {
					since = max(since, s.TimeStamp)
				}
			}
		}
		g.mu.Lock()
		l := &g.logs[i]
		l.addRead(at, pids, err)
		if werr == nil && w >= 0 {
			l.addPower(wAt, w)
		}
		for _, u := range util {
			l.util = append(l.util, utilRead{at: uAt, procUtil: u})
		}
		l.n++
		g.trim(l, at)
		g.mu.Unlock()
		pace(g.poll)
	}
}

// trim drops what no open span can need any more: entries older than keepLog before now and
// before the oldest span open. g.mu is held.
func (g *gpus) trim(l *devLog, now time.Time) {
	cut := now.Add(-keepLog)
	if !g.oldest.IsZero() && g.oldest.Add(-keepLog).Before(cut) {
		cut = g.oldest.Add(-keepLog)
	}
	if i := slices.IndexFunc(l.reads, func(r pidRead) bool { return !r.until.Before(cut) }); i > 0 {
		l.reads = slices.Delete(l.reads, 0, i)
	}
	if i := slices.IndexFunc(l.power, func(r powerRead) bool { return !r.at.Before(cut) }); i > 0 {
		l.power = slices.Delete(l.power, 0, i)
	}
	l.util = slices.DeleteFunc(l.util, func(u utilRead) bool { return u.at.Before(cut) })
}

// seenBetween calls f with every run of process-list reads of device i that overlaps
// [from, to]. g.mu is held.
func (g *gpus) seenBetween(i int, from, to time.Time, f func(pidRead)) {
	if i >= len(g.logs) {
		return
	}
	for _, r := range g.logs[i].reads {
		if !r.until.Before(from) && !r.at.After(to) {
			f(r)
		}
	}
}

// sampledBetween reports whether every device's sampler read its process list within
// [from, to].
func (g *gpus) sampledBetween(from, to time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range g.devs {
		n := 0
		g.seenBetween(i, from, to, func(pidRead) { n++ })
		if n == 0 {
			return false
		}
	}
	return true
}

// meanPower is device i's mean instant power over [from, to]: the readings inside it, else the
// last one before it, else the first after it (ok false: none at all). g.mu is held.
func (g *gpus) meanPower(i int, from, to time.Time) (w float64, ok bool) {
	if i >= len(g.logs) {
		return 0, false
	}
	var sum float64
	var n int
	var before, after *powerRead
	for k := range g.logs[i].power {
		p := &g.logs[i].power[k]
		switch {
		case p.at.Before(from):
			before = p
		case p.at.After(to):
			if after == nil {
				after = p
			}
		default:
			sum += p.w
			n++
		}
	}
	switch {
	case n > 0:
		return sum / float64(n), true
	case before != nil:
		return before.w, true
	case after != nil:
		return after.w, true
	}
	return 0, false
}

// stopSamplers stops the samplers and waits for them (Close).
func (g *gpus) stopSamplers() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.samplers.Wait()
}
