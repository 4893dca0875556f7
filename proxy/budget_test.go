package proxy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

func whole(j float64) energy.Figure {
	return energy.Figure{Joules: j, Grade: energy.Measured, Coverage: energy.CoverageWhole}
}

// partialFig is a figure of which a part (the GPU's, say) is unknown: j is the known part.
func partialFig(j float64) energy.Figure {
	return energy.Figure{Joules: j, Grade: energy.Measured, Coverage: energy.CoveragePartial, Reason: "gpu-unattributed"}
}

// A partial figure is charged its joules like a whole one, and the budget says that part of the
// spend is unknown until the period ends (issue 10).
func TestBudgetCarriesCoverage(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	b := newBudgetBook(map[string]Budget{"k": {Joules: 100, Per: "day"}}, func() time.Time { return now })
	call := func(fig energy.Figure) budgetLeft {
		t.Helper()
		r, err := b.admit(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		left, ok := b.settle(r, fig)
		if !ok {
			t.Fatal("no budget")
		}
		return left
	}
	if left := call(whole(10)); left.joules != 90 || left.coverage() != energy.CoverageWhole {
		t.Fatalf("whole spend: %+v", left)
	}
	if left, _ := b.remaining("k"); left.coverage() != energy.CoverageWhole {
		t.Fatalf("whole spend: remaining %+v", left)
	}
	if left := call(partialFig(5)); left.joules != 85 || left.partial != 5 || left.coverage() != energy.CoveragePartial {
		t.Fatalf("after a partial figure: %+v (want 85 J left, 5 J partial)", left)
	}
	// A whole call after it does not make the period's spend whole again.
	if left := call(whole(1)); left.joules != 84 || left.coverage() != energy.CoveragePartial {
		t.Fatalf("whole after partial: %+v", left)
	}
	if left, _ := b.remaining("k"); left.partial != 5 || left.coverage() != energy.CoveragePartial {
		t.Fatalf("remaining after partial: %+v", left)
	}
	// The next day starts whole.
	now = now.Add(24 * time.Hour)
	if left, _ := b.remaining("k"); left.joules != 100 || left.partial != 0 || left.coverage() != energy.CoverageWhole {
		t.Fatalf("next day: %+v", left)
	}
	if left := call(whole(2)); left.coverage() != energy.CoverageWhole {
		t.Fatalf("next day, whole call: %+v", left)
	}
}

func TestBudgetHoldsUnderConcurrency(t *testing.T) {
	const cost, room = 3.0, 50
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	b := newBudgetBook(map[string]Budget{"team-a": {Joules: cost * room, Per: "day"}}, func() time.Time { return now })
	var admitted, refused atomic.Int32
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := b.admit(context.Background(), "team-a")
			if err != nil {
				refused.Add(1)
				return
			}
			admitted.Add(1)
			time.Sleep(time.Millisecond)
			_, _ = b.settle(r, whole(cost))
		}()
	}
	wg.Wait()
	if admitted.Load() > room || admitted.Load() == 0 {
		t.Fatalf("admitted %d calls, budget has room for %d", admitted.Load(), room)
	}
	if left, _ := b.remaining("team-a"); left.joules < 0 {
		t.Fatalf("budget overdrawn: %v left", left)
	}
	if _, err := b.admit(context.Background(), "team-b"); err != nil {
		t.Fatalf("a key without a budget was refused: %v", err)
	}
	// A new day starts with the whole budget again.
	now = now.Add(24 * time.Hour)
	if left, _ := b.remaining("team-a"); left.joules != cost*room {
		t.Fatalf("new day: %v left", left)
	}
}

func TestBudgetFreeCallDoesNotPrice(t *testing.T) {
	b := newBudgetBook(map[string]Budget{"k": {Joules: 10, Per: "month"}}, time.Now)
	r, err := b.admit(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.admit(ctx, "k"); err == nil {
		t.Fatal("a second call was admitted before the first was priced")
	}
	_, _ = b.settle(r, energy.Figure{}) // a failed call: nothing learned about the price
	r2, err := b.admit(context.Background(), "k")
	if err != nil || r2.amount != 0 {
		t.Fatalf("after a free call: %v %v", r2, err)
	}
}

// Calls that run together cost more than one alone (they share the machine), so the first
// call's price understates the rest: 200 concurrent calls on a 0.5 J key spent 2.19 J (issue
// 11). The key may spend its budget plus one call, no more.
func TestBudgetConcurrentCallsCannotOverrun(t *testing.T) {
	const limit, alone, together = 0.5, 0.0025, 0.004
	b := newBudgetBook(map[string]Budget{"k": {Joules: limit, Per: "day"}}, time.Now)
	var running atomic.Int32
	var mu sync.Mutex
	spent := 0.0
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r, err := b.admit(ctx, "k")
			if err != nil {
				return
			}
			cost := alone
			if running.Add(1) > 1 {
				cost = together
			}
			time.Sleep(2 * time.Millisecond)
			running.Add(-1)
			mu.Lock()
			spent += cost
			mu.Unlock()
			_, _ = b.settle(r, whole(cost))
		}()
	}
	close(start)
	wg.Wait()
	if spent > limit+together {
		t.Fatalf("spent %.4f J of a %.4f J budget: more than one call over", spent, limit)
	}
	if spent < limit {
		t.Fatalf("spent %.4f J: the budget of %.4f J was not used", spent, limit)
	}
}

// flakyShared is a shared store in memory that can be switched off, like a Redis going away.
type flakyShared struct {
	mu       sync.Mutex
	down     bool
	spent    float64
	partial  float64
	inFlight map[string]bool
	n        int
	settled  map[string]bool // ids settled, booked once as cluster's settle script does
	ids      []string        // the ids of the settles received, in order
	lose     bool            // book the next settle, then lose its reply
	gate     chan struct{}   // when set, settles wait for it to close
	changed  chan struct{}   // closed and replaced at every settle
	back     []func()
}

func newFlakyShared() *flakyShared {
	return &flakyShared{inFlight: map[string]bool{}, settled: map[string]bool{}, changed: make(chan struct{})}
}

// OnBack registers f to run when setDown(false) ends an outage, like cluster.Budgets.OnBack.
func (f *flakyShared) OnBack(fn func()) {
	f.mu.Lock()
	f.back = append(f.back, fn)
	f.mu.Unlock()
}

// waitStore waits until cond holds on the store's figures (under its lock); the deadline only
// bounds a hang.
func (f *flakyShared) waitStore(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		ok, changed := cond(), f.changed
		f.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the store never had %s", what)
		}
	}
}

func (f *flakyShared) Admit(_ context.Context, _, _ string, limit, headroom float64, _ time.Duration) (string, int, float64, float64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return "", 0, 0, 0, errors.New("down")
	}
	if f.spent >= limit {
		return "", verdictOver, f.spent, 0, nil
	}
	f.n++
	id := fmt.Sprint(f.n)
	f.inFlight[id] = true
	return id, verdictAdmit, f.spent, 0, nil
}

func (f *flakyShared) Settle(ctx context.Context, _, _, id string, cost float64, partial bool, _ float64) (float64, float64, float64, error) {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return 0, 0, 0, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return 0, 0, 0, errors.New("down")
	}
	defer func() {
		close(f.changed)
		f.changed = make(chan struct{})
	}()
	f.ids = append(f.ids, id)
	delete(f.inFlight, id)
	if id == "" || !f.settled[id] {
		if id != "" {
			f.settled[id] = true
		}
		f.spent += cost
		if partial {
			f.partial += cost
		}
	}
	if f.lose {
		f.lose = false
		return 0, 0, 0, errors.New("reply lost")
	}
	return f.spent, 0, f.partial, nil
}

func (f *flakyShared) Usage(context.Context, string, string, float64) (float64, float64, float64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return 0, 0, 0, errors.New("down")
	}
	return f.spent, 0, f.partial, nil
}

func (f *flakyShared) setDown(d bool) {
	f.mu.Lock()
	f.down = d
	back := f.back
	f.mu.Unlock()
	if !d {
		for _, fn := range back {
			go fn()
		}
	}
}

func TestBudgetSharedStoreGoesAndComesBack(t *testing.T) {
	sh := newFlakyShared()
	b := newBudgetBook(map[string]Budget{"k": {Joules: 10, Per: "day"}}, time.Now)
	b.setShared(sh)
	ctx := context.Background()
	r, err := b.admit(ctx, "k")
	if err != nil || r.shared == "" {
		t.Fatalf("shared admission: %+v %v", r, err)
	}
	sh.setDown(true)
	// The call admitted in the store settles while it is down; a call is admitted locally.
	if left, _ := b.settle(r, whole(3)); left.joules != 7 {
		t.Fatalf("left %v while the store is down", left)
	}
	r2, err := b.admit(ctx, "k")
	if err != nil || r2.shared != "" {
		t.Fatalf("local admission: %+v %v", r2, err)
	}
	_, _ = b.settle(r2, partialFig(2))
	if left, _ := b.remaining("k"); left.coverage() != energy.CoveragePartial {
		t.Fatalf("a partial settle during the outage: %+v", left)
	}
	sh.setDown(false)
	// Back: both settles reach the store, in the background, and the reservation no longer
	// holds room there.
	r3, err := b.admit(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	sh.waitStore(t, "the late settles", func() bool { return sh.spent == 5 })
	sh.mu.Lock()
	spent, partial, held := sh.spent, sh.partial, len(sh.inFlight)
	sh.mu.Unlock()
	if spent != 5 || partial != 2 || held != 1 {
		t.Fatalf("store after the outage: spent %v (%v partial), %d in flight (want 5, 2 and r3 alone)", spent, partial, held)
	}
	if left, _ := b.settle(r3, whole(1)); left.joules != 4 || left.partial != 2 || left.coverage() != energy.CoveragePartial {
		t.Fatalf("after the outage: %+v", left)
	}
}

// Another replica's partial spend, seen in the store, is this replica's figure when the store
// goes away: the budget still says partial.
func TestBudgetSharedPartialOutlivesOutage(t *testing.T) {
	sh := newFlakyShared() // another replica's call:
	sh.spent, sh.partial = 4, 4
	b := newBudgetBook(map[string]Budget{"k": {Joules: 10, Per: "day"}}, time.Now)
	b.shared = sh
	if left, _ := b.remaining("k"); left.joules != 6 || left.coverage() != energy.CoveragePartial {
		t.Fatalf("from the store: %+v", left)
	}
	r, err := b.admit(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if left, _ := b.settle(r, whole(1)); left.joules != 5 || left.partial != 4 {
		t.Fatalf("settled in the store: %+v", left)
	}
	sh.setDown(true)
	if left, _ := b.remaining("k"); left.joules != 5 || left.partial != 4 || left.coverage() != energy.CoveragePartial {
		t.Fatalf("store down: %+v (want the store's last figures, partial)", left)
	}
}

// After an outage the settles the store missed are replayed in the background: an admission
// does not wait for them.
func TestBudgetLateSettlesOffTheRequestPath(t *testing.T) {
	sh := newFlakyShared()
	b := newBudgetBook(map[string]Budget{"k": {Joules: 100, Per: "day"}}, time.Now)
	b.setShared(sh)
	ctx := context.Background()
	r, err := b.admit(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	sh.setDown(true)
	_, _ = b.settle(r, whole(3))
	r2, err := b.admit(ctx, "k") // local
	if err != nil || r2.shared != "" {
		t.Fatalf("local admission: %+v %v", r2, err)
	}
	_, _ = b.settle(r2, whole(2))
	gate := make(chan struct{})
	sh.mu.Lock()
	sh.gate = gate // the late settles hang in the store until the gate opens
	sh.mu.Unlock()
	sh.setDown(false)
	start := time.Now()
	admitted := make(chan error, 1)
	go func() {
		_, err := b.admit(ctx, "k")
		admitted <- err
	}()
	select {
	case err := <-admitted:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("admitted in %v while the late settles hung", time.Since(start))
	case <-time.After(10 * time.Second):
		close(gate)
		t.Fatal("the admission waited for the late settles")
	}
	sh.mu.Lock()
	if sh.spent != 0 {
		t.Errorf("the store booked %v J before the gate opened", sh.spent)
	}
	sh.gate = nil
	sh.mu.Unlock()
	close(gate)
	sh.waitStore(t, "the late settles", func() bool { return sh.spent == 5 })
}

// A locally admitted call's settle whose reply was lost is replayed with the same id, so the
// store books it once.
func TestBudgetReplayedLocalSettleBookedOnce(t *testing.T) {
	sh := newFlakyShared()
	b := newBudgetBook(map[string]Budget{"k": {Joules: 100, Per: "day"}}, time.Now)
	b.setShared(sh)
	ctx := context.Background()
	sh.setDown(true)
	r, err := b.admit(ctx, "k") // local
	if err != nil || r.shared != "" {
		t.Fatalf("local admission: %+v %v", r, err)
	}
	sh.setDown(false)
	sh.mu.Lock()
	sh.lose = true
	sh.mu.Unlock()
	_, _ = b.settle(r, whole(2)) // booked, but the reply is lost: kept for the replay
	sh.setDown(false)            // the store says it is back: the replay runs
	if _, err := b.admit(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	sh.waitStore(t, "the replayed settle", func() bool { return len(sh.ids) == 2 })
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.ids[0] == "" || sh.ids[1] != sh.ids[0] {
		t.Fatalf("settle ids %q: want one id, twice", sh.ids)
	}
	if sh.spent != 2 {
		t.Fatalf("the store booked %v J for a 2 J call", sh.spent)
	}
}

// A provisional figure books its High at the response, in the response's period, and ends the
// reservation then; its settlement books the difference to that period, in the store under an
// id of its own, even when it comes after the period ended.
func TestBudgetSettleHighThenAdjust(t *testing.T) {
	now := time.Date(2026, 12, 2, 23, 59, 59, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	b := newBudgetBook(map[string]Budget{"k": {Joules: 100, Per: "day"}}, clock)
	r, err := b.admit(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	fig := energy.Figure{Joules: 10, Low: 8, High: 14, Grade: energy.Measured, Coverage: energy.CoverageWhole, Provisional: true}
	left, h, ok := b.settleHigh(r, fig)
	if !ok || left.joules != 100-14-0 || b.books["k"].inFlight != 0 || h.period != "2026-12-02" {
		t.Fatalf("settleHigh: left %+v, held %+v, in flight %d", left, h, b.books["k"].inFlight)
	}
	// The next call is admitted at once (the rule would make it wait while one is in flight).
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.admit(ctx, "k"); err != nil {
		t.Fatalf("next call: %v", err)
	}
	b.books["k"].inFlight = 0
	b.adjust(h, whole(12))
	if left, _ := b.remaining("k"); left.joules != 88 {
		t.Fatalf("after the settlement: %+v, want 88", left)
	}
	// A settlement after midnight books to the call's day, not the next one.
	r, _ = b.admit(context.Background(), "k")
	_, h, _ = b.settleHigh(r, fig)
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	b.adjust(h, whole(12))
	if left, _ := b.remaining("k"); left.joules != 100 {
		t.Fatalf("the next day: %+v, want 100 untouched", left)
	}

	sh := newFlakyShared()
	b = newBudgetBook(map[string]Budget{"k": {Joules: 100, Per: "day"}}, clock)
	b.setShared(sh)
	r, _ = b.admit(context.Background(), "k")
	_, h, _ = b.settleHigh(r, fig)
	b.adjust(h, whole(12))
	b.adjust(h, whole(12)) // retried: booked once
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.spent != 12 || len(sh.inFlight) != 0 || len(sh.ids) != 3 || sh.ids[1] != r.shared+"/settled" {
		t.Fatalf("store: spent %v, in flight %v, ids %v", sh.spent, sh.inFlight, sh.ids)
	}
}
