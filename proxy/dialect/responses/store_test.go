package responses

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func mustGet(t *testing.T, s Store, tenant, id string) (string, bool) {
	t.Helper()
	b, ok, err := s.Get(context.Background(), tenant, id)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), ok
}

func mustPut(t *testing.T, s Store, tenant, id, val string) {
	t.Helper()
	if err := s.Put(context.Background(), tenant, id, []byte(val)); err != nil {
		t.Fatalf("Put(%s, %s): %v", tenant, id, err)
	}
}

func TestMemoryTenants(t *testing.T) {
	m := NewMemory(MemoryOptions{})
	mustPut(t, m, "a", "resp_1", "A")
	mustPut(t, m, "b", "resp_1", "B")
	if v, ok := mustGet(t, m, "a", "resp_1"); !ok || v != "A" {
		t.Errorf("a's entry: %q %v", v, ok)
	}
	if v, ok := mustGet(t, m, "b", "resp_1"); !ok || v != "B" {
		t.Errorf("b's entry: %q %v", v, ok)
	}
	if _, ok := mustGet(t, m, "", "resp_1"); ok {
		t.Error("the empty tenant sees another's entry")
	}
	if found, _ := m.Delete(context.Background(), "c", "resp_1"); found {
		t.Error("c deleted an entry it does not have")
	}
	if found, _ := m.Delete(context.Background(), "a", "resp_1"); !found {
		t.Error("a could not delete its entry")
	}
	if _, ok := mustGet(t, m, "b", "resp_1"); !ok {
		t.Error("a's delete removed b's entry")
	}
	// A stored value is a copy: changing the caller's slice changes nothing.
	buf := []byte("xyz")
	_ = m.Put(context.Background(), "a", "resp_2", buf)
	buf[0] = 'Q'
	if v, _ := mustGet(t, m, "a", "resp_2"); v != "xyz" {
		t.Errorf("stored value changed with the caller's slice: %q", v)
	}
}

func TestMemoryTTL(t *testing.T) {
	clock := &fakeClock{t: epoch}
	m := NewMemory(MemoryOptions{TTL: time.Hour, Now: clock.now})
	mustPut(t, m, "a", "resp_1", "one")
	clock.t = epoch.Add(30 * time.Minute)
	mustPut(t, m, "a", "resp_2", "two")
	clock.t = epoch.Add(time.Hour - time.Nanosecond)
	if _, ok := mustGet(t, m, "a", "resp_1"); !ok {
		t.Error("expired before its TTL")
	}
	clock.t = epoch.Add(time.Hour)
	if _, ok := mustGet(t, m, "a", "resp_1"); ok {
		t.Error("kept past its TTL")
	}
	if _, ok := mustGet(t, m, "a", "resp_2"); !ok {
		t.Error("a younger entry expired with an older one")
	}
	if n, _ := m.Len(); n != 1 {
		t.Errorf("%d entries after one expired, want 1", n)
	}
	// A Put again starts the TTL again.
	mustPut(t, m, "a", "resp_2", "two again")
	clock.t = epoch.Add(2*time.Hour - time.Nanosecond)
	if v, ok := mustGet(t, m, "a", "resp_2"); !ok || v != "two again" {
		t.Errorf("replaced entry: %q %v", v, ok)
	}
	clock.t = epoch.Add(3 * time.Hour)
	if n, b := m.Len(); n != 1 {
		t.Errorf("Len before the next operation: %d %d", n, b)
	}
	if _, ok := mustGet(t, m, "a", "resp_2"); ok {
		t.Error("replaced entry kept past its TTL")
	}
	if n, b := m.Len(); n != 0 || b != 0 {
		t.Errorf("after every entry expired: %d entries, %d bytes", n, b)
	}
}

func TestMemoryBounds(t *testing.T) {
	val := strings.Repeat("v", 100)
	size := (&memEntry{tenant: "a", id: "resp_00", val: []byte(val)}).size()
	t.Run("tenant entries", func(t *testing.T) {
		m := NewMemory(MemoryOptions{TenantEntries: 3})
		for i := range 5 {
			mustPut(t, m, "a", fmt.Sprintf("resp_%02d", i), val)
		}
		mustPut(t, m, "b", "resp_00", val)
		for i := range 5 {
			_, ok := mustGet(t, m, "a", fmt.Sprintf("resp_%02d", i))
			if ok != (i >= 2) {
				t.Errorf("entry %d kept %v: the oldest go first, 3 stay", i, ok)
			}
		}
		if _, ok := mustGet(t, m, "b", "resp_00"); !ok {
			t.Error("b's entry went for a's bound")
		}
	})
	t.Run("tenant bytes", func(t *testing.T) {
		m := NewMemory(MemoryOptions{MaxBytes: 100 * size, TenantBytes: 2 * size})
		mustPut(t, m, "b", "resp_00", val)
		for i := range 4 {
			mustPut(t, m, "a", fmt.Sprintf("resp_%02d", i), val)
		}
		n, b := m.Len()
		if n != 3 || b != 3*size {
			t.Errorf("%d entries of %d bytes, want 3 of %d", n, b, 3*size)
		}
		if _, ok := mustGet(t, m, "b", "resp_00"); !ok {
			t.Error("b's entry went for a's bound")
		}
	})
	t.Run("all bytes", func(t *testing.T) {
		m := NewMemory(MemoryOptions{MaxBytes: 3 * size, TenantBytes: 3 * size})
		for i, tenant := range []string{"a", "b", "c", "d"} {
			mustPut(t, m, tenant, fmt.Sprintf("resp_%02d", i), val)
		}
		if _, ok := mustGet(t, m, "a", "resp_00"); ok {
			t.Error("the oldest entry was kept past the bound")
		}
		if n, b := m.Len(); n != 3 || b > 3*size {
			t.Errorf("%d entries of %d bytes, bound %d", n, b, 3*size)
		}
	})
	t.Run("value too large", func(t *testing.T) {
		m := NewMemory(MemoryOptions{MaxValue: 10})
		if err := m.Put(context.Background(), "a", "resp_1", []byte(strings.Repeat("x", 11))); !errors.Is(err, ErrTooLarge) {
			t.Errorf("Put of 11 bytes with MaxValue 10: %v", err)
		}
		if n, _ := m.Len(); n != 0 {
			t.Error("a refused value was kept")
		}
	})
}

func TestMemoryConcurrent(t *testing.T) {
	m := NewMemory(MemoryOptions{TenantEntries: 8})
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 200 {
				id := fmt.Sprintf("resp_%d", i%16)
				tenant := fmt.Sprintf("t%d", g%2)
				_ = m.Put(context.Background(), tenant, id, []byte(id))
				if b, ok, _ := m.Get(context.Background(), tenant, id); ok && string(b) != id {
					t.Errorf("got %q for %s", b, id)
				}
				_, _ = m.Delete(context.Background(), tenant, fmt.Sprintf("resp_%d", (i+3)%16))
			}
		}()
	}
	for range 4 {
		<-done
	}
	if n, _ := m.Len(); n > 16 {
		t.Errorf("%d entries, bound 2 tenants × 8", n)
	}
}

// switchable is a store that can be made to fail, as Redis does when it goes away.
type switchable struct {
	Store
	down bool
}

var errDown = errors.New("down")

func (s *switchable) Get(ctx context.Context, tenant, id string) ([]byte, bool, error) {
	if s.down {
		return nil, false, errDown
	}
	return s.Store.Get(ctx, tenant, id)
}

func (s *switchable) Put(ctx context.Context, tenant, id string, val []byte) error {
	if s.down {
		return errDown
	}
	return s.Store.Put(ctx, tenant, id, val)
}

func (s *switchable) Delete(ctx context.Context, tenant, id string) (bool, error) {
	if s.down {
		return false, errDown
	}
	return s.Store.Delete(ctx, tenant, id)
}

func TestLayered(t *testing.T) {
	ctx := context.Background()
	shared := &switchable{Store: NewMemory(MemoryOptions{})}
	// Two replicas: their own local stores, one shared store.
	a := Layered{Local: NewMemory(MemoryOptions{}), Shared: shared}
	b := Layered{Local: NewMemory(MemoryOptions{}), Shared: shared}
	mustPut(t, a, "t", "resp_1", "one")
	if v, ok := mustGet(t, b, "t", "resp_1"); !ok || v != "one" {
		t.Fatalf("b reads a's entry: %q %v", v, ok)
	}
	// Deleted through b, it is gone through a as well, though a keeps a copy for outages.
	if found, err := b.Delete(ctx, "t", "resp_1"); !found || err != nil {
		t.Fatalf("delete through b: %v %v", found, err)
	}
	if _, ok := mustGet(t, a, "t", "resp_1"); ok {
		t.Error("a still reads an entry deleted through b")
	}

	mustPut(t, a, "t", "resp_2", "two")
	shared.down = true
	if v, ok := mustGet(t, a, "t", "resp_2"); !ok || v != "two" {
		t.Errorf("a's copy while the shared store is down: %q %v", v, ok)
	}
	if _, _, err := b.Get(ctx, "t", "resp_2"); !errors.Is(err, errDown) {
		t.Errorf("b has no copy and the shared store is down: %v", err)
	}
	// Stored while the shared store is down: here alone, and still readable once it is back.
	mustPut(t, a, "t", "resp_3", "three")
	if found, err := a.Delete(ctx, "t", "resp_2"); found || !errors.Is(err, errDown) {
		t.Errorf("deleting a shared entry while the shared store is down: %v %v", found, err)
	}
	shared.down = false
	if v, ok := mustGet(t, a, "t", "resp_3"); !ok || v != "three" {
		t.Errorf("an entry stored during the outage, after it: %q %v", v, ok)
	}
	if _, ok := mustGet(t, b, "t", "resp_3"); ok {
		t.Error("b reads what a stored alone")
	}
	if found, err := a.Delete(ctx, "t", "resp_3"); !found || err != nil {
		t.Errorf("deleting an entry stored during the outage: %v %v", found, err)
	}
	if _, ok := mustGet(t, a, "t", "resp_3"); ok {
		t.Error("read after delete")
	}
	// Neither store keeps it: the Put fails.
	shared.down = true
	tiny := Layered{Local: NewMemory(MemoryOptions{MaxValue: 1}), Shared: shared}
	if err := tiny.Put(ctx, "t", "resp_4", []byte("too big")); err == nil {
		t.Error("a Put neither store kept succeeded")
	}
}
