package meter

import (
	"errors"
	"fmt"
	"time"
)

// The Apple Silicon rules, pure functions over readings so that a table test states each one.

// threadLeaveSleeps are the sleeps a CPU energy read tries, in turn, until the reading thread
// was seen to leave its core. The kernel adds a thread's energy to its process's count only
// when the thread leaves a core, so a read that did not see its own thread leave holds up to a
// quantum of what came before and lacks its own tail.
var threadLeaveSleeps = [...]time.Duration{50 * time.Microsecond, 200 * time.Microsecond, time.Millisecond, 5 * time.Millisecond}

// railHold is how long the GPU rail may hold one value while the GPU is busy and still count
// as current: it republishes in steps of 300–600 ms under load.
const railHold = time.Second

// errThreadStayed says the reading thread was not seen to leave its core: the processes'
// energy counts may be short, so the read is refused and the call keeps its estimate.
var errThreadStayed = errors.New("meter: the reading thread was not seen to leave its core")

// errRailStale says the GPU rail held one value for railHold while the GPU was busy.
var errRailStale = fmt.Errorf("%w: the GPU rail held for %v under load", ErrCounterStale, railHold)

// leaveCore sleeps, 50 µs, then 200 µs, 1 ms, 5 ms, until own (the reading thread's own CPU
// energy, nJ) rose across a sleep. Only then may the processes be read. It fails with
// errThreadStayed when no sleep made the count rise.
func leaveCore(own func() (uint64, error), sleep func(time.Duration)) error {
	before, err := own()
	if err != nil {
		return err
	}
	for _, d := range threadLeaveSleeps {
		sleep(d)
		after, err := own()
		if err != nil {
			return err
		}
		if after > before {
			return nil
		}
		before = after
	}
	return errThreadStayed
}

// railNext reads the GPU rail at its next change: it polls read until the value differs from
// the first one. A rail that held for railHold is current only if the GPU was idle meanwhile
// (busy reports whether any client's GPU time advanced since the wait began); held under load
// it is stale.
func railNext(read func() (uint64, error), busy func() bool, sleep func(time.Duration), now func() time.Time, poll time.Duration) (uint64, error) {
	first, err := read()
	if err != nil {
		return 0, err
	}
	t0 := now()
	for {
		sleep(poll)
		v, err := read()
		if err != nil {
			return 0, err
		}
		if v != first {
			return v, nil
		}
		if now().Sub(t0) >= railHold {
			if busy() {
				return 0, errRailStale
			}
			return v, nil
		}
	}
}

// gpuClient is one IOAccelerator user client: its registry entry, its creator's PID and its
// accumulated GPU time (ns, the sum of its AppUsage entries).
type gpuClient struct {
	id  uint64
	pid int
	ns  uint64
}

// appleGPU applies the GPU rule to the clients seen at both ends of a span and the rail's
// readings (nJ):
//
//   - the tree used no GPU time: GPU energy exactly 0, whatever the rail did;
//   - a client of the tree vanished mid-span: no GPU figure (its time is unknown);
//   - the tree had ≥ 99% of all clients' GPU time (the rules' dominantShare): the rail's delta,
//     measured;
//   - otherwise no GPU figure (gpu-shared). The rail is never split by GPU time: Share carries
//     the tree's share for the rules to refuse, never to scale by.
//
// A client of another process that vanished leaves the tree's share unknown: Share 0.
func appleGPU(a, b []gpuClient, inTree func(pid int) bool, railA, railB uint64, railErr error) gpuResult {
	r := gpuResult{Share: 1}
	var tree, all uint64
	othersGone := false
	for _, x := range a {
		found := false
		for _, y := range b {
			if y.id == x.id {
				found = true
				if y.ns >= x.ns {
					d := y.ns - x.ns
					all += d
					if inTree(y.pid) {
						tree += d
					}
				} else if inTree(x.pid) {
					r.Vanished = true // the entry was reused
				} else {
					othersGone = true
				}
				break
			}
		}
		if !found {
			if inTree(x.pid) {
				r.Vanished = true
			} else {
				othersGone = true
			}
		}
	}
	for _, y := range b {
		known := false
		for _, x := range a {
			if x.id == y.id {
				known = true
				break
			}
		}
		if !known { // created within the span: all its time is the span's
			all += y.ns
			if inTree(y.pid) {
				tree += y.ns
			}
		}
	}
	if tree == 0 && !r.Vanished {
		return r // no GPU time: exactly 0
	}
	r.Used = true
	if othersGone || all == 0 {
		r.Share = 0
	} else {
		r.Share = float64(tree) / float64(all)
	}
	switch {
	case railErr != nil:
		r.Err = railErr
	case railB < railA:
		r.Err = errors.New("gpu rail: energy went backwards")
	default:
		r.Joules = float64(railB-railA) / 1e9
	}
	return r
}
