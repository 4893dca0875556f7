package main

import (
	"os"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync/atomic"
)

// gcHeadroom is how far the heap may grow past its live part before the garbage collector runs,
// at least. Go's default (GOGC=100, a 4 MiB minimum) lets it grow by the live heap only: with
// eoc-proxy's few MiB of live heap, the collector runs many times a second under cache hits
// and takes a large share of a hit's CPU (scripts/bench-ab.sh measures it). Above
// gcHeadroom of live heap (a kv store with many entries, say) the default applies unchanged,
// so the extra memory is bounded by gcHeadroom.
const gcHeadroom = 32 << 20

// maxGCPercent bounds the percentage for a nearly empty heap.
const maxGCPercent = 3200

// gcPercent is the GOGC that gives a live heap of live bytes gcHeadroom to grow into, or the
// default, 100, when that is more.
func gcPercent(live uint64) int {
	if live == 0 || live >= gcHeadroom {
		return 100
	}
	return int(min(gcHeadroom*100/live, maxGCPercent))
}

// gcTuner sets GOGC from the live heap after every collection (a cleanup on a sentinel that
// each collection frees runs it, then arms the next), unless the operator set GOGC.
type gcTuner struct {
	sample  []rtmetrics.Sample
	tuned   atomic.Int64 // collections tuned after, for tests
	stopped atomic.Bool
}

// tuneGC starts the tuner, or returns nil when GOGC is set in the environment (it wins).
func tuneGC() *gcTuner {
	if _, set := os.LookupEnv("GOGC"); set {
		return nil
	}
	t := &gcTuner{sample: tuneSample()}
	t.tune()
	return t
}

func tuneSample() []rtmetrics.Sample { return []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}} }

// gcSentinel is freed by the next collection; it is large enough not to share a tiny block.
type gcSentinel struct{ _ [32]byte }

// stop ends the tuning at the next collection; GOGC keeps its last value.
func (t *gcTuner) stop() { t.stopped.Store(true) }

func (t *gcTuner) tune() {
	if t.stopped.Load() {
		return
	}
	rtmetrics.Read(t.sample)
	var live uint64
	if t.sample[0].Value.Kind() == rtmetrics.KindUint64 {
		live = t.sample[0].Value.Uint64()
	}
	debug.SetGCPercent(gcPercent(live))
	t.tuned.Add(1)
	runtime.AddCleanup(&gcSentinel{}, func(t *gcTuner) { t.tune() }, t)
}
