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
}

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
	sleep   func(time.Duration)
	closeFn func() error
}

// gpuSnap is every device's energy and processes at one instant.
type gpuSnap struct {
	energy []uint64
	eerr   []error
	pids   [][]uint32
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
}

// gpuResult is what the GPU side of a span comes to, in spanSample's terms.
type gpuResult struct {
	Used     bool
	Err      error
	Joules   float64
	Share    float64
	Vanished bool
	Busy     float64 // GPU-equivalents busy over the span, for the power model; 0 when unknown
}

// attribute works out the GPU side of a span: which devices the tree used, whether it was their
// sole user, and the energy they spent. It waits, bounded by g.wait, for each used device's
// energy counter to update after the span ended, so the delta is not short.
func (g *gpus) attribute(begin, end *gpuSnap, inTree func(uint32) bool, start time.Time) gpuResult {
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
	r.Joules, r.Err = g.joules(begin, end, used)
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

// joules returns the used devices' energy over the span, in J. It waits, bounded by g.wait,
// until every used counter has moved past its reading at the span's end.
func (g *gpus) joules(begin, end *gpuSnap, used []int) (float64, error) {
	final := make([]uint64, len(used))
	done := make([]bool, len(used))
	for _, i := range used {
		if begin.eerr[i] != nil || end.eerr[i] != nil {
			return 0, fmt.Errorf("gpu %d %s: %w", i, g.devs[i].Name(), errors.Join(begin.eerr[i], end.eerr[i]))
		}
	}
	deadline := time.Now().Add(g.wait)
	for {
		all := true
		for k, i := range used {
			if done[k] {
				continue
			}
			e, err := g.devs[i].EnergyMJ()
			if err != nil {
				return 0, fmt.Errorf("gpu %d %s: %w", i, g.devs[i].Name(), err)
			}
			if e != end.energy[i] {
				final[k], done[k] = e, true
				continue
			}
			all = false
		}
		if all {
			break
		}
		if !time.Now().Before(deadline) {
			return 0, fmt.Errorf("nvml: %w within %v", ErrCounterStale, g.wait)
		}
		g.sleep(g.poll)
	}
	var joules float64
	for k, i := range used {
		if final[k] < begin.energy[i] {
			return 0, fmt.Errorf("gpu %d %s: energy went backwards", i, g.devs[i].Name())
		}
		joules += float64(final[k]-begin.energy[i]) / 1000
	}
	return joules, nil
}

func (g *gpus) close() error {
	if g == nil || g.closeFn == nil {
		return nil
	}
	return g.closeFn()
}
