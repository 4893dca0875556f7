package proxy

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Budget limits one key's joules per calendar period (UTC).
type Budget struct {
	Joules float64
	Per    string // "day" or "month"
}

// budgetBook admits calls against joule budgets. A call's cost is known only when it ends, so
// admission reserves the most any call of that key has cost so far; until a key has a settled
// call, it admits one call at a time. Settling replaces the reservation with the real cost, so
// concurrent calls cannot together pass the budget by more than the amount a call exceeds the
// largest cost seen before it; while a key's first call is being priced, the next ones wait. Estimated and measured joules count alike.
// A budgetBook is safe for concurrent use.
type budgetBook struct {
	mu    sync.Mutex
	now   func() time.Time
	books map[string]*keyBook
}

type keyBook struct {
	budget   Budget
	period   string  // the period the figures belong to, e.g. "2026-12-02" or "2026-12"
	spent    float64 // settled joules this period
	reserved float64 // reservations of calls in flight
	inFlight int
	maxCost  float64 // the largest settled cost, ever: the next reservation
	settled  bool
	changed  chan struct{} // closed and replaced at every settle, to wake waiting admissions
}

func newBudgetBook(budgets map[string]Budget, now func() time.Time) *budgetBook {
	b := &budgetBook{now: now, books: map[string]*keyBook{}}
	for id, bg := range budgets {
		b.books[id] = &keyBook{budget: bg, changed: make(chan struct{})}
	}
	return b
}

func periodOf(per string, t time.Time) string {
	t = t.UTC()
	if per == "month" {
		return t.Format("2006-01")
	}
	return t.Format("2006-01-02")
}

func (k *keyBook) roll(t time.Time) {
	if p := periodOf(k.budget.Per, t); p != k.period {
		k.period, k.spent = p, 0
	}
}

// reservation is an admitted call's claim; settle it exactly once.
type reservation struct {
	key    string
	amount float64
	period string
}

// admit reserves room for one call of key, or returns a 429 stating the budget. Keys without a
// budget are always admitted (ok with a zero reservation).
func (b *budgetBook) admit(ctx context.Context, key string) (reservation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k, ok := b.books[key]
	if !ok {
		return reservation{}, nil
	}
	for !k.settled && k.inFlight > 0 {
		// No call of this key has been priced yet: wait for the first to settle.
		changed := k.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			b.mu.Lock()
			return reservation{}, ctx.Err()
		}
		b.mu.Lock()
	}
	k.roll(b.now())
	over := func() *APIError {
		return &APIError{Status: 429, Type: "insufficient_quota", Code: "joule_budget_exceeded",
			Message: fmt.Sprintf("joule budget exceeded: key %q has used %.6g J of its %.6g J per %s budget", key, k.spent, k.budget.Joules, k.budget.Per)}
	}
	if k.spent+k.reserved+k.maxCost > k.budget.Joules || k.spent >= k.budget.Joules {
		return reservation{}, over()
	}
	k.reserved += k.maxCost
	k.inFlight++
	return reservation{key: key, amount: k.maxCost, period: k.period}, nil
}

// settle books a call's real cost against its reservation and returns the joules remaining; ok
// is false for keys without a budget.
func (b *budgetBook) settle(r reservation, joules float64) (left float64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k, ok := b.books[r.key]
	if !ok {
		return 0, false
	}
	k.inFlight--
	if r.period == k.period {
		k.reserved -= r.amount
	}
	k.roll(b.now())
	k.spent += joules
	if joules > k.maxCost {
		k.maxCost = joules
	}
	k.settled = k.settled || joules > 0 // a call that cost nothing prices nothing
	close(k.changed)
	k.changed = make(chan struct{})
	return k.budget.Joules - k.spent - k.reserved, true
}

// remaining is the key's budget less what is spent and reserved; ok is false without a budget.
func (b *budgetBook) remaining(key string) (float64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k, ok := b.books[key]
	if !ok {
		return 0, false
	}
	k.roll(b.now())
	return k.budget.Joules - k.spent - k.reserved, true
}
