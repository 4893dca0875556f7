package routing

import (
	"context"
	"math/rand/v2"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

// Strategy orders a model's backends for one call. Every strategy keeps the others as fallbacks
// behind its first choice.
type Strategy string

// Strategies.
const (
	// Fallback tries the backends in config order.
	Fallback Strategy = "fallback"
	// RoundRobin starts each call at the next backend in turn.
	RoundRobin Strategy = "round-robin"
	// LeastBusy starts with the backend that has the fewest calls of this proxy in flight.
	LeastBusy Strategy = "least-busy"
	// LeastJoules starts with the backend whose running joules per completion token for the
	// model, measured preferred, is lowest; a backend with no figure yet goes first, so that it
	// gets one, and a share of calls (Options.Explore) starts at a random backend so that
	// every figure stays fresh.
	LeastJoules Strategy = "least-joules"
)

// Strategies lists the strategy names, the default first.
func Strategies() []string {
	return []string{string(Fallback), string(RoundRobin), string(LeastBusy), string(LeastJoules)}
}

// Policy gives the models matching Patterns (path.Match globs) a strategy.
type Policy struct {
	Patterns []string
	Strategy Strategy
}

// Defaults of Options; config leaves these settings zero and cmd fills them from here.
const (
	DefaultEjectAfter   = 3
	DefaultCooldown     = 30 * time.Second
	DefaultExplore      = 0.05
	DefaultProbeTimeout = 5 * time.Second
)

// Options configure how a Router spreads calls over a model's backends and when it
// leaves a failing one out. The zero value is usable: fallback for every model, the defaults
// above, the real clock and a random source.
type Options struct {
	// Policies give models a strategy: the first policy with a matching pattern wins; a model
	// that matches none is routed by Fallback.
	Policies []Policy
	// EjectAfter is the number of failed attempts in a row after which a backend is ejected
	// (0: DefaultEjectAfter).
	EjectAfter int
	// Cooldown is how long an ejected backend is skipped before a probe may re-admit it
	// (0: DefaultCooldown).
	Cooldown time.Duration
	// Explore is the share of least-joules calls that start at a random backend (0:
	// DefaultExplore; negative: none).
	Explore float64
	// ProbeTimeout bounds the health check that probes an ejected backend (0:
	// DefaultProbeTimeout).
	ProbeTimeout time.Duration
	// Now is the clock (nil: time.Now); Rand returns a number in [0, 1) (nil: math/rand/v2).
	// Both must be safe for concurrent use. Tests inject both.
	Now  func() time.Time
	Rand func() float64
}

func (o *Options) fill() {
	if o.EjectAfter <= 0 {
		o.EjectAfter = DefaultEjectAfter
	}
	if o.Cooldown <= 0 {
		o.Cooldown = DefaultCooldown
	}
	if o.Explore == 0 {
		o.Explore = DefaultExplore
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
}

// Verdict is what one attempt at a backend says about the backend's health.
type Verdict int

// Verdicts.
const (
	// Succeeded: the backend answered (a client error it rejected counts: it is up).
	Succeeded Verdict = iota
	// Failed: refused, reset, timed out, 5xx: a failure in a row towards ejection.
	Failed
	// Neutral: says nothing about the backend (the client went away, a rate limit).
	Neutral
)

// routeState is one backend's health and load. Its fields are guarded by mu, but inFlight.
type routeState struct {
	inFlight atomic.Int64

	mu       sync.Mutex
	fails    int       // failed attempts in a row
	ejected  bool      // skipped until cooldown, then probed
	until    time.Time // end of the cooldown
	probing  bool      // a probe (a health check, or one real call) is under way
	probeGen uint64    // bumped at each ejection, so a stale probe changes nothing
}

// live reports whether the route may take calls now.
func (st *routeState) live() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return !st.ejected
}

// Up reports whether the named backend is taking calls (not ejected). An unknown name is down.
func (r *Router) Up(name string) bool {
	for i := range r.routes {
		if r.routes[i].Name == name {
			return r.routes[i].st.live()
		}
	}
	return false
}

// Names lists the backends in config order.
func (r *Router) Names() []string {
	out := make([]string, len(r.routes))
	for i := range r.routes {
		out[i] = r.routes[i].Name
	}
	return out
}

// group is every route that serves model, in config order.
func (r *Router) group(model string) []*Route {
	var out []*Route
	for i := range r.routes {
		if r.routes[i].serves(model) {
			out = append(out, &r.routes[i])
		}
	}
	return out
}

// serves reports whether rt serves model, or every model the pattern model names: one of
// rt's patterns matches it or is the same pattern.
func (rt *Route) serves(model string) bool {
	for _, p := range rt.Patterns {
		if ok, _ := path.Match(p, model); ok || p == model {
			return true
		}
	}
	return false
}

// Candidates is the order in which one call of model tries its backends: a backend whose
// cooldown ended and that is probed by this very call first (one call at a time, for a backend
// without a health check), then the live ones in the order of the model's strategy. Ejected
// backends are left out, unless every backend of the model is ejected: then all are tried in
// config order rather than none. An unknown model is cascade.ErrModelNotFound.
func (r *Router) Candidates(model string) ([]*Route, error) {
	g := r.group(model)
	if len(g) == 0 {
		return nil, errModel(model)
	}
	now := r.opts.Now()
	var probes []*Route
	live := g[:0] // filtered in place: g is this call's own, and each write lands at or before the read
	for _, rt := range g {
		switch r.admit(rt, now) {
		case admitLive:
			live = append(live, rt)
		case admitProbe:
			probes = append(probes, rt)
		}
	}
	switch {
	case len(live)+len(probes) == 0:
		return g, nil // nothing was written over
	case len(probes) == 0:
		return r.order(model, live), nil
	}
	return append(probes, r.order(model, live)...), nil
}

type admission int

const (
	admitSkip admission = iota
	admitLive
	admitProbe
)

// admit says whether rt takes this call. An ejected backend past its cooldown is probed: by
// its health check in the background when it has one, else by this call.
func (r *Router) admit(rt *Route, now time.Time) admission {
	st := rt.st
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case !st.ejected:
		return admitLive
	case now.Before(st.until): // cooling down, or a probe is under way
		return admitSkip
	}
	// A probe handed to a call that never makes it (it stopped at an earlier candidate, or
	// could not use this one) expires after another cooldown, and the next call probes again.
	st.probing, st.until = true, now.Add(r.opts.Cooldown)
	if p, ok := rt.Backend.(cascade.Pinger); ok {
		go r.probe(rt, p, st.probeGen)
		return admitSkip
	}
	return admitProbe
}

// probeDue claims the probe of an ejected backend whose cooldown has ended, when it has a
// health check (pings) and no probe is under way; gen is for probe.
func (r *Router) probeDue(rt *Route, pings bool) (gen uint64, due bool) {
	st := rt.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if !pings || !st.ejected || st.probing || r.opts.Now().Before(st.until) {
		return 0, false
	}
	st.probing = true
	return st.probeGen, true
}

// probe runs an ejected backend's health check: it re-admits the backend, or starts another
// cooldown.
func (r *Router) probe(rt *Route, p cascade.Pinger, gen uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.ProbeTimeout)
	err := p.Ping(ctx)
	cancel()
	st := rt.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.probeGen != gen || !st.ejected {
		return
	}
	st.probing = false
	if err == nil {
		st.ejected, st.fails = false, 0
		return
	}
	st.until = r.opts.Now().Add(r.opts.Cooldown)
}

// Start counts a call of rt in flight; the returned func ends it with the attempt's verdict,
// which ejects or re-admits the backend. It must be called once.
func (r *Router) Start(rt *Route) func(Verdict) {
	st := rt.st
	st.inFlight.Add(1)
	return func(v Verdict) {
		st.inFlight.Add(-1)
		st.mu.Lock()
		defer st.mu.Unlock()
		switch v {
		case Succeeded:
			st.fails, st.ejected, st.probing = 0, false, false
		case Failed:
			st.fails++
			if (st.ejected && st.probing) || (!st.ejected && st.fails >= r.opts.EjectAfter) {
				st.ejected, st.probing = true, false
				st.until = r.opts.Now().Add(r.opts.Cooldown)
				st.probeGen++
			}
		case Neutral:
			if st.ejected {
				st.probing = false // let another call probe
			}
		}
	}
}

// ObserveCost records what a completed call of model on rt cost, for least-joules.
func (r *Router) ObserveCost(rt *Route, model string, f energy.Figure, completionTokens int) {
	r.costs.Observe(costModel(rt.Name, model), f, completionTokens)
}

// costModel names a backend's model in the router's own tracker, which keeps each pair apart.
func costModel(backend, model string) string { return backend + "\x00" + model }

// policy is the strategy of model and the index of its round-robin counter.
func (r *Router) policy(model string) (Strategy, int) {
	for i, p := range r.opts.Policies {
		for _, pat := range p.Patterns {
			if ok, _ := path.Match(pat, model); ok {
				return p.Strategy, i
			}
		}
	}
	return Fallback, len(r.opts.Policies)
}

// order sorts live (in config order) by the model's strategy.
func (r *Router) order(model string, live []*Route) []*Route {
	if len(live) < 2 {
		return live
	}
	strategy, i := r.policy(model)
	switch strategy {
	case RoundRobin:
		n := r.turns[i].Add(1) - 1
		return rotate(live, int(n%uint64(len(live))))
	case LeastBusy:
		best := 0
		for j, rt := range live {
			if rt.st.inFlight.Load() < live[best].st.inFlight.Load() {
				best = j
			}
		}
		return first(live, best)
	case LeastJoules:
		return first(live, r.cheapest(model, live))
	}
	return live
}

// unfiguredTries is how many calls least-joules gives a backend first to make its per-token
// figure; one whose answers never carry completion tokens then stops taking every call.
const unfiguredTries = 3

// cheapest is the index in live of the backend least-joules starts with.
func (r *Router) cheapest(model string, live []*Route) int {
	if r.opts.Explore > 0 && r.opts.Rand() < r.opts.Explore {
		return min(int(r.opts.Rand()*float64(len(live))), len(live)-1)
	}
	type figure struct {
		j        float64
		measured bool
		none     bool // answered, but never with completion tokens: no per-token figure to compare
	}
	figs := make([]figure, len(live))
	anyMeasured := false
	for j, rt := range live {
		m := costModel(rt.Name, model)
		jt, measured, ok := r.costs.PerToken(m)
		if !ok {
			if r.costs.Calls(m) < unfiguredTries {
				return j // no figure yet: this call may make one
			}
			// Calls that never report completion tokens make no figure: it goes behind those
			// with one, and exploration still reaches it.
			figs[j].none = true
			continue
		}
		figs[j] = figure{j: jt, measured: measured}
		anyMeasured = anyMeasured || measured
	}
	best := -1
	for j, f := range figs {
		// A measured figure is compared only with measured ones: an estimate is not a
		// measurement, and a backend known only by estimate goes behind the measured ones.
		if f.none || (anyMeasured && !f.measured) {
			continue
		}
		if best < 0 || f.j < figs[best].j {
			best = j
		}
	}
	return max(best, 0) // none has a figure: config order
}

// rotate returns rs starting at i, wrapping around.
func rotate(rs []*Route, i int) []*Route {
	out := make([]*Route, 0, len(rs))
	return append(append(out, rs[i:]...), rs[:i]...)
}

// first returns rs with rs[i] moved to the front, the others in their order.
func first(rs []*Route, i int) []*Route {
	if i == 0 {
		return rs
	}
	out := make([]*Route, 0, len(rs))
	out = append(out, rs[i])
	out = append(out, rs[:i]...)
	return append(out, rs[i+1:]...)
}
