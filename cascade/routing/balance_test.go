package routing

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/energy"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

type stubBackend struct{}

func (stubBackend) Chat(context.Context, *cascade.Request, cascade.Sink) (*cascade.Answer, error) {
	return nil, errors.New("stub")
}

// pingBackend answers its ping with err, counting the pings.
type pingBackend struct {
	stubBackend
	mu    sync.Mutex
	err   error
	pings atomic.Int64
}

func (p *pingBackend) Ping(context.Context) error {
	p.pings.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newTestRouter(t *testing.T, o Options, names ...string) *Router {
	t.Helper()
	routes := make([]Route, len(names))
	for i, n := range names {
		routes[i] = Route{Name: n, Patterns: []string{"m*"}, Backend: stubBackend{}}
	}
	r, err := New(routes, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func names(rs []*Route) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	return out
}

func firstOf(t *testing.T, r *Router, model string) string {
	t.Helper()
	c, err := r.Candidates(model)
	if err != nil {
		t.Fatal(err)
	}
	return c[0].Name
}

func TestStrategiesOrderTheGroup(t *testing.T) {
	t.Run("fallback keeps config order", func(t *testing.T) {
		r := newTestRouter(t, Options{}, "a", "b", "c")
		for range 3 {
			c, _ := r.Candidates("m1")
			if got := names(c); got[0] != "a" || got[1] != "b" || got[2] != "c" {
				t.Fatalf("order %v", got)
			}
		}
	})
	t.Run("round-robin starts at the next in turn", func(t *testing.T) {
		r := newTestRouter(t, Options{Policies: []Policy{{Patterns: []string{"m*"}, Strategy: RoundRobin}}}, "a", "b", "c")
		var got []string
		for range 4 {
			c, _ := r.Candidates("m1")
			if len(c) != 3 {
				t.Fatalf("%d candidates", len(c))
			}
			got = append(got, c[0].Name)
		}
		if want := []string{"a", "b", "c", "a"}; !equal(got, want) {
			t.Fatalf("firsts %v, want %v", got, want)
		}
	})
	t.Run("least-busy starts at the fewest in flight", func(t *testing.T) {
		r := newTestRouter(t, Options{Policies: []Policy{{Patterns: []string{"*"}, Strategy: LeastBusy}}}, "a", "b")
		doneA := r.Start(&r.routes[0])
		if got := firstOf(t, r, "m1"); got != "b" {
			t.Fatalf("first %s with a busy", got)
		}
		doneB1, doneB2 := r.Start(&r.routes[1]), r.Start(&r.routes[1])
		if got := firstOf(t, r, "m1"); got != "a" {
			t.Fatalf("first %s with b busier", got)
		}
		doneA(Succeeded)
		doneB1(Succeeded)
		doneB2(Succeeded)
	})
	t.Run("unknown model", func(t *testing.T) {
		r := newTestRouter(t, Options{}, "a")
		if _, err := r.Candidates("other"); !errors.Is(err, cascade.ErrModelNotFound) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("bad strategy", func(t *testing.T) {
		_, err := New([]Route{{Name: "a", Patterns: []string{"*"}}}, Options{Policies: []Policy{{Patterns: []string{"*"}, Strategy: "fastest"}}})
		if err == nil {
			t.Fatal("no error")
		}
	})
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func measured(j float64) energy.Figure {
	return energy.Figure{Joules: j, Grade: energy.Measured, Coverage: energy.CoverageWhole, Method: "rapl"}
}

func estimated(j float64) energy.Figure {
	return energy.Figure{Joules: j, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "token-model", Reason: "no-rapl"}
}

// TestLeastJoulesMovesToTheCheaper: with two backends whose measured costs differ, the calls
// move to the cheaper one once both have a figure; exploration keeps the dearer one's figure
// fresh, so when costs swap, the calls follow.
func TestLeastJoulesMovesToTheCheaper(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	r := newTestRouter(t, Options{Policies: []Policy{{Patterns: []string{"*"}, Strategy: LeastJoules}}, Rand: rng.Float64}, "dear", "cheap")
	cost := map[string]float64{"dear": 5, "cheap": 1} // J per completion token
	run := func(n int) map[string]int {
		calls := map[string]int{}
		for range n {
			c, err := r.Candidates("m1")
			if err != nil {
				t.Fatal(err)
			}
			rt := c[0]
			calls[rt.Name]++
			r.ObserveCost(rt, "m1", measured(cost[rt.Name]*10), 10)
		}
		return calls
	}
	calls := run(400)
	if calls["cheap"] < 360 || calls["dear"] == 0 {
		t.Fatalf("calls %v: want nearly all on cheap, a few exploring dear", calls)
	}
	cost["dear"], cost["cheap"] = 0.5, 1
	run(400) // the exploring calls see that dear got cheaper
	calls = run(400)
	if calls["dear"] < 360 {
		t.Fatalf("after the swap, calls %v: want nearly all on dear", calls)
	}
}

// TestLeastJoulesWithoutAFigure: a backend with no figure yet is not assumed free or dear: it
// is tried first, once, to get one; a backend known only by estimate is not compared with
// measured figures.
func TestLeastJoulesWithoutAFigure(t *testing.T) {
	never := func() float64 { return 0.99 } // no exploration
	r := newTestRouter(t, Options{Policies: []Policy{{Patterns: []string{"*"}, Strategy: LeastJoules}}, Rand: never}, "a", "b")
	if got := firstOf(t, r, "m1"); got != "a" {
		t.Fatalf("no figures: first %s, want config order", got)
	}
	r.ObserveCost(&r.routes[0], "m1", measured(10), 10) // a: 1 J/token
	if got := firstOf(t, r, "m1"); got != "b" {
		t.Fatalf("b has no figure yet: first %s, want b", got)
	}
	// A failed call (no tokens) makes no per-token figure.
	r.ObserveCost(&r.routes[1], "m1", measured(3), 0)
	if got := firstOf(t, r, "m1"); got != "b" {
		t.Fatalf("b still has no per-token figure: first %s", got)
	}
	r.ObserveCost(&r.routes[1], "m1", estimated(1), 10) // b: 0.1 J/token, but only estimated
	if got := firstOf(t, r, "m1"); got != "a" {
		t.Fatalf("b's estimate beat a's measurement: first %s", got)
	}
	r.ObserveCost(&r.routes[1], "m1", measured(20), 10) // b: 2 J/token measured
	if got := firstOf(t, r, "m1"); got != "a" {
		t.Fatalf("first %s, want a (1 < 2 J/token)", got)
	}
	// Figures are per model.
	if got := firstOf(t, r, "m2"); got != "a" {
		t.Fatalf("m2 has no figures: first %s, want config order", got)
	}
	r.ObserveCost(&r.routes[0], "m2", measured(50), 10)
	if got := firstOf(t, r, "m2"); got != "b" {
		t.Fatalf("m2: first %s, want b (no figure)", got)
	}
	// Exploration starts at a random backend.
	seq := []float64{0.01, 0.7}
	r.opts.Rand = func() float64 { v := seq[0]; seq = seq[1:]; return v }
	if got := firstOf(t, r, "m1"); got != "b" {
		t.Fatalf("exploring: first %s, want b", got)
	}
}

// TestLeastJoulesTokenlessBackend: a backend whose answers never carry completion tokens gets a
// few calls to make a figure, then stops taking every call.
func TestLeastJoulesTokenlessBackend(t *testing.T) {
	never := func() float64 { return 0.99 } // no exploration
	r := newTestRouter(t, Options{Policies: []Policy{{Patterns: []string{"*"}, Strategy: LeastJoules}}, Rand: never}, "a", "b")
	r.ObserveCost(&r.routes[0], "m1", measured(10), 10) // a: 1 J/token
	for i := range unfiguredTries {
		if got := firstOf(t, r, "m1"); got != "b" {
			t.Fatalf("call %d: first %s, want b (no figure yet)", i, got)
		}
		r.ObserveCost(&r.routes[1], "m1", measured(5), 0) // answered, no tokens
	}
	if got := firstOf(t, r, "m1"); got != "a" {
		t.Fatalf("after %d tokenless calls: first %s, want a (the one with a figure)", unfiguredTries, got)
	}
}

// TestEjectionAndProbe: failures in a row eject a backend for the cooldown; then one call
// probes it (a backend without a health check), and its outcome re-admits it or starts
// another cooldown.
func TestEjectionAndProbe(t *testing.T) {
	clk := &clock{now: time.Unix(1000, 0)}
	r := newTestRouter(t, Options{EjectAfter: 2, Cooldown: 10 * time.Second, Now: clk.Now}, "a", "b")
	a := &r.routes[0]
	r.Start(a)(Failed)
	r.Start(a)(Succeeded) // a success breaks the run
	r.Start(a)(Failed)
	if !r.Up("a") {
		t.Fatal("ejected after failures not in a row")
	}
	r.Start(a)(Neutral) // a client that left says nothing
	r.Start(a)(Failed)
	if r.Up("a") {
		t.Fatal("not ejected after 2 failures in a row")
	}
	if got := names(mustCandidates(t, r)); !equal(got, []string{"b"}) {
		t.Fatalf("candidates %v while a is ejected", got)
	}
	clk.Add(11 * time.Second)
	if got := names(mustCandidates(t, r)); !equal(got, []string{"a", "b"}) {
		t.Fatalf("candidates %v after the cooldown: want a probed first", got)
	}
	if got := names(mustCandidates(t, r)); !equal(got, []string{"b"}) {
		t.Fatalf("candidates %v: one probe at a time", got)
	}
	r.Start(a)(Failed) // the probe failed: another cooldown
	clk.Add(5 * time.Second)
	if got := names(mustCandidates(t, r)); !equal(got, []string{"b"}) || r.Up("a") {
		t.Fatalf("candidates %v within the second cooldown", got)
	}
	clk.Add(6 * time.Second)
	if got := names(mustCandidates(t, r)); got[0] != "a" {
		t.Fatalf("candidates %v after the second cooldown", got)
	}
	r.Start(a)(Succeeded)
	if !r.Up("a") {
		t.Fatal("a successful probe did not re-admit")
	}
	if got := names(mustCandidates(t, r)); !equal(got, []string{"a", "b"}) {
		t.Fatalf("candidates %v after re-admission", got)
	}
}

// TestAbandonedProbeExpires: a probe handed to a call that never makes it (the call stopped at
// another backend) does not keep the backend ejected for good: after another cooldown the next
// call probes it.
func TestAbandonedProbeExpires(t *testing.T) {
	clk := &clock{now: time.Unix(1000, 0)}
	r := newTestRouter(t, Options{EjectAfter: 1, Cooldown: 10 * time.Second, Now: clk.Now}, "a", "b")
	r.Start(&r.routes[0])(Failed)
	clk.Add(11 * time.Second)
	if got := names(mustCandidates(t, r)); got[0] != "a" {
		t.Fatalf("candidates %v after the cooldown: want a probed first", got)
	}
	// That call never tried a. Within the next cooldown nobody else probes it...
	clk.Add(5 * time.Second)
	if got := names(mustCandidates(t, r)); !equal(got, []string{"b"}) {
		t.Fatalf("candidates %v while the probe may still be under way", got)
	}
	// ...after it, the next call does.
	clk.Add(6 * time.Second)
	if got := names(mustCandidates(t, r)); got[0] != "a" {
		t.Fatalf("candidates %v: an abandoned probe kept a ejected", got)
	}
}

func mustCandidates(t *testing.T, r *Router) []*Route {
	t.Helper()
	c, err := r.Candidates("m1")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestProbeByHealthCheck: an ejected backend with a health check is probed by it in the
// background after the cooldown, and re-admitted when it answers.
func TestProbeByHealthCheck(t *testing.T) {
	clk := &clock{now: time.Unix(1000, 0)}
	pb := &pingBackend{err: errors.New("down")}
	r, err := New([]Route{
		{Name: "a", Patterns: []string{"*"}, Backend: pb},
		{Name: "b", Patterns: []string{"*"}, Backend: stubBackend{}},
	}, Options{EjectAfter: 1, Cooldown: 10 * time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	r.Start(&r.routes[0])(Failed)
	clk.Add(11 * time.Second)
	if got := names(mustCandidates(t, r)); !equal(got, []string{"b"}) {
		t.Fatalf("candidates %v: a backend with a health check is not probed by a call", got)
	}
	waitFor(t, func() bool { return pb.pings.Load() == 1 })
	waitFor(t, func() bool { // the failed probe starts another cooldown
		r.routes[0].st.mu.Lock()
		defer r.routes[0].st.mu.Unlock()
		return !r.routes[0].st.probing
	})
	if r.Up("a") {
		t.Fatal("re-admitted by a failed health check")
	}
	pb.mu.Lock()
	pb.err = nil
	pb.mu.Unlock()
	mustCandidates(t, r) // within the cooldown: no probe
	clk.Add(11 * time.Second)
	mustCandidates(t, r)
	waitFor(t, func() bool { return r.Up("a") })
	if pb.pings.Load() != 2 {
		t.Fatalf("%d pings, want 2", pb.pings.Load())
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEveryBackendEjected: when every backend of a model is ejected they are all tried, in
// config order, rather than none.
func TestEveryBackendEjected(t *testing.T) {
	r := newTestRouter(t, Options{EjectAfter: 1, Cooldown: time.Hour}, "a", "b")
	r.Start(&r.routes[0])(Failed)
	r.Start(&r.routes[1])(Failed)
	if got := names(mustCandidates(t, r)); !equal(got, []string{"a", "b"}) {
		t.Fatalf("candidates %v", got)
	}
}

// TestReadyPerModelGroup: ready while every group has a live backend.
func TestReadyPerModelGroup(t *testing.T) {
	down := &pingBackend{err: errors.New("refused")}
	up := &pingBackend{}
	r, err := New([]Route{
		{Name: "llama-1", Patterns: []string{"llama*"}, Backend: down},
		{Name: "llama-2", Patterns: []string{"llama*"}, Backend: up},
		{Name: "gpt", Patterns: []string{"gpt-*"}, Backend: stubBackend{}},
	}, Options{EjectAfter: 1, Cooldown: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Ready(context.Background()); err != nil {
		t.Fatalf("llama has a live backend: %v", err)
	}
	r.Start(&r.routes[2])(Failed) // gpt's only backend ejected
	if err := r.Ready(context.Background()); err == nil {
		t.Fatal("ready with gpt's only backend ejected")
	}

	// A down backend with two patterns is covered only when both are: qwen has no other backend.
	r, err = New([]Route{
		{Name: "a", Patterns: []string{"llama*", "qwen*"}, Backend: down},
		{Name: "b", Patterns: []string{"llama*"}, Backend: up},
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Ready(context.Background()); err == nil {
		t.Fatal("ready while qwen* has no live backend")
	}
}
