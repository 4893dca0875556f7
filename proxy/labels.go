package proxy

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// otherModel is the metric label of every model no backend lists. With a glob route (the
// shipped eoc.yaml routes "*") a client can name any model; labelling each name as given would
// add series without bound.
const otherModel = "other"

// Bounds on the model label set: how often a name not yet known may trigger a new listing, how
// long a listing may take, and how many listed names are kept (a backend could list any number).
const (
	labelRefreshEvery = 30 * time.Second
	labelListTimeout  = 5 * time.Second
	maxModelLabels    = 1000
)

// modelLister lists the models the backends serve (a cascade.Router): Models asks the
// backends; LiteralModels names those the configuration spells out, without asking anyone.
type modelLister interface {
	Models(ctx context.Context) ([]cascade.Model, []error)
	LiteralModels() []string
}

// modelLabels maps a requested model to its metric label: the model itself when a backend lists
// it (or, for a backend that cannot list, its configuration names it literally), else "other".
// The first listing starts with the server; until it ends, the label set holds the names the
// configuration spells out literally, and any other name is "other": a lookup never waits (it
// runs while a call settles, before its response is written), so a call in the first seconds
// after a start may be labelled "other" although a backend lists its model. After that, a name not in the set starts one listing in the background, at most once per
// labelRefreshEvery, so a model added upstream gets its own label soon after its first call.
type modelLabels struct {
	src     modelLister // nil: every model is "other"
	known   atomic.Pointer[map[string]struct{}]
	first   chan struct{} // closed when the first listing ended
	last    atomic.Int64  // unix nanoseconds of the last listing started
	running sync.Mutex    // held while a listing runs
}

func newModelLabels(src modelLister) *modelLabels {
	l := &modelLabels{src: src, first: make(chan struct{})}
	l.known.Store(&map[string]struct{}{})
	if src == nil {
		close(l.first)
		return l
	}
	literal := make(map[string]struct{})
	for _, m := range src.LiteralModels() {
		if len(literal) >= maxModelLabels {
			break
		}
		literal[m] = struct{}{}
	}
	l.known.Store(&literal)
	l.last.Store(time.Now().UnixNano())
	go func() {
		defer close(l.first)
		ctx, cancel := context.WithTimeout(context.Background(), labelListTimeout)
		defer cancel()
		l.refresh(ctx)
	}()
	return l
}

// label returns model's label. It never waits: while the first listing runs, a name not
// configured literally is "other" (and starts no listing of its own).
func (l *modelLabels) label(model string) string {
	if l == nil || model == "" {
		return model
	}
	if l.lookup(model) {
		return model
	}
	select {
	case <-l.first:
		l.maybeRefresh()
	default:
	}
	return otherModel
}

// lookup reports whether model is in the set.
func (l *modelLabels) lookup(model string) bool {
	known := *l.known.Load()
	if _, ok := known[model]; ok {
		return true
	}
	if !strings.Contains(model, ":") { // Ollama lists "llama3:latest" for "llama3"
		_, ok := known[model+":latest"]
		return ok
	}
	return false
}

// maybeRefresh starts a listing in the background unless one ran within labelRefreshEvery or
// one is running.
func (l *modelLabels) maybeRefresh() {
	if l.src == nil {
		return
	}
	now := time.Now().UnixNano()
	last := l.last.Load()
	if now-last < int64(labelRefreshEvery) || !l.last.CompareAndSwap(last, now) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), labelListTimeout)
		defer cancel()
		l.refresh(ctx)
	}()
}

// refresh lists the backends' models and replaces the label set with them. Backends that cannot
// be reached keep the names they had in the set.
func (l *modelLabels) refresh(ctx context.Context) {
	if l.src == nil || !l.running.TryLock() {
		return
	}
	defer l.running.Unlock()
	l.last.Store(time.Now().UnixNano())
	models, errs := l.src.Models(ctx)
	l.set(models, len(errs) > 0)
}

// set replaces the label set with models, keeping the old names as well when the listing was
// partial.
func (l *modelLabels) set(models []cascade.Model, partial bool) {
	next := make(map[string]struct{}, len(models))
	if partial {
		for m := range *l.known.Load() {
			next[m] = struct{}{}
		}
	}
	for _, m := range models {
		if len(next) >= maxModelLabels {
			break
		}
		next[m.ID] = struct{}{}
	}
	l.known.Store(&next)
}
