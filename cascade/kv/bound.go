package kv

import (
	"cmp"
	"context"
	"slices"
	"sync/atomic"
)

// The store's total bound. MaxEntries bounds one tenant and model's collection, but a glob
// route lets a client name any model, and each name learned gets its own collection. So the
// stage also bounds the sum over collections (MaxTotalEntries) and their number
// (MaxCollections):
//
//   - an entry is inserted with a collection bound of min(MaxEntries, its share: MaxTotalEntries
//     over the number of collections, at least minShare);
//   - beyond MaxCollections, the least recently used collection other than the one written is
//     dropped whole, from memory and from disk;
//   - while the total is above MaxTotalEntries, the other collections are trimmed to their share,
//     oldest entries first, the least recently used collection first; if that is not enough (the
//     shares' floor), the least recently used are dropped whole.
//
// Entries are bounded in bytes as well (MaxBytes, entry.size): while the store holds more, after
// an insert, the other collections are trimmed to their byte share (MaxBytes over the number
// of collections), oldest entries first, the least recently used collection first; then,
// if that is not enough, emptied in the same order; last, the collection written loses its
// oldest entries, never the one just inserted.
//
// "Used" is a query or an insert: a collection clients still ask is kept; one made by a name
// nobody repeats goes first.

// minShare is the smallest collection bound the even share sets.
const minShare = 64

// useClock orders collection uses; a larger stamp is a later use.
type useClock struct{ now atomic.Uint64 }

func (c *useClock) tick() uint64 { return c.now.Add(1) }

// touchLocked stamps the use of the collection under k. The caller holds s.mu, for reading at
// least.
func (s *Stage) touchLocked(k colID) {
	if u := s.used[k]; u != nil {
		u.Store(s.clock.tick())
	}
}

// share is the bound an insert into a collection uses: MaxEntries, or less when the collections
// share MaxTotalEntries.
func (s *Stage) share() int {
	s.mu.RLock()
	n := len(s.cols)
	s.mu.RUnlock()
	c := min(s.maxEntries, s.maxTotal)
	if n > 0 {
		c = min(c, max(s.maxTotal/n, minShare))
	}
	return c
}

// insertBounded inserts e into col within its share, then brings the store within its total
// bounds (never evicting from col beyond its share). It returns col's evicted entries; what
// other collections lose is deleted here.
func (s *Stage) insertBounded(ctx context.Context, col *collection, e *entry) []*entry {
	evicted, added := col.insert(e, s.share())
	n := -len(evicted)
	if added {
		n++ // a replaced entry leaves the total as it was
	}
	if s.total.Add(int64(n)) > int64(s.maxTotal) || s.colCount() > s.maxCols {
		s.bound(ctx, col)
	}
	if s.sizeAll() > s.maxBytes {
		evicted = append(evicted, s.boundBytes(ctx, col)...)
	}
	return evicted
}

// sizeAll is the bytes of all collections' entries.
func (s *Stage) sizeAll() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var n int64
	for _, c := range s.cols {
		n += c.size()
	}
	return n
}

// boundBytes brings the store within MaxBytes (see above) and returns what keep lost; what
// the other collections lose is deleted here.
func (s *Stage) boundBytes(ctx context.Context, keep *collection) []*entry {
	s.mu.RLock()
	others := make([]usedCol, 0, len(s.cols))
	var total int64
	for k, c := range s.cols {
		total += c.size()
		if c == keep {
			continue
		}
		var use uint64
		if u := s.used[k]; u != nil {
			use = u.Load()
		}
		others = append(others, usedCol{k, c, use})
	}
	share := s.maxBytes / int64(max(len(s.cols), 1))
	s.mu.RUnlock()
	slices.SortFunc(others, func(a, b usedCol) int { return cmp.Compare(a.use, b.use) })
	n := 0
	for _, floor := range []int64{share, 0} {
		for _, o := range others {
			if total <= s.maxBytes {
				break
			}
			ev := o.c.trimBytes(max(floor, o.c.size()-(total-s.maxBytes)), 0)
			total -= entriesSize(ev)
			n += len(ev)
			s.deleteEvicted(ctx, o.c, ev)
		}
	}
	var mine []*entry
	if total > s.maxBytes {
		mine = keep.trimBytes(keep.size()-(total-s.maxBytes), 1)
		n += len(mine)
	}
	s.total.Add(-int64(n))
	return mine
}

func entriesSize(es []*entry) int64 {
	var n int64
	for _, e := range es {
		n += e.size()
	}
	return n
}

func (s *Stage) colCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.cols)
}

type usedCol struct {
	k   colID
	c   *collection
	use uint64
}

// bound drops and trims collections other than keep, least recently used first, until the
// number of collections and the total entries are within their bounds. It recounts the total.
func (s *Stage) bound(ctx context.Context, keep *collection) {
	s.mu.Lock()
	others := make([]usedCol, 0, len(s.cols))
	for k, c := range s.cols {
		if c == keep {
			continue
		}
		var use uint64
		if u := s.used[k]; u != nil {
			use = u.Load()
		}
		others = append(others, usedCol{k, c, use})
	}
	slices.SortFunc(others, func(a, b usedCol) int { return cmp.Compare(a.use, b.use) })
	var dropped []usedCol
	for len(s.cols) > s.maxCols && len(others) > 0 {
		dropped, others = append(dropped, others[0]), others[1:]
		s.dropLocked(dropped[len(dropped)-1].k)
	}
	total := 0
	for _, c := range s.cols {
		total += c.len()
	}
	share := max(s.maxTotal/max(len(s.cols), 1), minShare)
	for i := 0; total > s.maxTotal && i < len(others); i++ {
		o := others[i]
		if o.c.len() > share {
			ev := o.c.trim(share)
			total -= len(ev)
			s.mu.Unlock()
			s.deleteEvicted(ctx, o.c, ev)
			s.mu.Lock()
		}
	}
	for total > s.maxTotal && len(others) > 0 {
		o := others[0]
		others = others[1:]
		if s.cols[o.k] != o.c {
			continue
		}
		total -= o.c.len()
		dropped = append(dropped, o)
		s.dropLocked(o.k)
	}
	s.total.Store(int64(total))
	dim := s.dim
	s.mu.Unlock()
	n := 0
	for _, v := range dropped {
		n += v.c.len()
		if s.db == nil {
			continue
		}
		name := colName{KV: storeVersion, Embedder: s.emb.ID(), Dim: dim, Tenant: v.k.tenant, Model: v.k.model}.String()
		if err := s.db.DeleteCollection(name); err != nil {
			s.log.Warn().Err(err).Msg("kv: dropped collection not removed from disk")
		}
	}
	s.stats.evicted.Add(int64(n))
	s.stats.droppedCols.Add(int64(len(dropped)))
}

func (s *Stage) dropLocked(k colID) {
	delete(s.cols, k)
	delete(s.used, k)
}

// trimBytes evicts the oldest entries while the collection holds more than max bytes and more
// than keep entries, and returns them.
func (c *collection) trimBytes(max int64, keep int) []*entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.evictLocked(func() bool { return c.bytes > max && len(c.byID) > keep })
}

// trim evicts the oldest entries beyond max and returns them. It is insert's eviction loop
// (index.go) without the insert.
func (c *collection) trim(max int) []*entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trimLocked(max)
}
