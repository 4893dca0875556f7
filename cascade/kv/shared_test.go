package kv

import (
	"context"
	"sync"
	"testing"
	"time"
)

// bus is a Shared in memory: every published entry goes to every follower but its publisher,
// and a follower that starts late replays what was published before.
type bus struct {
	mu      sync.Mutex
	log     []busEntry
	changed chan struct{}
}

type busEntry struct {
	from *busPort
	b    []byte
}

type busPort struct {
	bus     *bus
	applied chan struct{} // when set, told after each entry this follower applied
}

func newBus() *bus { return &bus{changed: make(chan struct{})} }

func (p *busPort) Publish(_ context.Context, e []byte) error {
	p.bus.mu.Lock()
	p.bus.log = append(p.bus.log, busEntry{p, append([]byte(nil), e...)})
	close(p.bus.changed)
	p.bus.changed = make(chan struct{})
	p.bus.mu.Unlock()
	return nil
}

func (p *busPort) Follow(ctx context.Context, apply func([]byte)) {
	next := 0
	for {
		p.bus.mu.Lock()
		log, changed := p.bus.log[next:], p.bus.changed
		next = len(p.bus.log)
		p.bus.mu.Unlock()
		for _, e := range log {
			if e.from != p {
				apply(e.b)
				if p.applied != nil {
					select {
					case p.applied <- struct{}{}:
					case <-ctx.Done():
						return
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

func TestSharedLearning(t *testing.T) {
	b := newBus()
	a, c := newStage(t, Options{}), newStage(t, Options{})
	cp := &busPort{bus: b, applied: make(chan struct{}, 16)}
	a.Share(&busPort{bus: b})
	c.Share(cp)
	start := time.Now()
	teach(t, a, request("t", "m", user("How do I reset my password?")), neural("Click 'Forgot password'.", 12.5))
	waitApplied(t, cp, "the other replica")
	t.Logf("applied on the other replica %v after teaching", time.Since(start)) // measured, not asserted

	variant := request("t", "m", user("how do i reset my password"))
	ans, hit := serve(t, c, variant)
	if !hit {
		t.Fatal("the entry learned on one replica did not answer on the other")
	}
	if ans.Text() != "Click 'Forgot password'." || ans.Energy.Saved != 12.5 || ans.Usage.CompletionTokens != 7 {
		t.Fatalf("shared entry: %q saved %v", ans.Text(), ans.Energy.Saved)
	}
	if _, hit := serve(t, c, request("u", "m", user("how do i reset my password"))); hit {
		t.Fatal("another tenant got the shared entry")
	}
	// A replica that starts later replays it; its own entries are not sent back to it.
	late := newStage(t, Options{})
	lp := &busPort{bus: b, applied: make(chan struct{}, 16)}
	late.Share(lp)
	waitApplied(t, lp, "a late replica")
	if _, hit := serve(t, late, variant); !hit {
		t.Fatal("a late replica did not replay the entry")
	}
	if got := a.Stats().Learned; got != 1 {
		t.Fatalf("the publisher indexed its own entry %d times", got)
	}
}

// waitApplied waits until p's follower applied one entry; the deadline only bounds a hang.
func waitApplied(t *testing.T, p *busPort, who string) {
	t.Helper()
	select {
	case <-p.applied:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never applied the entry", who)
	}
}
