// Package cowmap is a bounded map for values made once per key and then read without a lock.
package cowmap

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Map keeps the value made for each key, up to Max keys; past Max a key's value is made on each
// use and not kept. Reads load the current map and take no lock: a write copies the map and
// replaces it, so it suits keys that are few and settle early (a metric's label tuples). The
// zero Map keeps nothing until Max is set. It is safe for concurrent use.
type Map[K comparable, V any] struct {
	Max int
	m   atomic.Pointer[map[K]V]
	mu  sync.Mutex
}

// Of returns k's value, made by with on its first use.
func (c *Map[K, V]) Of(k K, with func(K) V) V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[K]V
	if p := c.m.Load(); p != nil {
		old = *p
		if v, ok := old[k]; ok { // made by another caller meanwhile
			return v
		}
	}
	v := with(k)
	if len(old) < c.Max {
		next := make(map[K]V, len(old)+1)
		maps.Copy(next, old)
		next[k] = v
		c.m.Store(&next)
	}
	return v
}

// Len is how many keys the map keeps.
func (c *Map[K, V]) Len() int {
	if m := c.m.Load(); m != nil {
		return len(*m)
	}
	return 0
}
