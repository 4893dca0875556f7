package routing

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// hangingPing is a health check that ignores its context until released.
type hangingPing struct {
	stubBackend
	release chan struct{}
}

func (h *hangingPing) Ping(context.Context) error { <-h.release; return nil }

// Ready probes an ejected backend whose cooldown has ended and waits for the probe: a backend
// that is up again makes the router ready in the same call.
func TestReadyWaitsForTheProbeItStarts(t *testing.T) {
	clk := &clock{now: time.Unix(1000, 0)}
	pb := &pingBackend{}
	r, err := New([]Route{{Name: "a", Patterns: []string{"m*"}, Backend: pb}},
		Options{EjectAfter: 1, Cooldown: 10 * time.Second, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	r.Start(&r.routes[0])(Failed)
	if err := r.Ready(context.Background()); err == nil {
		t.Fatal("ready within the cooldown")
	}
	clk.Add(11 * time.Second)
	if err := r.Ready(context.Background()); err != nil {
		t.Fatalf("the probe re-admits the backend, but Ready said: %v", err)
	}
	if !r.Up("a") || pb.pings.Load() != 1 {
		t.Fatalf("up %v, %d pings", r.Up("a"), pb.pings.Load())
	}
}

// Ready is bounded by its context even when a health check ignores it.
func TestReadyBoundedByContext(t *testing.T) {
	h := &hangingPing{release: make(chan struct{})}
	defer close(h.release)
	r, err := New([]Route{{Name: "slow", Patterns: []string{"m*"}, Backend: h}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Ready(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the deadline", err)
		}
	case <-time.After(30 * time.Second): // bounds a hang only; generous for a loaded machine
		t.Fatal("Ready outlived its context")
	}
}

// Known is the walk's model check (cascade.Router): nil for a model a route serves, else an
// error that wraps cascade.ErrModelNotFound.
func TestKnown(t *testing.T) {
	r, err := New([]Route{{Name: "a", Patterns: []string{"m*", "exact"}, Backend: stubBackend{}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, model string
		known       bool
	}{
		{"glob", "m1", true},
		{"literal", "exact", true},
		{"unknown", "other", false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := r.Known(tc.model)
			if (err == nil) != tc.known || (err != nil && !errors.Is(err, cascade.ErrModelNotFound)) {
				t.Fatalf("Known(%q) = %v, want known %v", tc.model, err, tc.known)
			}
		})
	}
}
