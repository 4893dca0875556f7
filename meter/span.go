package meter

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// Work is what the backend reported about a call, passed to Span.End.
// The zero value is usable: no tokens, not failed.
type Work struct {
	Model            string
	PromptTokens     int
	CompletionTokens int
	// Failed is true when the call did not complete; the energy spent is still metered.
	Failed bool
}

// Span is one upstream call being metered, from Meter.Begin; the zero Span is not usable. End
// it once, after the last byte; later calls return the same Figure. A Span is not safe for
// concurrent use, but spans of one Meter may be used from different goroutines.
type Span struct {
	m       *Meter
	b       *backendState
	start   time.Time
	seq     uint64
	overlap bool
	ended   bool
	fig     energy.Figure
	treeErr error         // why the backend has no process to meter
	mac     *appleSpan    // a local span's readings on macOS
	c       *spanCounters // a local span's readings; nil for a remote one or one with no process
	share   spanShare     // the span's share of its tree's time, booked at span edges
	marked  bool          // Mark was called
	markOK  bool          // Mark read the tree: markCPU is its share up to the first chunk
	markCPU float64

	// A provisional figure's settlement (see Settled): settle is closed once settledFig holds
	// the final figure; nil when End's figure is final.
	settle     chan struct{}
	settledFig energy.Figure
}

// spanShare is what the edge book (see edgeBook) billed a span: its share of the tree's CPU
// time (ns) and of the wall time, whether a process vanished in an interval it shared in, and
// whether another span of its backend was open with it. alone is the tree's time (ns) in the
// intervals where the span was the only one open, union its whole time in every interval the
// span shared in: the share's bounds.
type spanShare struct {
	cpu   float64
	alone float64
	union float64
	wall  time.Duration
	short bool
	split bool
}

// spanCounters is what a local span read at Begin, and room for what End reads.
type spanCounters struct {
	hostRead bool // RAPL, host and proxy CPU time were read at Begin
	raplA    raplReading
	raplErr  error
	hostA    hostCPU
	hostErr  error
	selfA    uint64
	selfErr  error
	procsA   []procSample
	cgA      uint64
	gpuAlign *gpuAlign // Begin's end of the GPU window: its snapshot, and the counter update after it
	gpuStart time.Time // the span's edges on the GPU side's clock
	gpuEnd   time.Time

	// Room for the samples of a small tree (Ollama and a runner or two) without allocating.
	bufA, bufB [8]procSample
}

// localSpan is a Span and its counters in one allocation.
type localSpan struct {
	Span
	c spanCounters
}

// procSample is one process's CPU time at one end of a span.
type procSample struct {
	pid int
	cpu uint64 // ns
}

// Begin opens a span right before the upstream request to backend (a BackendInfo name). An
// unknown name is metered as a remote backend.
//
// It reads only what the figure can use. A remote backend, and a local one with no processes
// to meter (not found, or listening in this process), read nothing: their figure is priced by
// tokens. A local one reads the CPU clock of each process of its tree, which is walked again
// only after a new PID that may be the tree's was handed out on the host (End reads the last
// PID from /proc/sys/kernel/ns_last_pid or /proc/loadavg, the parent of each of up to 4 new
// PIDs, and whether the root's pidfd turned readable). The host's CPU time, the proxy's and RAPL are read only when a
// measured CPU figure is possible: RAPL live and no other local span open. NVML is read only
// when live, and in a goroutine, which asks each GPU's counter reader (one per GPU, whatever
// the spans: an energy read takes milliseconds on some boards) for the counter at the span's
// start and then waits (bounded) for its next update, the Begin end of the GPU window. The
// tree's CPU time read here is booked in the backend's edge book, which splits it among
// overlapping calls.
func (m *Meter) Begin(backend string) *Span {
	if m == nil {
		return &Span{start: time.Now()}
	}
	b := m.backends[backend]
	if b == nil || !b.local {
		return &Span{m: m, b: b, start: m.opts.now()}
	}
	// A span with a tree to read gets its counters in the same allocation.
	var s *Span
	var c *spanCounters
	var noProc error
	if m.mac == nil {
		noProc = b.noProcess()
	}
	if m.mac == nil && noProc == nil {
		ls := &localSpan{}
		s, c = &ls.Span, &ls.c
	} else {
		s = &Span{}
	}
	s.m, s.b, s.start = m, b, m.opts.now()
	m.mu.Lock()
	m.active++
	m.begins++
	s.seq = m.begins
	s.overlap = m.active > 1
	m.mu.Unlock()

	if m.mac != nil {
		s.mac = m.mac.begin(m, s)
		s.start = m.opts.now()
		return s
	}
	if s.treeErr = noProc; s.treeErr != nil {
		return s // priced by tokens: nothing to read
	}
	s.b.edges.mu.Lock()
	c.procsA, c.cgA, s.treeErr = m.sampleTree(s.b, c.bufA[:0], false)
	if s.treeErr == nil {
		m.book(s.b, s, true, c.procsA, c.cgA, m.opts.now())
	}
	s.b.edges.mu.Unlock()
	if s.treeErr != nil {
		return s
	}
	s.c = c
	if m.gpu != nil {
		procs := c.procsA
		c.gpuAlign = m.gpu.begin(func(pid uint32) bool {
			return slices.ContainsFunc(procs, func(p procSample) bool { return uint32(p.pid) == pid })
		})
	}
	if m.rapl != nil && !s.overlap {
		c.hostRead = true
		c.selfA, c.selfErr = m.selfCPU()
		c.hostA, c.hostErr = m.proc.hostTimes()
		c.raplA, c.raplErr = m.rapl.read()
	}
	s.start = m.opts.now()
	if c.gpuAlign != nil {
		c.gpuStart = c.gpuAlign.start // its own clock's, taken before its snapshot began
	}
	return s
}

// End closes the span after the last byte of the response and returns its Figure. It costs a
// few system calls for a local backend whose process tree did not change (more when it did:
// the tree is walked again) and no I/O for a remote one. It reads no NVML counter and never
// waits for one: when the backend used a GPU whose counter has not updated past the span's end,
// its figure is provisional (the counter up to its last update seen, instant power since, with
// bounds that hold the settled figure), and Settled gives the settled one once the counter
// updates, read in the background. Options.SettleInline makes End wait for it instead: for
// Begin's and End's snapshots (NVML's reads queue), then for the update, at most
// defaultNVMLWait (250 ms) from when that wait begins.
func (s *Span) End(w Work) energy.Figure {
	if s.ended {
		return s.fig
	}
	s.ended = true
	in := spanSample{PromptTokens: w.PromptTokens, CompletionTokens: w.CompletionTokens}
	m := s.m
	local := s.b != nil && s.b.local
	in.JPerPrompt, in.JPerCompletion = priceTokens(m, s.b, w.Model, local)
	if !local {
		s.fig = finish(in)
		return s.fig
	}
	in.Local = true
	end := m.opts.now()
	if s.c != nil && s.c.gpuAlign != nil {
		s.c.gpuEnd = m.gpu.now() // the span's end, before any read
	}
	in.Wall = end.Sub(s.start)
	if s.c != nil && s.c.gpuAlign != nil {
		// The GPU side's window began when its snapshot was booked, a moment before the span's
		// start: the wall time that bounds the GPU part is that window's.
		in.Wall = max(in.Wall, s.c.gpuEnd.Sub(s.c.gpuStart))
	}
	in.CPUWatts, in.GPUWatts = m.opts.CPUWattsPerCore, m.opts.GPUWatts
	if s.treeErr != nil {
		m.closeSpan(s)
		in.HostJPerToken = m.hostJPerToken(w.Model)
		s.fig = finish(in) // no tree: priced by tokens, reason no-process
		return s.fig
	}
	if s.mac != nil {
		m.mac.end(m, s, &in)
		in.Overlap = m.closeSpan(s)
		s.fig = finish(in)
		s.logSpan(&in)
		return s.fig
	}

	e := endReadings{end: end}
	s.readEnd(&e)
	in.Overlap = m.closeSpan(s)
	s.addCPU(&in, &e)
	s.addTree(&in, &e)
	gpu := s.addGPU(&in, &e)
	s.fig = finish(in)
	s.logSpan(&in)
	if s.c.gpuAlign == nil {
		m.learn(w, s.fig)
		return s.fig
	}
	if !in.GPUProvisional {
		// Final as it stands: End's snapshot is not needed. Book the end; read nothing.
		m.gpu.spanEnded(s.c.gpuEnd)
		m.gpu.done(s.c.gpuAlign)
		m.learn(w, s.fig)
		return s.fig
	}
	// The counter has not updated past the span's end: settle in the background, off the
	// request path, unless the configuration wants the final figure inline.
	s.settle = make(chan struct{})
	if !m.gpu.track() {
		// Closed: nothing more is read; End's figure stays as it is.
		s.settledFig = s.fig
		m.gpu.spanEnded(s.c.gpuEnd)
		m.gpu.done(s.c.gpuAlign)
		close(s.settle)
		return s.fig
	}
	go s.settleGPU(in, e.procs, gpu, w)
	if m.opts.SettleInline {
		s.fig, _ = s.Settled(context.Background())
	}
	return s.fig
}

// settleGPU makes the settled figure of a span whose End figure was provisional: End's
// snapshot (every device's processes, the used devices' energy), then the wait for the counter's
// next update, and the GPU part again from them (gpus.attribute). in is End's sample; ev is the
// evidence an exact zero needs, as End read it.
func (s *Span) settleGPU(in spanSample, endProcs []procSample, ev gpuEvidence, w Work) {
	m, c := s.m, s.c
	defer m.gpu.bg.Done() // last: close may shut NVML down once it is done
	defer close(s.settle)
	defer m.gpu.done(c.gpuAlign)
	var snap gpuSnap // End's snapshot: read here, off the request path, so no span carries one
	m.gpu.end(c.gpuAlign, &snap, c.gpuEnd)
	inTree := treeOf(c.procsA, endProcs)
	r := m.gpu.attribute(c.gpuAlign, &snap, inTree, c.gpuStart, c.gpuEnd)
	in.GPUProvisional = false
	s.putGPU(&in, r, ev, &snap)
	s.settledFig = finish(in)
	m.learn(w, s.settledFig)
}

// Settled returns the span's final figure: the one End returned when it was not provisional,
// else the figure once NVML's counter has updated past the span's end, waiting for that (at most
// a few update periods) or for ctx. Call it after End, from any goroutine, any number of times;
// on ctx's end it returns End's figure with ctx's error.
func (s *Span) Settled(ctx context.Context) (energy.Figure, error) {
	if s.settle == nil {
		return s.fig, nil
	}
	select {
	case <-s.settle:
		return s.settledFig, nil
	case <-ctx.Done():
		return s.fig, ctx.Err()
	}
}

// treeOf reports whether a PID is one of the tree's, as read at Begin or at End.
func treeOf(a, b []procSample) func(uint32) bool {
	return func(pid uint32) bool {
		for _, ps := range [2][]procSample{a, b} {
			for _, p := range ps {
				if uint32(p.pid) == pid {
					return true
				}
			}
		}
		return false
	}
}

// hostTokens is what this host measured for one model: joules and tokens (in output tokens).
type hostTokens struct{ joules, tokens float64 }

// learn keeps a measured, whole figure of a completed call as this host's J per token for its
// model, for the calls whose processes cannot be found (hostJPerToken).
func (m *Meter) learn(w Work, f energy.Figure) {
	tok := tokenWeight(w.PromptTokens, w.CompletionTokens)
	if w.Failed || w.Model == "" || tok <= 0 || !f.Measured() || f.Coverage != energy.CoverageWhole {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.perToken == nil {
		m.perToken = map[string]hostTokens{}
	}
	h := m.perToken[w.Model]
	h.joules += f.Joules
	h.tokens += tok
	m.perToken[w.Model] = h
}

// hostJPerToken is this host's measured J per output token for model; 0 when it has none.
func (m *Meter) hostJPerToken(model string) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.perToken[model]
	if !ok || h.tokens <= 0 || h.joules <= 0 {
		return 0
	}
	return h.joules / h.tokens
}

// endReadings is what End reads at a local span's end.
type endReadings struct {
	end        time.Time // the span's end
	measureCPU bool      // RAPL, host and proxy CPU time were read at both ends
	rapl       raplReading
	raplErr    error
	host       hostCPU
	hostErr    error
	self       uint64
	selfErr    error
	procs      []procSample // in the span's bufB
	cg         uint64
	treeErr    error
}

// readEnd reads the span's end: host-wide counters first, tightest around the span; then the
// tree. A span that began since this one did makes the CPU part an estimate whatever RAPL
// says: not read.
func (s *Span) readEnd(e *endReadings) {
	m, c := s.m, s.c
	e.measureCPU = c.hostRead && !m.begunSince(s)
	if e.measureCPU {
		e.rapl, e.raplErr = m.rapl.read()
		e.host, e.hostErr = m.proc.hostTimes()
		e.self, e.selfErr = m.selfCPU()
	}
	s.b.edges.mu.Lock()
	e.procs, e.cg, e.treeErr = m.sampleTree(s.b, c.bufB[:0], true)
	if e.treeErr == nil {
		m.book(s.b, s, false, e.procs, e.cg, m.opts.now())
	} else {
		s.b.edges.leave(s)
	}
	s.b.edges.mu.Unlock()
}

// addCPU puts the RAPL delta, or why there is none, into in, and the host's and the proxy's CPU
// time for the 99% rule.
func (s *Span) addCPU(in *spanSample, e *endReadings) {
	m, c := s.m, s.c
	switch {
	case m.rapl == nil:
		in.RAPLErr = m.raplWhy
	case !e.measureCPU:
		// Overlapped (in.Overlap is set): the RAPL delta could not have been this span's.
	case c.raplErr != nil:
		in.RAPLErr = c.raplErr
	case e.raplErr != nil:
		in.RAPLErr = e.raplErr
	default:
		in.RAPLJoules, in.RAPLErr = m.rapl.joules(c.raplA, e.rapl)
		in.RAPLGap = max(s.start.Sub(c.raplA.at), 0) + max(e.rapl.at.Sub(e.end), 0)
	}
	if !e.measureCPU {
		return
	}
	in.HostErr = errors.Join(c.hostErr, e.hostErr)
	if in.HostErr == nil {
		in.HostBusy = time.Duration(e.host.busy - min(e.host.busy, c.hostA.busy))
	}
	if c.selfErr == nil && e.selfErr == nil && e.self >= c.selfA {
		in.ProxyCPU = time.Duration(e.self - c.selfA)
	} else if in.HostErr == nil {
		in.HostErr = errors.Join(c.selfErr, e.selfErr, errors.New("proxy CPU time went backwards"))
	}
}

// addTree puts the tree's CPU time over the span into in, as the edge book billed it: the
// cgroup's delta, or the sum of its processes' (short when one vanished); when other spans of
// the backend were open with this one, only this span's share of it, and its share of the wall
// time.
func (s *Span) addTree(in *spanSample, e *endReadings) {
	if e.treeErr != nil {
		return
	}
	in.TreeFound = true
	in.TreeCPU, in.TreeShort = time.Duration(s.share.cpu), s.share.short
	if s.b != nil && s.c != nil {
		in.Cores = s.m.coresOf(s.b, s.c.procsA, e.procs)
		// A tick per process read at each end (a cgroup's usage_usec: a microsecond).
		if s.b.cgroup != "" {
			in.CPUSlack = 2 * time.Microsecond
		} else {
			in.CPUSlack = time.Duration(len(s.c.procsA)+len(e.procs)) * time.Duration(tickNs)
		}
	}
	if s.marked && s.markOK {
		in.Marked, in.MarkCPU = true, time.Duration(s.markCPU)
	} else if s.marked {
		in.MarkUnread = true // the split says so, rather than that a phase was empty
	}
	if s.share.split {
		in.Split, in.WallShare = true, s.share.wall
		in.TreeAlone, in.TreeUnion = time.Duration(s.share.alone), time.Duration(s.share.union)
	}
}

// gpuEvidence is what End read for an exact GPU zero: whether a process of the tree holds a GPU
// device node, and whether every process's descriptors could be read.
type gpuEvidence struct{ held, known bool }

// addGPU puts the GPU side into in: NVML's attribution when live (as End knows it at once: a
// provisional figure when its counter has not updated past the span's end), else whether a
// process of the tree holds a GPU device open. It reads no NVML counter.
func (s *Span) addGPU(in *spanSample, e *endReadings) (ev gpuEvidence) {
	m, c := s.m, s.c
	switch {
	case !in.TreeFound:
	case m.gpu != nil:
		r := m.gpu.provisional(c.gpuAlign, treeOf(c.procsA, e.procs), c.gpuStart, c.gpuEnd)
		if !r.Used {
			ev.held, ev.known = s.treeHoldsGPU(e.procs)
		}
		s.putGPU(in, r, ev, nil)
	case m.hostGPU:
		// No NVML: a process that holds no GPU device open had no GPU time.
		held, known := s.treeHoldsGPU(e.procs)
		switch {
		case held:
			in.GPUUsed = true
			in.GPUErr = m.gpuErr
		case !known:
			in.GPUUnknown = true
		}
	}
	return ev
}

// putGPU puts NVML's attribution r into in. A tree in no NVML list gets an exact zero only with
// evidence as well: no process of the tree holds a GPU device node, every descriptor could be
// read, every process list could be read, and every PID NVML listed (at Begin, by the samplers,
// at End when end is not nil) is a process of our /proc (NVML lists host PIDs, which a
// container's /proc does not show).
func (s *Span) putGPU(in *spanSample, r gpuResult, ev gpuEvidence, end *gpuSnap) {
	c := s.c
	in.GPUUsed, in.GPUErr, in.GPUJoules, in.GPUShare = r.Used, r.Err, r.Joules, r.Share
	if r.Used && r.Share < dominantShare {
		// Another user of the device: no GPU figure, not even the power model's in place of a
		// counter that failed (gpu-shared).
		in.GPUErr = nil
	}
	in.GPUVanished, in.GPUBusy = r.Vanished, r.Busy
	in.GPULow, in.GPUHigh, in.GPUSubPeriod = r.Low, r.High, r.SubPeriod
	// An overlapped span has no GPU figure whatever the counter says: nothing to settle, so
	// its End reads no counter.
	in.GPULimitW, in.GPUProvisional = r.LimitW, r.Provisional && !in.Overlap
	if !r.Used {
		in.GPUUnknown = ev.held || !ev.known || r.Unknown || s.m.foreignGPUPIDs(s.m.gpu.seenPIDs(c.gpuAlign, end, c.gpuStart, c.gpuEnd))
	}
}

// treeHoldsGPU reports whether a process of the tree holds a GPU device node open, and whether
// that is known: every process's descriptors could be read.
func (s *Span) treeHoldsGPU(procs []procSample) (held, known bool) {
	known = true
	for _, p := range procs {
		used, err := s.b.usesGPU(s.m.proc, p.pid)
		if used {
			return true, true
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			known = false // unreadable: it may hold one
		}
	}
	return false, known
}

// foreignGPUPIDs reports whether NVML listed, at some moment of the span, a PID that is no
// process of our /proc: one of another PID namespace, which may be ours under another number.
func (m *Meter) foreignGPUPIDs(pids []uint32) bool {
	for _, p := range pids {
		if _, err := m.proc.stat(int(p)); err != nil {
			return true
		}
	}
	return false
}

// logSpan logs what a local span's figure was made of, at debug level.
func (s *Span) logSpan(in *spanSample) {
	if e := s.m.log.Debug(); e.Enabled() {
		e.Str("backend", s.b.info.Name).Dur("wall", in.Wall).Dur("tree_cpu", in.TreeCPU).
			Dur("proxy_cpu", in.ProxyCPU).Dur("host_busy", in.HostBusy).Bool("overlap", in.Overlap).
			Float64("joules", s.fig.Joules).Str("grade", string(s.fig.Grade)).Str("reason", s.fig.Reason).
			Msg("meter: span")
	}
}

// begunSince reports whether another local span began after s.
func (m *Meter) begunSince(s *Span) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.begins != s.seq
}

// closeSpan takes s off the open local spans and reports whether another local span overlapped
// it: open when it began, or begun since.
func (m *Meter) closeSpan(s *Span) (overlap bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	overlap = s.overlap || m.begins != s.seq
	m.active--
	return overlap
}
