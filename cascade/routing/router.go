// Package routing spreads each model's calls over the backends that serve it, by strategy, and
// ejects a failing backend until a probe re-admits it.
package routing

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

var _ cascade.Router = (*Router)(nil)

// Route is a backend with the model patterns it serves.
type Route struct {
	Name     string
	Type     string
	Patterns []string // path.Match globs; "*" matches every model
	Backend  cascade.Backend

	st *routeState // set by New
}

// Router knows which backends serve which model. Every backend whose patterns match a model
// is in the model's group, in config order; Candidates orders the group for one call by the
// model's strategy, leaving ejected backends out. It is safe for concurrent use.
type Router struct {
	routes []Route
	opts   Options
	costs  *energy.Tracker // running J per completion token, per backend and model
	turns  []atomic.Uint64 // round-robin counters, one per policy and one for the rest
}

// New checks the patterns and strategies and returns a Router over routes in order; the zero
// Options are the defaults.
func New(routes []Route, o Options) (*Router, error) {
	for _, r := range routes {
		if err := checkPatterns(r.Patterns); err != nil {
			return nil, fmt.Errorf("backend %s: %w", r.Name, err)
		}
	}
	o.Policies = slices.Clone(o.Policies)
	for i, p := range o.Policies {
		if err := checkPatterns(p.Patterns); err != nil {
			return nil, fmt.Errorf("routing[%d]: %w", i, err)
		}
		if p.Strategy == "" {
			o.Policies[i].Strategy = Fallback
		} else if !slices.Contains(Strategies(), string(p.Strategy)) {
			return nil, fmt.Errorf("routing[%d]: unknown strategy %q", i, p.Strategy)
		}
	}
	o.fill()
	rs := slices.Clone(routes)
	for i := range rs {
		rs[i].st = &routeState{}
	}
	return &Router{routes: rs, opts: o, costs: energy.NewTracker(energy.DefaultTrackerWeight),
		turns: make([]atomic.Uint64, len(o.Policies)+1)}, nil
}

func checkPatterns(ps []string) error {
	for _, p := range ps {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("bad model pattern %q: %w", p, err)
		}
	}
	return nil
}

func errModel(model string) error { return fmt.Errorf("%w: %q", cascade.ErrModelNotFound, model) }

// Route returns the first route that serves model, or cascade.ErrModelNotFound.
func (r *Router) Route(model string) (*Route, error) {
	for i := range r.routes {
		if r.routes[i].serves(model) {
			return &r.routes[i], nil
		}
	}
	return nil, errModel(model)
}

// Known returns nil when a backend serves model, else an error wrapping cascade.ErrModelNotFound
// (cascade.Router).
func (r *Router) Known(model string) error {
	_, err := r.Route(model)
	return err
}

// Models lists every backend's models that its own patterns route to it, sorted and without
// duplicates. A backend that cannot list contributes its literal (glob-free) patterns. Errors
// from unreachable backends are returned beside whatever could be listed.
func (r *Router) Models(ctx context.Context) ([]cascade.Model, []error) {
	type result struct {
		models []string
		err    error
	}
	results := make([]result, len(r.routes))
	var wg sync.WaitGroup
	for i, rt := range r.routes {
		ml, ok := rt.Backend.(cascade.ModelLister)
		if !ok {
			results[i].models = literalPatterns(rt.Patterns)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ms, err := ml.Models(ctx)
			if err != nil {
				err = fmt.Errorf("backend %s: %w", rt.Name, err)
			}
			results[i] = result{ms, err}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	var out []cascade.Model
	var errs []error
	for i, res := range results {
		if res.err != nil {
			errs = append(errs, res.err)
		}
		for _, m := range res.models {
			if seen[m] {
				continue
			}
			// A model belongs to the first route that matches it, as a call would be routed.
			if rt, err := r.Route(m); err != nil || rt.Name != r.routes[i].Name {
				continue
			}
			seen[m] = true
			out = append(out, cascade.Model{ID: m, Backend: r.routes[i].Name})
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out, errs
}

// Ready reports nil while every model group has a live backend: for each backend, one of the
// backends serving its patterns is not ejected and answers its ping (a backend without Ping
// counts when it is not ejected). An ejected backend whose cooldown has ended is probed by its
// health check, and Ready waits for that probe. Otherwise it returns the errors of the groups
// without one. Ready returns when every ping and probe it started has finished, or when ctx is
// done: a ping still running then counts as failed.
func (r *Router) Ready(ctx context.Context) error {
	if len(r.routes) == 0 {
		return errors.New("no backends configured")
	}
	type result struct {
		i   int
		err error
	}
	errs := make([]error, len(r.routes))
	results := make(chan result, len(r.routes))
	pending := make(map[int]bool)
	for i := range r.routes {
		rt := &r.routes[i]
		p, ok := rt.Backend.(cascade.Pinger)
		if !rt.st.live() {
			gen, due := r.probeDue(rt, ok)
			if !due {
				errs[i] = fmt.Errorf("backend %s: ejected after failed calls", rt.Name)
				continue
			}
			pending[i] = true
			go func() {
				r.probe(rt, p, gen)
				var err error
				if !rt.st.live() {
					err = fmt.Errorf("backend %s: ejected, and its probe failed", rt.Name)
				}
				results <- result{i, err}
			}()
			continue
		}
		if !ok {
			continue
		}
		pending[i] = true
		go func() {
			var err error
			if perr := p.Ping(ctx); perr != nil {
				err = fmt.Errorf("backend %s: %w", rt.Name, perr)
			}
			results <- result{i, err}
		}()
	}
	for len(pending) > 0 {
		select {
		case res := <-results:
			delete(pending, res.i)
			errs[res.i] = res.err
		case <-ctx.Done():
			for i := range pending {
				errs[i] = fmt.Errorf("backend %s: no answer: %w", r.routes[i].Name, ctx.Err())
			}
			clear(pending)
		}
	}
	var down []error
	for i := range r.routes {
		if errs[i] == nil {
			continue
		}
		if !r.covered(i, errs) {
			down = append(down, errs[i])
		}
	}
	return errors.Join(down...)
}

// covered reports whether each of route i's patterns is served by a live route (errs[j] nil),
// not just one of them.
func (r *Router) covered(i int, errs []error) bool {
	for _, p := range r.routes[i].Patterns {
		served := false
		for j := range r.routes {
			served = served || (errs[j] == nil && r.routes[j].serves(p))
		}
		if !served {
			return false
		}
	}
	return true
}

// LiteralModels lists the model names the configuration spells out (patterns without glob
// characters), each under the route a call naming it would take, without asking any backend.
func (r *Router) LiteralModels() []string {
	seen := map[string]bool{}
	var out []string
	for i := range r.routes {
		for _, m := range literalPatterns(r.routes[i].Patterns) {
			if seen[m] {
				continue
			}
			if rt, err := r.Route(m); err != nil || rt.Name != r.routes[i].Name {
				continue
			}
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}

func literalPatterns(ps []string) []string {
	var out []string
	for _, p := range ps {
		if !hasMeta(p) {
			out = append(out, p)
		}
	}
	return out
}

func hasMeta(p string) bool {
	for _, c := range p {
		switch c {
		case '*', '?', '[', '\\':
			return true
		}
	}
	return false
}
