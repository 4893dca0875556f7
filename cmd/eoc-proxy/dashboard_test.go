package main

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		ID      int    `json:"id"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

var seriesName = regexp.MustCompile(`\beoc_[a-zA-Z0-9_:]+`)

// TestDashboard loads deploy/grafana-dashboard.json: it is valid JSON, every panel has a query,
// and every series a query names is one the wired stack exports after a call, its cache hit and a
// stream (a histogram's by
// its _bucket, _sum or _count).
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("the dashboard is not valid JSON: %v", err)
	}
	if d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("the dashboard has no title or no panels: %+v", d)
	}

	fake := fakes.NewOpenAI(t, fakes.Config{})
	s := startStack(t, oneBackend("openai", fake.BaseURL(), "cascade: {stages: [cache, kv, neural]}\n"))
	c := client(s, "")
	for range 2 { // a neural call, then its cache hit (joules saved)
		if _, err := c.CreateChatCompletion(context.Background(), chatReq("hello there")); err != nil {
			t.Fatal(err)
		}
	}
	streamChat(t, c, "a stream") // a time to first token
	s.settled(t)
	families, err := s.app.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, mf := range families {
		exported[mf.GetName()] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM || mf.GetType() == dto.MetricType_SUMMARY {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				exported[mf.GetName()+suffix] = true
			}
		}
	}

	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			names := seriesName.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no eoc series", p.Title, tg.Expr)
			}
			for _, n := range names {
				if !exported[n] {
					t.Errorf("panel %q: query %q names %s, which nothing exports", p.Title, tg.Expr, n)
				}
			}
		}
	}
	if t.Failed() {
		var names []string
		for n := range exported {
			if strings.HasPrefix(n, "eoc_") {
				names = append(names, n)
			}
		}
		t.Logf("exported: %v", names)
	}
}
