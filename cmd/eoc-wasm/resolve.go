// Command eoc-wasm runs the cascade's cheap stages in a browser (GOOS=js GOARCH=wasm).
//
// The stages are cache, kv with the built-in embedder and graph, over the shipped seed and facts
// files: resolve(question) answers with the stage, the payload, its estimated joules and a
// receipt. There is no neural stage and no meter in a browser. Built for another platform it resolves its arguments and
// prints each result as JSON, the same objects the browser gets.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/cache"
	"github.com/eoc-proxy/eoc-proxy/cascade/graph"
	"github.com/eoc-proxy/eoc-proxy/cascade/kv"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
	"github.com/eoc-proxy/eoc-proxy/data"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/meter"
)

// Result is what resolve returns to JavaScript: the answer, the stage that gave it and what it
// cost, with the receipt serve would have sent for the same call. The figures are the stated
// model serve uses for in-process stages, estimated, never measured.
type Result struct {
	Stage   string `json:"stage"`
	Payload string `json:"payload"`
	Model   string `json:"model"`
	energy.View
	Microjoules      float64 `json:"microjoules"`
	JoulesSaved      float64 `json:"joules_saved,omitempty"`
	JoulesSavedGrade string  `json:"joules_saved_grade,omitempty"`
	Receipt          string  `json:"receipt"`
	ReceiptTime      string  `json:"receipt_time"`
	// Error is set when no stage answered: the HTTP API's words for it, and why here.
	Error string `json:"error,omitempty"`
}

// model is the model every question is asked of: only the receipt and the kv collection see it.
const model = "browser"

// cacheEntries bounds the cache: one page's questions.
const cacheEntries = 1000

// noNeural answers the router for every model and is never called: no stage after graph.
type noNeural struct{}

func (noNeural) Chat(context.Context, *cascade.Request, cascade.Sink) (*cascade.Answer, error) {
	return nil, errors.New("no neural stage in the browser")
}

// browserCascade is the cheap stages over the shipped files, priced as serve prices them.
type browserCascade struct {
	walk  *cascade.Cascade
	watts float64
	// tick is the clock's step: a browser coarsens performance.now(), so a stage's wall time is
	// known to within one tick, and the high bound makes room for it.
	tick time.Duration
}

func newBrowserCascade(tick time.Duration) (*browserCascade, error) {
	costs := energy.NewTracker(energy.DefaultTrackerWeight) // no neural calls: savings are stated
	kvs, err := kv.New(kv.Options{Embedder: kv.Builtin{}, SeedFiles: []string{"faq.jsonl"}, Files: data.Shipped,
		Estimator: costs, Logger: zerolog.Nop()})
	if err != nil {
		return nil, fmt.Errorf("kv: %w", err)
	}
	g, err := graph.New(graph.Options{Files: []string{"facts.tsv"}, FS: data.Shipped, Estimator: costs})
	if err != nil {
		return nil, fmt.Errorf("graph: %w", err)
	}
	router, err := routing.New([]routing.Route{{Name: "browser", Type: "none", Patterns: []string{"*"}, Backend: noNeural{}}},
		routing.Options{})
	if err != nil {
		return nil, err
	}
	// serve's price for in-process stages when eoc.yaml sets none: the meter's CPU watts per core.
	watts := meter.DefaultCPUWattsPerCore
	stages := []cascade.Stage{cache.New(cacheEntries, time.Hour), kvs, g}
	return &browserCascade{walk: cascade.New(router, stages, cascade.Options{StageWatts: watts, Logger: zerolog.Nop()}),
		watts: watts, tick: tick}, nil
}

// resolve walks question through the stages once, as serve walks a chat call with it as the one
// user message.
func (b *browserCascade) resolve(question string) Result {
	body, _ := json.Marshal(map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": question}}})
	req := &cascade.Request{Raw: body, ID: cascade.NewID()}
	if err := json.Unmarshal(body, &req.Chat); err != nil {
		return Result{Model: model, Error: err.Error()}
	}
	var res cascade.Result
	err := b.walk.Walk(context.Background(), req, &res, nil)
	r := Result{Stage: res.Stage, Model: model}
	var fig energy.Figure
	if res.Answer != nil {
		fig = res.Answer.Energy
		r.Payload = res.Answer.Text()
	}
	if fig.Method == energy.MethodStageModel && b.tick > 0 {
		// The wall time read may be short by up to one tick of the browser's clock.
		fig.High += b.tick.Seconds() * b.watts * energy.CPUModelHigh
		fig.Reason += ";browser-clock-" + b.tick.String()
	}
	fig = fig.Rounded()
	now := time.Now()
	r.View, r.Microjoules = fig.View(), math.Round(fig.Joules*1e9)/1e3
	if fig.Saved > 0 {
		r.JoulesSaved, r.JoulesSavedGrade = fig.Saved, string(energy.Estimated)
	}
	r.Receipt = energy.Receipt{Key: req.Key(), Stage: r.Stage, Model: model, Joules: fig.Joules, Grade: fig.Grade, Time: now}.Hash()
	r.ReceiptTime = now.UTC().Format(time.RFC3339Nano)
	switch {
	case errors.Is(err, cascade.ErrMiss):
		// The HTTP API's words for a walk no stage answered, and why the neural stage is off.
		r.Error = "no cascade stage could answer, and the neural stage is off (there is none in the browser)"
	case err != nil:
		r.Error = err.Error()
	}
	return r
}

// clockTick is the largest step between successive distinct readings of the monotonic clock,
// over a few steps (a browser adds jitter to its coarsened clock): about how much one reading of
// a duration can be short. A clock that does not step within limit is taken to step by limit.
func clockTick(limit time.Duration) time.Duration {
	start := time.Now()
	prev := start
	var tick time.Duration
	for steps := -1; steps < 8; { // the first step only aligns prev with one
		t := time.Now()
		if d := t.Sub(prev); d > 0 {
			if steps >= 0 {
				tick = max(tick, d)
			}
			prev = t
			steps++
		}
		if t.Sub(start) > limit {
			return limit
		}
	}
	return min(tick, limit)
}
