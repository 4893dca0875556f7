package cascade_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/cache"
	"github.com/eoc-proxy/eoc-proxy/cascade/graph"
	"github.com/eoc-proxy/eoc-proxy/cascade/neural"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/coldbench"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

// BenchmarkWalkServed walks the stages the shipped configuration has in process (the exact
// cache, the graph over the shipped facts, the neural stage with a backend that answers at
// once; no kv, no meter), warm and with the CPU's caches evicted before each walk (coldbench,
// walk-ns): a cache hit, and a fresh question that misses the cache and the graph and is
// answered by the neural stage, its learning included.
func BenchmarkWalkServed(b *testing.B) {
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"m"}, Backend: fakes.AnswerBackend{}}}, routing.Options{})
	if err != nil {
		b.Fatal(err)
	}
	g, err := graph.New(graph.Options{Files: []string{"../data/facts.tsv"}})
	if err != nil {
		b.Fatal(err)
	}
	sys, _ := json.Marshal("You are a helpful assistant. Be brief.")
	request := func(i int) *cascade.Request {
		q, _ := json.Marshal(fmt.Sprintf("Please explain in two sentences how brato glai %d relates to stou ka fe ni stra.", i))
		chat := cascade.ChatRequest{Model: "m", Messages: []cascade.Message{{Role: "system", Content: sys}, {Role: "user", Content: q}}}
		raw, _ := json.Marshal(chat)
		req := &cascade.Request{ID: "req_0123456789abcdef", Chat: chat, Raw: raw}
		req.Key() // the edge computes it when it decodes the body
		return req
	}
	for _, bc := range []struct {
		name  string
		stage string
		fresh bool // a question never asked before, else the one the cache holds
	}{{"hit", "cache", false}, {"miss", "neural", true}} {
		for _, cold := range []bool{false, true} {
			name := bc.name + "/warm"
			if cold {
				name = bc.name + "/cold"
			}
			b.Run(name, func(b *testing.B) {
				c := cascade.New(router, []cascade.Stage{cache.New(1000, time.Hour), g, neural.New(router, nil)}, cascade.Options{StageWatts: 10})
				ctx := context.Background()
				walk := func(req *cascade.Request, res *cascade.Result) {
					learn, err := c.WalkLearnLater(ctx, req, res, nil)
					if err != nil {
						b.Fatal(err)
					}
					if learn != nil {
						learn()
					}
				}
				walk(request(0), &cascade.Result{}) // fills the cache
				t := coldbench.New()
				b.ReportAllocs()
				for i := 1; b.Loop(); i++ {
					b.StopTimer() // the request is the edge's work, its allocations too
					req := request(0)
					if bc.fresh {
						req = request(i)
					}
					res := new(cascade.Result)
					b.StartTimer()
					if cold {
						t.Time(b, func() { walk(req, res) })
					} else {
						walk(req, res)
					}
					if res.Stage != bc.stage || res.Answer == nil {
						b.Fatalf("answered by %q", res.Stage)
					}
				}
				t.Report(b, "walk-ns")
			})
		}
	}
}
