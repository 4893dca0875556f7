package cascade

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"sync"
)

// Route is a backend with the model patterns it serves.
type Route struct {
	Name     string
	Type     string
	Patterns []string // path.Match globs; "*" matches every model
	Backend  Backend
}

// Router picks the first route whose patterns match a model. It is safe for concurrent use.
type Router struct {
	routes []Route
}

// NewRouter checks the patterns and returns a Router over routes in order.
func NewRouter(routes []Route) (*Router, error) {
	for _, r := range routes {
		for _, p := range r.Patterns {
			if _, err := path.Match(p, ""); err != nil {
				return nil, fmt.Errorf("backend %s: bad model pattern %q: %w", r.Name, p, err)
			}
		}
	}
	return &Router{routes: routes}, nil
}

// Route returns the first route that serves model, or ErrModelNotFound.
func (r *Router) Route(model string) (*Route, error) {
	for i := range r.routes {
		for _, p := range r.routes[i].Patterns {
			if ok, _ := path.Match(p, model); ok {
				return &r.routes[i], nil
			}
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrModelNotFound, model)
}

// Model is one model a backend serves.
type Model struct {
	ID      string
	Backend string
}

// Models lists every backend's models that its own patterns route to it, sorted and without
// duplicates. A backend that cannot list contributes its literal (glob-free) patterns. Errors
// from unreachable backends are returned beside whatever could be listed.
func (r *Router) Models(ctx context.Context) ([]Model, []error) {
	type result struct {
		models []string
		err    error
	}
	results := make([]result, len(r.routes))
	var wg sync.WaitGroup
	for i, rt := range r.routes {
		ml, ok := rt.Backend.(ModelLister)
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
	var out []Model
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
			out = append(out, Model{ID: m, Backend: r.routes[i].Name})
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out, errs
}

// Ready reports nil when at least one backend answers its ping (a backend without Ping counts as
// ready), else the joined errors.
func (r *Router) Ready(ctx context.Context) error {
	errs := make([]error, len(r.routes))
	var wg sync.WaitGroup
	for i, rt := range r.routes {
		p, ok := rt.Backend.(Pinger)
		if !ok {
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Ping(ctx); err != nil {
				errs[i] = fmt.Errorf("backend %s: %w", rt.Name, err)
			}
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e == nil {
			return nil
		}
	}
	if len(errs) == 0 {
		return errors.New("no backends configured")
	}
	return errors.Join(errs...)
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
