package proxy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
)

// listingBackend serves every model (its route is "*") and lists only known-1.
type listingBackend struct {
	nopBackend
	lists atomic.Int64
}

func (b *listingBackend) Models(context.Context) ([]string, error) {
	b.lists.Add(1)
	return []string{"known-1"}, nil
}

// With a glob route, 5,000 invented model names share one "other" series per stage and status;
// a model the backend lists keeps its own label, and the listing behind the labels is throttled.
func TestInventedModelsShareOneSeries(t *testing.T) {
	b := &listingBackend{}
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"*"}, Backend: b}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := cascade.New(router, []cascade.Stage{echoStage{}}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	reg := prometheus.NewRegistry()
	s := New(Options{Cascade: c, Logger: zerolog.Nop(), MaxBodyBytes: 1 << 20, Registry: reg})
	post := func(model string) {
		t.Helper()
		body := `{"model":"` + model + `","messages":[{"role":"user","content":"a"}]}`
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: status %d: %s", model, rec.Code, rec.Body)
		}
	}
	post("invented-0") // starts the first listing
	deadline := time.Now().Add(5 * time.Second)
	for s.metrics.labels.label("known-1") != "known-1" {
		if time.Now().After(deadline) {
			t.Fatal("the backend's listing never reached the labels")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 5000 {
		post(fmt.Sprintf("invented-%d", i))
	}
	post("known-1")
	series := map[string]int{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "model" {
					series[l.GetValue()]++
				}
			}
		}
		if mf.GetName() == "eoc_requests_total" && len(mf.GetMetric()) > 2 {
			t.Errorf("eoc_requests_total has %d series after 5,000 invented names", len(mf.GetMetric()))
		}
	}
	if len(series) != 2 || series["other"] == 0 || series["known-1"] == 0 {
		t.Errorf("%d model labels (other: %d series, known-1: %d), want only other and known-1", len(series), series["other"], series["known-1"])
	}
	if n := b.lists.Load(); n > 2 {
		t.Errorf("the backend was listed %d times for 5,001 calls", n)
	}
}

// Without a listing (no router), every named model is "other"; the empty name (a model no
// backend serves) stays empty.
func TestModelLabelsWithoutLister(t *testing.T) {
	l := newModelLabels(nil)
	if got := l.label("gpt-x"); got != otherModel {
		t.Errorf("label(gpt-x) = %q", got)
	}
	if got := l.label(""); got != "" {
		t.Errorf(`label("") = %q`, got)
	}
	l.set([]cascade.Model{{ID: "llama3:latest"}}, false)
	if got := l.label("llama3"); got != "llama3" {
		t.Errorf("label(llama3) with llama3:latest listed = %q", got)
	}
}

// hangingLister's listing blocks until release is closed (or its context ends).
type hangingLister struct {
	nopBackend
	started chan struct{} // closed when the listing began
	release chan struct{}
	ended   atomic.Bool
}

func (b *hangingLister) Models(ctx context.Context) ([]string, error) {
	close(b.started)
	defer b.ended.Store(true)
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return []string{"listed-1"}, nil
}

// While the first listing hangs, calls settle and answer without waiting for it: their models
// are labelled "other", or by name when the configuration spells the name out.
func TestFirstListingNeverBlocksACall(t *testing.T) {
	b := &hangingLister{started: make(chan struct{}), release: make(chan struct{})}
	defer close(b.release)
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"literal-1", "*"}, Backend: b}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := cascade.New(router, []cascade.Stage{echoStage{}}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	reg := prometheus.NewRegistry()
	s := New(Options{Cascade: c, Logger: zerolog.Nop(), MaxBodyBytes: 1 << 20, Registry: reg})
	<-b.started
	for _, model := range []string{"listed-1", "literal-1"} {
		done := make(chan int)
		go func() {
			body := `{"model":"` + model + `","messages":[{"role":"user","content":"a"}]}`
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
			done <- rec.Code
		}()
		select {
		case code := <-done:
			if code != http.StatusOK {
				t.Fatalf("%s: status %d", model, code)
			}
		case <-time.After(time.Minute): // a hang, not a slow machine
			t.Fatalf("%s: the call did not answer while the first listing hangs", model)
		}
		if b.ended.Load() {
			t.Fatalf("%s: the call answered only after the first listing ended", model)
		}
	}
	labels := map[string]bool{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "eoc_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "model" {
					labels[l.GetValue()] = true
				}
			}
		}
	}
	if len(labels) != 2 || !labels[otherModel] || !labels["literal-1"] {
		t.Errorf("model labels %v while the first listing runs, want other and literal-1", labels)
	}
}
