package cache

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
)

// mapRemote is a shared tier in a map; down makes it answer nothing, like an unreachable Redis.
type mapRemote struct {
	mu   sync.Mutex
	m    map[string][]byte
	ttl  time.Duration
	down bool
}

func (r *mapRemote) Get(_ context.Context, tenant, key string) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return nil, false
	}
	b, ok := r.m[tenant+"\x00"+key]
	return b, ok
}

func (r *mapRemote) Set(_ context.Context, tenant, key string, val []byte, ttl time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return
	}
	r.m[tenant+"\x00"+key], r.ttl = val, ttl
}

func TestSharedTierAcrossReplicas(t *testing.T) {
	router, _ := routing.New([]routing.Route{{Name: "b", Patterns: []string{"*"}, Backend: anyBackend{}}}, routing.Options{})
	remote := &mapRemote{m: map[string][]byte{}}
	replica := func() (*cascade.Cascade, *countingStage) {
		model := &countingStage{complete: true}
		return cascade.New(router, []cascade.Stage{NewShared(100, time.Hour, remote), model}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()}), model
	}
	a, modelA := replica()
	b, modelB := replica()
	mk := func(tenant string) *cascade.Request {
		r := &cascade.Request{Raw: json.RawMessage(`{"model":"m","messages":[{"role":"user","content":"q"}]}`), Tenant: tenant}
		r.Chat.Model = "m"
		return r
	}
	var first, second, other cascade.Result
	if err := a.Walk(context.Background(), mk("t1"), &first, nil); err != nil {
		t.Fatal(err)
	}
	if remote.ttl != time.Hour {
		t.Fatalf("stored for %v, want the cache's TTL", remote.ttl)
	}
	if err := b.Walk(context.Background(), mk("t1"), &second, nil); err != nil {
		t.Fatal(err)
	}
	if second.Stage != "cache" || modelA.calls != 1 || modelB.calls != 0 {
		t.Fatalf("replica B: stage %q, model calls %d and %d", second.Stage, modelA.calls, modelB.calls)
	}
	if got := *second.Answer.Choices[0].Message.Content; got != "answer" || second.Answer.Energy.Saved != 2.5 || second.Answer.Backend != "" {
		t.Fatalf("hit from the shared tier: %q saved %v backend %q", got, second.Answer.Energy.Saved, second.Answer.Backend)
	}
	if err := b.Walk(context.Background(), mk("t2"), &other, nil); err != nil {
		t.Fatal(err)
	}
	if other.Stage != "model" {
		t.Fatal("another tenant got the answer")
	}

	// The shared tier going away leaves each replica its own LRU.
	remote.mu.Lock()
	remote.down = true
	remote.mu.Unlock()
	c, _ := replica()
	var res cascade.Result
	if err := c.Walk(context.Background(), mk("t1"), &res, nil); err != nil || res.Stage != "model" {
		t.Fatalf("down tier: %v %q", err, res.Stage)
	}
	if err := c.Walk(context.Background(), mk("t1"), &res, nil); err != nil || res.Stage != "cache" {
		t.Fatalf("down tier, local repeat: %v %q", err, res.Stage)
	}
}

func TestSharedEmbeddings(t *testing.T) {
	remote := &mapRemote{m: map[string][]byte{}}
	a, b := NewShared(10, time.Hour, remote), NewShared(10, time.Hour, remote)
	call := &cascade.EmbedCall{Tenant: "t"}
	call.Req.Model, call.Req.Input = "e", []string{"x"}
	e := &cascade.Embeddings{Vectors: [][]float32{{1, 2}}, PromptTokens: 1, Backend: "b"}
	e.Energy.Joules = 0.5
	a.LearnEmbed(call, e)
	got, err := b.ServeEmbed(context.Background(), call)
	if err != nil || got.Vectors[0][1] != 2 || got.Energy.Saved != 0.5 || got.Backend != "" {
		t.Fatalf("%+v %v", got, err)
	}
	other := &cascade.EmbedCall{Tenant: "u", Req: call.Req}
	if _, err := b.ServeEmbed(context.Background(), other); !errors.Is(err, cascade.ErrMiss) {
		t.Fatal("another tenant got the vectors")
	}
}

// The walk stores an answer in this process before it returns, so that the same question asked
// the moment the answer is out is a hit; only the remote layer's write waits for learn, which
// the edge runs after the response.
func TestLearnEagerBeforeTheAnswer(t *testing.T) {
	router, _ := routing.New([]routing.Route{{Name: "b", Patterns: []string{"*"}, Backend: anyBackend{}}}, routing.Options{})
	remote := &mapRemote{m: map[string][]byte{}}
	model := &countingStage{complete: true}
	c := cascade.New(router, []cascade.Stage{NewShared(100, time.Hour, remote), model}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	mk := func() *cascade.Request {
		r := &cascade.Request{Raw: json.RawMessage(`{"model":"m","messages":[{"role":"user","content":"q"}]}`), Tenant: "t"}
		r.Chat.Model = "m"
		return r
	}
	var first cascade.Result
	learn, err := c.WalkLearnLater(context.Background(), mk(), &first, nil)
	if err != nil || learn == nil {
		t.Fatalf("err %v, learn set %v: want the remote write left for later", err, learn != nil)
	}
	if len(remote.m) != 0 {
		t.Fatal("the remote layer was written before the answer went out")
	}
	var second cascade.Result
	if err := c.Walk(context.Background(), mk(), &second, nil); err != nil {
		t.Fatal(err)
	}
	if second.Stage != "cache" || model.calls != 1 {
		t.Fatalf("asked again before learn ran: stage %q, model calls %d; want a hit", second.Stage, model.calls)
	}
	learn()
	if len(remote.m) != 1 {
		t.Fatalf("after learn the remote layer holds %d entries, want 1", len(remote.m))
	}
}
