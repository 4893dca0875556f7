package proxy

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// settleWait bounds the wait for a call's figure to settle after its response: the meter needs
// a few of NVML's update periods at most. Past it, the call keeps its provisional figure.
const settleWait = 5 * time.Second

// callWait bounds GET /v1/eoc/calls/{request_id}?wait=1.
const callWait = 2 * time.Second

// settleLater settles a call whose response carried a provisional figure, off the request's
// path: it waits for the settled figure (at most settleWait), records it in the ledger as a
// settlement of the call's record, and only then books the call's metrics and page figures, with
// the settled figure, once. The budget took the figure's High at the response (held), so the
// key's next call did not wait for this; here it books what the settled figure costs less. When
// the wait fails, they take the provisional figure, and the call's record, already written,
// stands as it is (marked provisional). recorded says the call's own record was written: a
// settlement is recorded only after it. Close waits for these.
func (s *Server) settleLater(c *Call, held heldCost, recorded bool, model string, total time.Duration) {
	done := c.settled // the calls table's entry waits on it (settle made both)
	settle := c.settle
	s.settleMu.Lock()
	closed := s.settleClosed
	if !closed {
		s.settling.Add(1)
	}
	s.settleMu.Unlock()
	if closed {
		// Close has run (the ledger may be closing): the provisional figure stands, and the
		// budget, metrics and calls table take it now.
		settle = func(context.Context) (energy.Figure, error) { return c.Energy, errShuttingDown }
	}
	run := func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), settleWait)
		fig, err := settle(ctx)
		cancel()
		final, receipt, why := fig.Rounded(), "", ""
		now := time.Now()
		switch {
		case err != nil || final.IsZero():
			why = "the settled figure could not be made"
			if errors.Is(err, context.DeadlineExceeded) {
				why = "the counter did not update in time"
			} else if errors.Is(err, errShuttingDown) {
				why = "the proxy was shutting down"
			}
			s.log.Warn().AnErr("error", err).Str("request_id", c.RequestID).Msg("figure not settled; the call keeps its provisional figure")
			final = c.Energy
		default:
			if final.Provisional {
				// A part with no settlement of its own (an embedder that cannot say how to
				// settle its figure): the rest settled, that part's bounds still hold.
				why = "a part of the figure has no settlement of its own"
			}
			receipt = energy.Receipt{Key: c.Key, Stage: c.Stage, Model: c.Model, Joules: final.Joules,
				Grade: final.Grade, Time: now}.Hash()
			switch {
			case !recorded && s.opts.Record != nil:
				// A settlement names the call's record: without it, the chain would not verify
				// from there. The budget, metrics and calls table still take the settled figure.
				s.log.Error().Str("request_id", c.RequestID).Msg("ledger: settlement not written, the call's own record was not")
				receipt = ""
			case s.opts.Record != nil:
				sc := *c
				sc.Time, sc.Energy, sc.Receipt, sc.Settles, sc.Attempts = now, final, receipt, c.Receipt, nil
				if rerr := s.opts.Record(sc); rerr != nil {
					s.log.Error().Err(rerr).Str("request_id", c.RequestID).Msg("ledger: settlement not written")
					receipt = ""
				}
			}
		}
		s.budgets.adjust(held, final)
		s.metrics.observe(c, final, s.metrics.label(model), total)
		s.ui.observe(c, model, final, receipt, now)
		s.calls.settled(c.KeyID, c.RequestID, final, receipt, why)
	}
	if closed {
		run()
		return
	}
	go func() {
		defer s.settling.Done()
		run()
	}()
}

// errShuttingDown is a settlement skipped because Close has run.
var errShuttingDown = errors.New("the proxy is shutting down")

// Close waits until every call whose figure was settling after its response is settled and
// recorded (each waits at most settleWait). A call that ends after it keeps its provisional
// figure: its settlement is not recorded. Call it once the HTTP server has stopped (its
// handlers returned: their reports are done), before the ledger closes.
func (s *Server) Close() error {
	s.settleMu.Lock()
	s.settleClosed = true
	s.settleMu.Unlock()
	s.settling.Wait()
	return nil
}

// Bounds of the calls table, per key: a key's calls beyond either drop its oldest; and across
// keys: past maxCallBytes, the key holding the most bytes drops its oldest.
const (
	maxCallsPerKey     = 4096
	maxCallBytesPerKey = 2 << 20
	maxCallBytes       = 64 << 20
)

// callsTable keeps each key's recent calls for GET /v1/eoc/calls/{request_id}: the figure the
// response carried and, once settled, the settled one. Each key's calls are bounded by count and
// bytes, its oldest dropped first, so that no key crowds out another's (the keys are the
// configured ones, or "" when auth is off). It is safe for concurrent use.
type callsTable struct {
	mu    sync.Mutex
	keys  map[string]*keyCalls
	bytes int // across keys
	// waiting, when set (tests), is called when a ?wait=1 read starts waiting for id.
	waiting func(id string)
}

// keyCalls are one key's calls: a ring of entries, oldest first, that grows up to
// maxCallsPerKey, so that a call's entry is no allocation of its own.
type keyCalls struct {
	byID  map[string]int // request id → its entry's slot in ring
	ring  []callEntry
	head  int // the oldest entry's slot
	n     int // the entries held
	bytes int
}

// grow doubles the ring, at most to maxCallsPerKey, keeping the entries' order.
func (k *keyCalls) grow() {
	ring := make([]callEntry, min(max(2*len(k.ring), 8), maxCallsPerKey))
	for i := range k.n {
		ring[i] = k.ring[(k.head+i)%len(k.ring)]
		k.byID[ring[i].id] = i
	}
	k.ring, k.head = ring, 0
}

// callEntry is one call: the fields of its figures the endpoint shows (the ledger has the rest).
type callEntry struct {
	id            string      // the request id
	response      energy.View // the figure the response carried
	receipt       string
	receiptTime   time.Time
	final         energy.View   // the settled figure, or the response's when the wait failed
	finalState    string        // final's X-EOC-Joules-State
	finalReceipt  string        // the settlement's receipt
	settled       bool          // final is known: at once, or after the wait
	settleProblem string        // why the figure did not settle, when it did not
	done          chan struct{} // closed once settled; nil when final at once
	size          int
}

func newCallsTable() *callsTable { return &callsTable{keys: map[string]*keyCalls{}} }

// entrySize is about what an entry holds, in bytes.
func entrySize(id string, fig energy.Figure) int {
	return 320 + len(id) + 2*(len(fig.Method)+len(fig.Reason)+len(fig.Coverage))
}

// put adds call c of its key with the figure its response carried; done, when set, is closed
// once settled is called for it.
func (t *callsTable) put(c *Call, done chan struct{}) {
	key, id := c.KeyID, c.RequestID
	e := callEntry{id: id, response: c.Energy.View(), receipt: c.Receipt, receiptTime: c.Time, done: done,
		size: entrySize(id, c.Energy)}
	if done == nil {
		e.final, e.finalState, e.settled = e.response, stateOf(c.Energy), true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	k := t.keys[key]
	if k == nil {
		k = &keyCalls{byID: map[string]int{}}
		t.keys[key] = k
	}
	if slot, ok := k.byID[id]; ok { // request ids are random: only a replayed id lands here
		old := &k.ring[slot]
		k.bytes -= old.size
		t.bytes -= old.size
		*old = e // where the id was: its age is the first call's
	} else {
		if k.n == len(k.ring) {
			if len(k.ring) == maxCallsPerKey {
				t.dropOldest(k)
			} else {
				k.grow()
			}
		}
		slot := (k.head + k.n) % len(k.ring)
		k.ring[slot] = e
		k.byID[id] = slot
		k.n++
	}
	k.bytes += e.size
	t.bytes += e.size
	for k.n > 0 && k.bytes > maxCallBytesPerKey {
		t.dropOldest(k)
	}
	for t.bytes > maxCallBytes {
		var most *keyCalls
		for _, kc := range t.keys {
			if most == nil || kc.bytes > most.bytes {
				most = kc
			}
		}
		if most == nil || most.n == 0 {
			break
		}
		t.dropOldest(most)
	}
}

// dropOldest drops k's oldest call. t.mu is held.
func (t *callsTable) dropOldest(k *keyCalls) {
	o := &k.ring[k.head]
	k.bytes -= o.size
	t.bytes -= o.size
	delete(k.byID, o.id)
	*o = callEntry{}
	k.head = (k.head + 1) % len(k.ring)
	k.n--
}

// settled sets the final figure of key's call id; problem says why it is the response's own.
func (t *callsTable) settled(key, id string, fig energy.Figure, receipt, problem string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if k := t.keys[key]; k != nil {
		if slot, ok := k.byID[id]; ok {
			e := &k.ring[slot]
			e.final, e.finalState, e.finalReceipt, e.settled, e.settleProblem = fig.View(), stateOf(fig), receipt, true, problem
		}
	}
}

// get returns a copy of key's call id and its done channel.
func (t *callsTable) get(key, id string) (callEntry, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if k := t.keys[key]; k != nil {
		if slot, ok := k.byID[id]; ok {
			return k.ring[slot], true
		}
	}
	return callEntry{}, false
}

// CallFigure is what GET /v1/eoc/calls/{request_id} answers: the call's figure, the settled one
// once known (State "settled"), else the one its response carried (State "provisional"), and
// the response's own figure under Provisional.
type CallFigure struct {
	RequestID string `json:"request_id"`
	State     string `json:"state"`
	energy.View
	// Receipt is the client's receipt (X-EOC-Receipt), of the response's figure, and
	// ReceiptTime its time (X-EOC-Receipt-Time).
	Receipt     string `json:"receipt"`
	ReceiptTime string `json:"receipt_time"`
	// SettledReceipt is the ledger's receipt of the settled figure (its settlement record's).
	SettledReceipt string `json:"settled_receipt,omitempty"`
	// Unsettled says why a provisional figure will not settle (the counter's wait failed): it
	// stands, as the ledger keeps it.
	Unsettled   string      `json:"unsettled,omitempty"`
	Provisional energy.View `json:"provisional"`
}

func (e *callEntry) view(id string) CallFigure {
	v := CallFigure{RequestID: id, State: StateProvisional, View: e.response, Receipt: e.receipt,
		ReceiptTime: e.receiptTime.UTC().Format(time.RFC3339Nano), Provisional: e.response}
	if e.settled {
		v.View, v.State = e.final, e.finalState
		v.SettledReceipt, v.Unsettled = e.finalReceipt, e.settleProblem
	}
	return v
}

// callFigure serves GET /v1/eoc/calls/{request_id}: a call of the caller's key (any call when
// auth is off), from the table. With ?wait=1 it waits, at most callWait, for the figure to
// settle.
func (s *Server) callFigure(w http.ResponseWriter, r *http.Request) {
	id, key := chi.URLParam(r, "request_id"), fields(r.Context()).tenant
	e, ok := s.calls.get(key, id)
	if !ok {
		writeError(w, &APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "call_not_found",
			Message: "no recent call of this key has that request id (the ledger keeps every call)"})
		return
	}
	if wait := r.URL.Query().Get("wait"); !e.settled && e.done != nil && (wait == "1" || wait == "true") {
		if s.calls.waiting != nil {
			s.calls.waiting(id)
		}
		t := time.NewTimer(callWait)
		select {
		case <-e.done:
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
		if now, ok := s.calls.get(key, id); ok { // dropped meanwhile: what was read stands
			e = now
		}
	}
	writeJSON(w, http.StatusOK, e.view(id))
}
