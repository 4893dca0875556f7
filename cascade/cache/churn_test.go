package cache

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// liveHeap is the heap's live bytes after two collections.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A full cache under churn (every answer new, the oldest evicted) holds about its entries and
// no more, however much time passes. The expiring LRU it used before kept each of 100 expiry
// buckets' maps at the largest count it ever held (Go maps do not shrink): up to 100 maps of
// max_entries slots, tens of MB at 10,000 entries that no byte bound counted. The bound here
// is five times what the entries themselves take, so only retained bookkeeping fails it.
func TestChurnRetainsOnlyTheEntries(t *testing.T) {
	const n = 10000
	ans := keep(answerOf("x"), 0)
	key := func(i int) string { return fmt.Sprintf("%064x", i) }
	before := liveHeap()
	s := New(n, time.Second) // entries expire after a second, and the churn outlives that
	for i := range n {
		s.add(key(i), entry{ans: ans, size: 1})
	}
	full := liveHeap() - before
	next := n
	for range 150 { // at least 1.5 s: the old LRU moved to a new expiry bucket every 10 ms
		for range n {
			s.add(key(next), entry{ans: ans, size: 1})
			next++
		}
		time.Sleep(10 * time.Millisecond)
	}
	after := liveHeap() - before
	runtime.KeepAlive(s)
	t.Logf("live heap over the process before: %.1f MB with %d entries, %.1f MB after %d more added", float64(full)/(1<<20), n, float64(after)/(1<<20), next-n)
	if after > 5*full {
		t.Fatalf("after %d answers through a cache of %d, it holds %.1f MB; %.1f MB when first full", next-n, n, float64(after)/(1<<20), float64(full)/(1<<20))
	}
}
