package meter

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// One reader per device owns every read of the device's energy counter: a read takes 3 to 16 ms
// on an H200 and NVML serialises calls, so K spans reading it each would cost K times the reads
// and queue behind each other. A span posts a want instead (the counter's value at one of its
// edges, or the counter's first update after a read) and waits for it to be answered. The
// reader keeps the device's latest reads; a want is answered from them when it can be, else
// the device's reader is started (one goroutine, while any want is unanswered) and answers it
// from the reads it makes, paced near the counter's next update (untilNextRead).

// counterRead is one read of a device's energy counter: it began at t0 and returned at t1.
type counterRead struct {
	seq    uint64
	t0, t1 time.Time
	v      uint64
	err    error
}

func (r *counterRead) mid() time.Time { return midway(r.t0, r.t1) }

// counterRec is a device's counter as its reader saw it, and the wants it has yet to answer.
// g.mu guards it.
type counterRec struct {
	running bool
	seq     uint64        // reads so far, ever (tests wait on and count it)
	reads   []counterRead // the latest, oldest first, at most keepReads
	wants   []*counterWant
}

// keepReads is how many of a device's latest counter reads its record keeps: wants are posted
// within a few reads of the read they refer to.
const keepReads = 64

// counterWant is a question to a device's reader, answered (res or err) before done is closed.
// Without update, it is the counter's value at at; with update, the counter's first update past
// base, the value read by read after (held from from on), by deadline.
type counterWant struct {
	update   bool
	at       time.Time
	after    uint64
	base     uint64
	from     time.Time
	deadline time.Time
	done     chan struct{}
	res      counterValue
	err      error
}

// counterValue is an answer: the counter's value v; when it held it (the edge asked about when
// that is known exactly, else the middle of the read that gave it; for an update, the middle of
// the last read before it and the first after it); when the read that gave it returned (the
// edge when exact); and that read's sequence number.
type counterValue struct {
	v            uint64
	at, readDone time.Time
	seq          uint64
}

// post hands w to device i's reader, answering it at once from the reads kept when it can, and
// starts the reader when it has none running. g.mu is held.
func (g *gpus) post(i int, w *counterWant) {
	if len(g.counters) != len(g.devs) {
		g.counters = make([]counterRec, len(g.devs))
	}
	w.done = make(chan struct{})
	if g.answer(i, w) {
		close(w.done)
		return
	}
	c := &g.counters[i]
	c.wants = append(c.wants, w)
	if !c.running {
		c.running = true
		g.readers.Add(1)
		go g.readCounter(i)
	}
}

// answer answers w from device i's reads kept, and reports whether it could. The value at an
// instant is that of the first read that began at or after it; it held at the instant itself
// (exact, no read late) when the read before it returned by then with the same value: the
// counter did not move between the two. An update is the first read after w.after whose value
// differs from w.base, timed at the middle of it and the last read that still gave w.base.
// g.mu is held.
func (g *gpus) answer(i int, w *counterWant) bool {
	reads := g.counters[i].reads
	if !w.update {
		for k := range reads {
			r := &reads[k]
			if r.t0.Before(w.at) {
				continue
			}
			if r.err != nil {
				w.err = r.err
				return true
			}
			w.res = counterValue{v: r.v, at: r.mid(), readDone: r.t1, seq: r.seq}
			if k > 0 {
				if l := &reads[k-1]; l.err == nil && l.v == r.v && !l.t1.After(w.at) {
					w.res.at, w.res.readDone = w.at, w.at
				}
			}
			return true
		}
		return false
	}
	last := w.from
	for k := range reads {
		r := &reads[k]
		if r.seq < w.after {
			continue
		}
		if r.seq > w.after {
			if r.err != nil {
				w.err = fmt.Errorf("gpu %d %s: %w", i, g.devs[i].Name(), r.err)
				return true
			}
			if r.v != w.base {
				w.res = counterValue{v: r.v, at: midway(last, r.mid()), readDone: r.t1, seq: r.seq}
				return true
			}
		}
		last = later(last, r.mid())
	}
	return false
}

// readCounter is device i's counter reader: it reads the counter while a want is unanswered,
// each read after the pace of untilNextRead (g.sleep: the test's clock in tests), and answers
// the wants it can after each.
func (g *gpus) readCounter(i int) {
	defer g.readers.Done()
	d := g.devs[i]
	for {
		g.mu.Lock()
		c := &g.counters[i]
		if len(c.wants) == 0 {
			c.running = false
			g.mu.Unlock()
			return
		}
		var wait time.Duration
		if n := len(c.reads); n > 0 {
			last := c.reads[n-1].t1
			wait = last.Add(g.untilNextRead(i, last, c.deadline())).Sub(g.now())
		}
		g.mu.Unlock()
		if wait > 0 {
			g.sleep(wait)
		}
		t0 := g.now()
		v, err := d.EnergyMJ()
		t1 := g.now()
		g.mu.Lock()
		g.counted(i, counterRead{t0: t0, t1: t1, v: v, err: err})
		g.mu.Unlock()
	}
}

// deadline is the earliest deadline of the updates wanted (zero: none).
func (c *counterRec) deadline() time.Time {
	var d time.Time
	for _, w := range c.wants {
		if w.update && (d.IsZero() || w.deadline.Before(d)) {
			d = w.deadline
		}
	}
	return d
}

// counted keeps a read of device i's counter, records an update it saw (when the read before
// it was within a period: one update between them, timed to within their distance), and
// answers the wants it can; an update not seen by its deadline is stale. g.mu is held.
func (g *gpus) counted(i int, r counterRead) {
	c := &g.counters[i]
	c.seq++
	r.seq = c.seq
	if n := len(c.reads); n > 0 {
		p := &c.reads[n-1]
		if p.err == nil && r.err == nil && p.v != r.v && r.mid().Sub(p.mid()) <= cmp.Or(g.period, nvmlPeriod) {
			g.seen(i, midway(p.mid(), r.mid()), r.v)
		}
	}
	c.reads = append(c.reads, r)
	if len(c.reads) > keepReads {
		c.reads = slices.Delete(c.reads, 0, 1)
	}
	kept := c.wants[:0]
	for _, w := range c.wants {
		switch {
		case g.answer(i, w):
		case w.update && !r.t1.Before(w.deadline):
			w.err = fmt.Errorf("nvml: %w within %v", ErrCounterStale, g.wait)
		default:
			kept = append(kept, w)
			continue
		}
		close(w.done)
	}
	clear(c.wants[len(kept):])
	c.wants = kept
}

// readEnergy puts into s the counter value at t of each device in devs, as their readers answer
// (every other device: errNotRead), with s.at when they held it (t when known exactly) and
// s.readDone when the reads that gave them returned.
func (g *gpus) readEnergy(s *gpuSnap, devs []int, t time.Time) {
	ws := make([]*counterWant, len(g.devs))
	g.mu.Lock()
	for _, i := range devs {
		ws[i] = &counterWant{at: t}
		g.post(i, ws[i])
	}
	g.mu.Unlock()
	s.at, s.readDone = t, t
	for i, w := range ws {
		s.energy[i], s.eerr[i], s.eseq[i] = 0, errNotRead, 0
		if w == nil {
			continue
		}
		<-w.done
		s.energy[i], s.eerr[i], s.eseq[i] = w.res.v, w.err, w.res.seq
		if w.err == nil {
			s.at, s.readDone = later(s.at, w.res.at), later(s.readDone, w.res.readDone)
		}
	}
}

// updates waits, until deadline, for the first update of the counter of each device in devs
// past its reading in from, and returns them by device.
func (g *gpus) updates(from *gpuSnap, devs []int, deadline time.Time) ([]counterValue, error) {
	for _, i := range devs {
		if from.eerr[i] != nil {
			return nil, fmt.Errorf("gpu %d %s: %w", i, g.devs[i].Name(), from.eerr[i])
		}
	}
	ws := make([]*counterWant, len(g.devs))
	g.mu.Lock()
	for _, i := range devs {
		ws[i] = &counterWant{update: true, after: from.eseq[i], base: from.energy[i], from: from.at, deadline: deadline}
		g.post(i, ws[i])
	}
	g.mu.Unlock()
	out := make([]counterValue, len(g.devs))
	var err error
	for i, w := range ws {
		if w == nil {
			continue
		}
		<-w.done
		err = cmp.Or(err, w.err)
		out[i] = w.res
	}
	return out, err
}

// devsOf lists the devices marked in mine.
func devsOf(mine []bool) []int {
	var out []int
	for i, m := range mine {
		if m {
			out = append(out, i)
		}
	}
	return out
}
