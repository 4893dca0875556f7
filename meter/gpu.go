package meter

import (
	"errors"
	"fmt"
	"slices"
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
}

// gpuMaxWatts bounds a GPU's rate when its enforced power limit cannot be read: above the
// largest boards' limits (B200: 1000 W), so it errs towards trust only for absurd counts.
const gpuMaxWatts = 1500.0

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
	now     func() time.Time
	sleep   func(time.Duration)
	closeFn func() error
}

// gpuAlign is the Begin end of a span's GPU window, aligned to a counter update as End's is:
// per device, the value of the first update after Begin's snapshot and when it was seen,
// found in the background (alignBegin) so that the call is not delayed. val, at and err are
// written before done is closed.
type gpuAlign struct {
	done chan struct{}
	val  []uint64
	at   []time.Time
	err  error
}

// alignBegin starts waiting, bounded by g.wait, for each device's counter to move past its
// reading in begin.
func (g *gpus) alignBegin(begin *gpuSnap) *gpuAlign {
	n := len(g.devs)
	a := &gpuAlign{done: make(chan struct{}), val: make([]uint64, n), at: make([]time.Time, n)}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	go func() {
		defer close(a.done)
		a.err = g.nextUpdate(begin, all, a.val, a.at)
	}()
	return a
}

// nextUpdate waits, bounded by g.wait, until the counter of each device in devs has moved past
// its reading in from, and puts the new value and when it was seen in val[i] and at[i].
func (g *gpus) nextUpdate(from *gpuSnap, devs []int, val []uint64, at []time.Time) error {
	for _, i := range devs {
		if from.eerr[i] != nil {
			return fmt.Errorf("gpu %d %s: %w", i, g.devs[i].Name(), from.eerr[i])
		}
	}
	done := make([]bool, len(g.devs))
	deadline := g.now().Add(g.wait)
	for {
		all := true
		for _, i := range devs {
			if done[i] {
				continue
			}
			e, err := g.devs[i].EnergyMJ()
			if err != nil {
				return fmt.Errorf("gpu %d %s: %w", i, g.devs[i].Name(), err)
			}
			if e != from.energy[i] {
				val[i], at[i], done[i] = e, g.now(), true
				continue
			}
			all = false
		}
		if all {
			return nil
		}
		if !g.now().Before(deadline) {
			return fmt.Errorf("nvml: %w within %v", ErrCounterStale, g.wait)
		}
		g.sleep(g.poll)
	}
}

// gpuSnap is every device's energy and processes at one instant.
type gpuSnap struct {
	energy []uint64
	eerr   []error
	pids   [][]uint32
	at     time.Time // when the reads were done
}

func (g *gpus) snapshot(s *gpuSnap) {
	n := len(g.devs)
	if cap(s.energy) < n {
		s.energy, s.eerr, s.pids = make([]uint64, n), make([]error, n), make([][]uint32, n)
	}
	s.energy, s.eerr, s.pids = s.energy[:n], s.eerr[:n], s.pids[:n]
	for i, d := range g.devs {
		s.energy[i], s.eerr[i] = d.EnergyMJ()
		p, err := d.PIDs(s.pids[i][:0])
		if err != nil {
			p = p[:0]
		}
		s.pids[i] = p
	}
	s.at = g.now()
}

// gpuResult is what the GPU side of a span comes to, in spanSample's terms.
type gpuResult struct {
	Used     bool
	Err      error
	Joules   float64
	Share    float64
	Vanished bool
	Busy     float64 // GPU-equivalents busy over the span, for the power model; 0 when unknown
	LimitW   float64 // the used boards' enforced power limits, summed: the bound's power
}

// attribute works out the GPU side of a span: which devices the tree used, whether it was their
// sole user, and the energy they spent. It waits, bounded by g.wait, for each used device's
// energy counter to update after the span ended, so the delta is not short.
func (g *gpus) attribute(begin, end *gpuSnap, align *gpuAlign, inTree func(uint32) bool, start time.Time) gpuResult {
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
	r.Joules, r.LimitW, r.Err = g.joules(end, align, used)
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

// joules returns the used devices' energy over the span, in J: from the first update of each
// counter after Begin (align) to its first update after End's reading (waited for here, bounded
// by g.wait), so neither end of the window lies a period outside the span. A span in which a
// counter did not update (shorter than its period) has no window; a counter that went
// backwards, or counted faster than the board's enforced power limit allows over the window,
// is an error.
func (g *gpus) joules(end *gpuSnap, align *gpuAlign, used []int) (joules, limits float64, err error) {
	<-align.done // bounded by g.wait
	if align.err != nil {
		return 0, 0, fmt.Errorf("after Begin: %w", align.err)
	}
	for _, i := range used {
		switch {
		case align.val[i] <= end.energy[i]:
		case align.at[i].After(end.at):
			// Begin's update came after End's reading: the span is shorter than the update period.
			return 0, 0, fmt.Errorf("gpu %d %s: %w: no update within the span", i, g.devs[i].Name(), ErrCounterStale)
		default:
			return 0, 0, fmt.Errorf("gpu %d %s: energy went backwards", i, g.devs[i].Name())
		}
	}
	final := make([]uint64, len(g.devs))
	at := make([]time.Time, len(g.devs))
	if err := g.nextUpdate(end, used, final, at); err != nil {
		return 0, 0, err
	}
	for _, i := range used {
		if final[i] < align.val[i] {
			return 0, 0, fmt.Errorf("gpu %d %s: energy went backwards", i, g.devs[i].Name())
		}
		j := float64(final[i]-align.val[i]) / 1000
		limit, err := g.devs[i].PowerLimitW()
		if err != nil || limit <= 0 {
			limit = gpuMaxWatts
		}
		// Each update is seen at most a poll late: the window is at most this long.
		window := at[i].Sub(align.at[i]) + 2*g.poll
		if j > limit*window.Seconds() {
			return 0, 0, fmt.Errorf("gpu %d %s: %w: %.3f J in %v, limit %.0f W", i, g.devs[i].Name(), ErrCounterRate, j, window, limit)
		}
		joules += j
		limits += limit
	}
	return joules, limits, nil
}

func (g *gpus) close() error {
	if g == nil || g.closeFn == nil {
		return nil
	}
	return g.closeFn()
}
