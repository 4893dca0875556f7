package responses

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"
)

// Store keeps stored responses per tenant: the conversation so far and the Response object, as
// the bytes the dialect wrote. A tenant never sees another's entries. Implementations are safe
// for concurrent use; this package has one in memory (Memory), package cluster one in Redis.
type Store interface {
	// Get returns tenant's entry id; found is false when there is none (never stored, expired,
	// deleted, evicted). An error means the store could not answer.
	Get(ctx context.Context, tenant, id string) (val []byte, found bool, err error)
	// Put stores val as tenant's entry id, replacing any.
	Put(ctx context.Context, tenant, id string, val []byte) error
	// Delete removes tenant's entry id; found says whether there was one.
	Delete(ctx context.Context, tenant, id string) (found bool, err error)
}

// ErrTooLarge is a value larger than a store keeps.
var ErrTooLarge = errors.New("stored response larger than the store keeps")

// MemoryOptions bound a Memory store. Zero fields take the defaults below.
type MemoryOptions struct {
	// MaxBytes bounds the bytes kept over all tenants (DefaultMaxBytes).
	MaxBytes int
	// TenantBytes bounds one tenant's bytes (MaxBytes/4): one tenant cannot push out all others.
	TenantBytes int
	// TenantEntries bounds one tenant's entries (DefaultTenantEntries).
	TenantEntries int
	// MaxValue bounds one entry (DefaultMaxValue); a larger Put fails with ErrTooLarge.
	MaxValue int
	// TTL is how long an entry is kept after its Put (DefaultTTL).
	TTL time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Defaults of MemoryOptions, also the bounds the Redis store takes by default.
const (
	DefaultMaxBytes      = 64 << 20
	DefaultTenantEntries = 10000
	DefaultMaxValue      = 4 << 20
	DefaultTTL           = 24 * time.Hour
)

// entryOverhead is what an entry costs beyond its value and names: the list elements and the
// map's slot.
const entryOverhead = 160

// Memory is a Store in this process's memory, bounded by bytes overall, by bytes and entries per
// tenant, and by age: when a Put would pass a bound, the oldest entries (of the tenant, or of
// all) go first. It is safe for concurrent use.
type Memory struct {
	o       MemoryOptions
	mu      sync.Mutex
	all     *list.List // *memEntry, oldest first
	tenants map[string]*memTenant
	bytes   int
}

type memTenant struct {
	byID  map[string]*memEntry
	order *list.List // *memEntry, oldest first
	bytes int
}

type memEntry struct {
	tenant, id string
	val        []byte
	expires    time.Time
	inAll      *list.Element
	inTenant   *list.Element
}

func (e *memEntry) size() int { return entryOverhead + len(e.tenant) + len(e.id) + len(e.val) }

var _ Store = (*Memory)(nil)

// NewMemory returns an empty Memory store.
func NewMemory(o MemoryOptions) *Memory {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.TenantBytes <= 0 {
		o.TenantBytes = max(o.MaxBytes/4, 1)
	}
	if o.TenantEntries <= 0 {
		o.TenantEntries = DefaultTenantEntries
	}
	if o.MaxValue <= 0 {
		o.MaxValue = DefaultMaxValue
	}
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Memory{o: o, all: list.New(), tenants: map[string]*memTenant{}}
}

// Get returns a copy of tenant's entry id, if it is there and not expired.
func (m *Memory) Get(_ context.Context, tenant, id string) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire()
	t := m.tenants[tenant]
	if t == nil {
		return nil, false, nil
	}
	e := t.byID[id]
	if e == nil {
		return nil, false, nil
	}
	return append([]byte(nil), e.val...), true, nil
}

// Put stores a copy of val. A value larger than MaxValue, or than a tenant's bytes, fails
// with ErrTooLarge.
func (m *Memory) Put(_ context.Context, tenant, id string, val []byte) error {
	e := &memEntry{tenant: tenant, id: id, val: append([]byte(nil), val...)}
	if len(val) > m.o.MaxValue || e.size() > m.o.TenantBytes || e.size() > m.o.MaxBytes {
		return ErrTooLarge
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire()
	t := m.tenants[tenant]
	if t == nil {
		t = &memTenant{byID: map[string]*memEntry{}, order: list.New()}
		m.tenants[tenant] = t
	}
	if old := t.byID[id]; old != nil {
		m.remove(old)
	}
	for t.order.Len() > 0 && (t.order.Len()+1 > m.o.TenantEntries || t.bytes+e.size() > m.o.TenantBytes) {
		m.remove(t.order.Front().Value.(*memEntry))
	}
	for m.all.Len() > 0 && m.bytes+e.size() > m.o.MaxBytes {
		m.remove(m.all.Front().Value.(*memEntry))
	}
	// remove may have dropped the tenant's last entry, and with it the tenant.
	if m.tenants[tenant] != t {
		m.tenants[tenant] = t
	}
	e.expires = m.o.Now().Add(m.o.TTL)
	e.inAll = m.all.PushBack(e)
	e.inTenant = t.order.PushBack(e)
	t.byID[id] = e
	t.bytes += e.size()
	m.bytes += e.size()
	return nil
}

// Delete removes tenant's entry id.
func (m *Memory) Delete(_ context.Context, tenant, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire()
	t := m.tenants[tenant]
	if t == nil || t.byID[id] == nil {
		return false, nil
	}
	m.remove(t.byID[id])
	return true, nil
}

// Len returns the number of entries and their bytes (with each entry's overhead), expired ones
// included until the next operation drops them.
func (m *Memory) Len() (entries, bytes int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.all.Len(), m.bytes
}

// expire drops the entries whose time is past: every entry lives as long (TTL from its Put),
// so the oldest expire first.
func (m *Memory) expire() {
	now := m.o.Now()
	for m.all.Len() > 0 {
		e := m.all.Front().Value.(*memEntry)
		if now.Before(e.expires) {
			return
		}
		m.remove(e)
	}
}

func (m *Memory) remove(e *memEntry) {
	t := m.tenants[e.tenant]
	m.all.Remove(e.inAll)
	t.order.Remove(e.inTenant)
	delete(t.byID, e.id)
	t.bytes -= e.size()
	m.bytes -= e.size()
	if t.order.Len() == 0 {
		delete(m.tenants, e.tenant)
	}
}

// Layered is a shared store (Redis, so any replica can continue a conversation) in front of a
// local one that keeps a replica going while the shared one is down. While the shared store
// answers, its answer is the truth (a response deleted through another replica is gone here
// too); the local store keeps a copy of each Put for when it does not, and holds alone what was
// stored while it was down (a Put it refused), which stays readable here. It is safe for
// concurrent use when both stores are.
type Layered struct {
	Local, Shared Store
}

var _ Store = Layered{}

// localOnly names, in the local store, an entry the shared store refused: ids never hold a NUL.
func localOnly(id string) string { return "\x00" + id }

// Get returns the shared store's entry; when it has none, one stored only here; when it
// cannot answer, the local copy.
func (l Layered) Get(ctx context.Context, tenant, id string) ([]byte, bool, error) {
	b, found, err := l.Shared.Get(ctx, tenant, id)
	if err == nil && found {
		return b, true, nil
	}
	if lb, ok, lerr := l.Local.Get(ctx, tenant, localOnly(id)); lerr == nil && ok {
		return lb, true, nil
	}
	if err == nil {
		return nil, false, nil
	}
	if lb, ok, lerr := l.Local.Get(ctx, tenant, id); lerr == nil && ok {
		return lb, true, nil
	}
	return nil, false, err // the shared store could not say, and nothing here says
}

// Put stores val in the shared store and a copy here; when the shared store refuses it, here
// alone. It fails only when neither kept it.
func (l Layered) Put(ctx context.Context, tenant, id string, val []byte) error {
	serr := l.Shared.Put(ctx, tenant, id, val)
	if serr == nil {
		_ = l.Local.Put(ctx, tenant, id, val) // a copy for an outage; the shared store has it
		return nil
	}
	if lerr := l.Local.Put(ctx, tenant, localOnly(id), val); lerr != nil {
		return errors.Join(serr, lerr)
	}
	return nil
}

// Delete removes the entry from both; found says whether either had it.
func (l Layered) Delete(ctx context.Context, tenant, id string) (bool, error) {
	sfound, serr := l.Shared.Delete(ctx, tenant, id)
	cfound, _ := l.Local.Delete(ctx, tenant, id)
	ofound, lerr := l.Local.Delete(ctx, tenant, localOnly(id))
	switch {
	case serr == nil:
		return sfound || ofound, lerr
	case ofound:
		return true, nil // it was here alone, and is gone
	}
	_ = cfound // the copy goes too; the shared entry could not, so the delete failed
	return false, serr
}
