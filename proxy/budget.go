package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// Budget limits one key's joules per calendar period (UTC).
type Budget struct {
	Joules float64
	Per    string // "day" or "month"
}

// The admission rule, the same in this process and in Redis (cluster.Budgets): a call's cost is
// known only when it ends, so admission reserves budgetHeadroom times the largest cost the key
// has seen, for every call in flight, re-priced whenever a call costs more. Concurrent calls
// are admitted while all those reservations fit in what is left; past that, calls run one at a
// time, each admitted only while the key has spent less than its budget. Until a key has a
// priced call, its calls also run one at a time. So a key spends at most its budget plus one
// call, unless calls running together each cost more than budgetHeadroom times the dearest
// call before them. Estimated and measured joules count alike, and so do partial figures (a
// part of the call's energy unknown, e.g. its GPU part): the book charges their joules as they
// are and keeps how many of the period's joules came from them, so that the remaining budget it
// reports can say it is an upper bound (budgetLeft.coverage).
const budgetHeadroom = 2

// Verdicts of an admission.
const (
	verdictAdmit = 0 // reserved
	verdictWait  = 1 // the key's first or last calls run alone: try again when one settles
	verdictOver  = 2 // the budget is spent
)

// decide is the admission rule on one key's figures.
func decide(spent, limit, maxCost float64, inFlight int) int {
	r := budgetHeadroom * maxCost
	switch {
	case spent >= limit:
		return verdictOver
	case maxCost <= 0 && inFlight > 0:
		return verdictWait
	case inFlight == 0 || spent+float64(inFlight+1)*r <= limit:
		return verdictAdmit
	default:
		return verdictWait
	}
}

// SharedBudgets keeps the budget figures where every replica sees them and applies the same
// rule atomically (cluster.Budgets, a Lua script on Redis). reserved is what the calls in
// flight on every replica hold. An error means the store cannot answer: the book then uses
// its own figures for this replica alone.
type SharedBudgets interface {
	// Admit applies the rule to key for period; on verdictAdmit, id names the reservation.
	Admit(ctx context.Context, key, period string, limit, headroom float64, hold time.Duration) (id string, verdict int, spent, reserved float64, err error)
	// Settle books cost, which came from a partial figure when partial is true, and ends
	// reservation id (a call admitted locally has an id of its own, in flight nowhere in the
	// store). A settle retried with the same id books nothing more. partialSpent is how many of
	// the period's spent joules came from partial figures.
	Settle(ctx context.Context, key, period, id string, cost float64, partial bool, headroom float64) (spent, reserved, partialSpent float64, err error)
	// Usage is key's spent and reserved joules for period, and how many of the spent joules
	// came from partial figures.
	Usage(ctx context.Context, key, period string, headroom float64) (spent, reserved, partialSpent float64, err error)
}

// sharedHold is how long a shared reservation lives when its replica never settles it (a
// crash): past it, the call no longer counts as in flight.
const sharedHold = 15 * time.Minute

// budgetBook admits calls against joule budgets, on its own figures or on shared ones. It is
// safe for concurrent use.
type budgetBook struct {
	mu     sync.Mutex
	now    func() time.Time
	books  map[string]*keyBook
	shared SharedBudgets // nil: this replica's figures are the budget's
	// unsettled are shared reservations whose settle could not reach the store: they are
	// settled there once it answers again (replayLate, in the background), so they do not hold
	// room until they expire.
	unsettled []unsettled
	replaying bool // a replayLate goroutine is running
}

// backNotifier is a store that says when it is reachable again after an outage (cluster.Budgets).
type backNotifier interface {
	OnBack(f func())
}

// setShared makes the book admit on s's figures; when s says it is back after an outage, the
// settles it missed are replayed in the background.
func (b *budgetBook) setShared(s SharedBudgets) {
	b.shared = s
	if n, ok := s.(backNotifier); ok {
		n.OnBack(b.kickLate)
	}
}

type unsettled struct {
	key, period, id string
	joules          float64
	partial         bool
}

type keyBook struct {
	budget   Budget
	period   string        // the period the figures belong to, e.g. "2026-12-02" or "2026-12"
	spent    float64       // settled joules this period
	partial  float64       // the joules of spent that came from partial figures
	inFlight int           // calls admitted locally and not settled
	maxCost  float64       // the largest settled cost, ever
	changed  chan struct{} // closed and replaced at every settle, to wake waiting admissions
	// poller is held by the one call of this replica that polls the shared figures while the
	// rule says wait; the others wait for it here, so a queue costs Redis one poll at a time.
	poller chan struct{}
}

func newBudgetBook(budgets map[string]Budget, now func() time.Time) *budgetBook {
	b := &budgetBook{now: now, books: map[string]*keyBook{}}
	for id, bg := range budgets {
		b.books[id] = &keyBook{budget: bg, changed: make(chan struct{}), poller: make(chan struct{}, 1)}
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
		k.period, k.spent, k.partial = p, 0, 0
	}
}

// budgetLeft is what a key's budget has left this period: joules, the budget less what is spent
// and reserved, and partial, how many of the spent joules came from partial figures. While
// partial is above 0, part of the spend is unknown and joules is an upper bound on what is
// really left.
type budgetLeft struct {
	joules, partial float64
}

// coverage is energy.CoveragePartial when some of the period's spend came from partial figures,
// else energy.CoverageWhole (X-EOC-Budget-Coverage).
func (l budgetLeft) coverage() string {
	if l.partial > 0 {
		return energy.CoveragePartial
	}
	return energy.CoverageWhole
}

func (k *keyBook) left() budgetLeft {
	return budgetLeft{joules: k.budget.Joules - k.spent - k.reserved(), partial: k.partial}
}

// reserved is what the calls in flight hold.
func (k *keyBook) reserved() float64 { return float64(k.inFlight) * budgetHeadroom * k.maxCost }

// reservation is an admitted call's claim; settle it exactly once.
type reservation struct {
	key    string
	amount float64
	shared string // the shared reservation's id; "" when admitted on local figures
	local  string // when admitted on local figures, the id its settle carries to the store
}

// settleID is the id the store books r's settle under, once.
func (r reservation) settleID() string {
	if r.shared != "" {
		return r.shared
	}
	return r.local
}

// localID names a call admitted on local figures, so that the store books its settle once even
// when the settle is replayed after a lost reply.
func localID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "local-" + hex.EncodeToString(b[:])
}

func (b *budgetBook) over(key string, k *keyBook, spent float64) *APIError {
	return &APIError{Status: 429, Type: "insufficient_quota", Code: "joule_budget_exceeded",
		Message: fmt.Sprintf("joule budget exceeded: key %q has used %.6g J of its %.6g J per %s budget", key, spent, k.budget.Joules, k.budget.Per)}
}

// admit reserves room for one call of key, waiting (at most as long as ctx) while the rule says
// wait, or returns a 429 stating the budget. Keys without a budget are always admitted (ok
// with a zero reservation).
func (b *budgetBook) admit(ctx context.Context, key string) (reservation, error) {
	b.mu.Lock()
	k, ok := b.books[key]
	b.mu.Unlock()
	if !ok {
		return reservation{}, nil
	}
	if b.shared != nil {
		r, err, done := b.admitShared(ctx, key, k)
		if done {
			return r, err
		}
	}
	return b.admitLocal(ctx, key, k)
}

// admitShared admits on the shared figures; done is false when the store cannot answer.
func (b *budgetBook) admitShared(ctx context.Context, key string, k *keyBook) (_ reservation, _ error, done bool) {
	pause, polling := 2*time.Millisecond, false
	defer func() {
		if polling {
			<-k.poller
		}
	}()
	for {
		period := periodOf(k.budget.Per, b.now())
		id, verdict, spent, _, err := b.shared.Admit(ctx, key, period, k.budget.Joules, budgetHeadroom, sharedHold)
		if err != nil {
			if ctx.Err() != nil {
				return reservation{}, ctx.Err(), true
			}
			return reservation{}, nil, false
		}
		b.mirror(k, period, spent)
		b.kickLate() // the store answers: settle there what it missed, never on this call's path
		switch verdict {
		case verdictAdmit:
			b.mu.Lock()
			amount := budgetHeadroom * k.maxCost
			b.mu.Unlock()
			return reservation{key: key, amount: amount, shared: id}, nil, true
		case verdictOver:
			return reservation{}, b.over(key, k, spent), true
		}
		// Another call is being priced, or the last calls run alone: poll, one call of this
		// replica at a time, waking early when one of this replica's calls settles.
		if !polling {
			select {
			case k.poller <- struct{}{}:
				polling = true
				continue
			case <-ctx.Done():
				return reservation{}, ctx.Err(), true
			}
		}
		b.mu.Lock()
		changed := k.changed
		b.mu.Unlock()
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return reservation{}, ctx.Err(), true
		case <-changed:
			t.Stop()
		case <-t.C:
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// mirror keeps the shared spend as the local figure, so an outage starts from it.
func (b *budgetBook) mirror(k *keyBook, period string, spent float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k.roll(b.now())
	if k.period == period {
		k.spent = spent
	}
}

// mirrorPartial keeps the shared spend and its partial joules as the local figures.
func (b *budgetBook) mirrorPartial(k *keyBook, period string, spent, partial float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k.roll(b.now())
	if k.period == period {
		k.spent, k.partial = spent, partial
	}
}

func (b *budgetBook) admitLocal(ctx context.Context, key string, k *keyBook) (reservation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		k.roll(b.now())
		switch decide(k.spent, k.budget.Joules, k.maxCost, k.inFlight) {
		case verdictAdmit:
			k.inFlight++
			return reservation{key: key, amount: budgetHeadroom * k.maxCost, local: localID()}, nil
		case verdictOver:
			return reservation{}, b.over(key, k, k.spent)
		}
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
}

// settle books a call's real cost, its figure's joules, against its reservation and returns
// what remains; ok is false for keys without a budget. A partial figure is charged its joules
// like a whole one, and counted in the period's partial joules.
func (b *budgetBook) settle(r reservation, fig energy.Figure) (left budgetLeft, ok bool) {
	left, _, ok = b.settleIn(r, fig)
	return left, ok
}

// settleIn is settle, also saying which period it booked the cost to.
func (b *budgetBook) settleIn(r reservation, fig energy.Figure) (left budgetLeft, period string, ok bool) {
	joules, partial := fig.Joules, fig.Coverage == energy.CoveragePartial
	b.mu.Lock()
	k, ok := b.books[r.key]
	if !ok {
		b.mu.Unlock()
		return budgetLeft{}, "", false
	}
	k.roll(b.now())
	period = k.period
	if r.shared == "" {
		k.inFlight--
	}
	k.spent += joules
	if partial {
		k.partial += joules
	}
	k.maxCost = max(k.maxCost, joules)
	left = k.left()
	close(k.changed)
	k.changed = make(chan struct{})
	b.mu.Unlock()
	if b.shared != nil {
		// A call admitted locally during an outage is booked too when the store is back.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		spent, reserved, partialSpent, err := b.shared.Settle(ctx, r.key, period, r.settleID(), joules, partial, budgetHeadroom)
		cancel()
		if err == nil {
			b.mirrorPartial(k, period, spent, partialSpent)
			b.kickLate()
			return budgetLeft{joules: k.budget.Joules - spent - reserved, partial: partialSpent}, period, true
		}
		b.mu.Lock()
		if len(b.unsettled) < maxUnsettled {
			b.unsettled = append(b.unsettled, unsettled{key: r.key, period: period, id: r.settleID(), joules: joules, partial: partial})
		}
		b.mu.Unlock()
	}
	return left, period, true
}

// heldCost is what settleHigh booked for a call whose figure was still provisional: its High,
// in the period of the call's response. adjust books the settled figure's difference to it.
type heldCost struct {
	key, period, id string
	joules          float64
	partial         bool
}

// settleHigh settles r at once with fig's High, which holds the settled figure, so the call's
// reservation is released when its response goes out and the key's next call need not wait for
// the settlement; adjust later books what the settled figure costs less. ok is false for keys
// without a budget.
func (b *budgetBook) settleHigh(r reservation, fig energy.Figure) (left budgetLeft, h heldCost, ok bool) {
	high := fig
	high.Joules = max(fig.High, fig.Joules)
	left, period, ok := b.settleIn(r, high)
	if !ok {
		return left, heldCost{}, false
	}
	return left, heldCost{key: r.key, period: period, id: r.settleID(), joules: high.Joules,
		partial: high.Coverage == energy.CoveragePartial}, true
}

// adjust books a settled figure against what settleHigh booked for its call: fig's joules less
// the held High (never more than it), in the held period, leaving the calls in flight alone. In
// the shared store it is a settle under an id of its own (the reservation's plus "/settled"), so
// a retried one books once.
func (b *budgetBook) adjust(h heldCost, fig energy.Figure) {
	delta := min(0, fig.Joules-h.joules)
	if h.key == "" || delta == 0 {
		return
	}
	b.mu.Lock()
	k, ok := b.books[h.key]
	if !ok {
		b.mu.Unlock()
		return
	}
	k.roll(b.now())
	if k.period == h.period {
		k.spent += delta
		if h.partial {
			k.partial = max(0, k.partial+delta)
		}
	}
	close(k.changed)
	k.changed = make(chan struct{})
	b.mu.Unlock()
	if b.shared == nil {
		return
	}
	id := h.id + "/settled"
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	spent, _, partialSpent, err := b.shared.Settle(ctx, h.key, h.period, id, delta, h.partial, budgetHeadroom)
	cancel()
	if err == nil {
		b.mirrorPartial(k, h.period, spent, partialSpent)
		b.kickLate()
		return
	}
	b.mu.Lock()
	if len(b.unsettled) < maxUnsettled {
		b.unsettled = append(b.unsettled, unsettled{key: h.key, period: h.period, id: id, joules: delta, partial: h.partial})
	}
	b.mu.Unlock()
}

// maxUnsettled bounds the settles kept for the store's return; past it they expire there.
const maxUnsettled = 10000

// kickLate starts replayLate in the background when settles wait for the store and no replay
// runs; it never blocks.
func (b *budgetBook) kickLate() {
	b.mu.Lock()
	start := len(b.unsettled) > 0 && !b.replaying
	if start {
		b.replaying = true
	}
	b.mu.Unlock()
	if start {
		go b.replayLate()
	}
}

// replayLate settles in the store what could not be settled there while it was unreachable,
// each settle under its own timeout, off every request's path. It stops at the first failure
// and keeps the rest for the next time the store answers. Every late settle carries its id, so
// one whose first reply was lost is booked once.
func (b *budgetBook) replayLate() {
	for {
		b.mu.Lock()
		if len(b.unsettled) == 0 {
			b.replaying = false
			b.mu.Unlock()
			return
		}
		u := b.unsettled[0]
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), lateSettleTimeout)
		_, _, _, err := b.shared.Settle(ctx, u.key, u.period, u.id, u.joules, u.partial, budgetHeadroom)
		cancel()
		b.mu.Lock()
		if err != nil {
			b.replaying = false
			b.mu.Unlock()
			return
		}
		b.unsettled = b.unsettled[1:]
		b.mu.Unlock()
	}
}

// lateSettleTimeout bounds one replayed settle.
const lateSettleTimeout = 2 * time.Second

// remaining is the key's budget less what is spent and reserved, with the spend's coverage; ok
// is false without a budget.
func (b *budgetBook) remaining(key string) (budgetLeft, bool) {
	b.mu.Lock()
	k, ok := b.books[key]
	if !ok {
		b.mu.Unlock()
		return budgetLeft{}, false
	}
	k.roll(b.now())
	period, left := k.period, k.left()
	b.mu.Unlock()
	if b.shared != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if spent, reserved, partial, err := b.shared.Usage(ctx, key, period, budgetHeadroom); err == nil {
			return budgetLeft{joules: k.budget.Joules - spent - reserved, partial: partial}, true
		}
	}
	return left, true
}
