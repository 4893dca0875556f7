package proxy

import (
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

// TestObserveSeries: calls of several label tuples, each observed more than once, land in their
// own series (the children cache hands each tuple its own), and a series observe does not count
// for a call (joules of an unanswered call, a saving of none) is never created.
func TestObserveSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, nil, nil)
	hit := &Call{Stage: "cache", Status: 200, answered: true, stages: []cascade.Attempt{{Stage: "cache", Duration: time.Millisecond}}}
	hitFig := energy.Figure{Joules: 1, Saved: 2, Grade: energy.Estimated, Coverage: "whole"}
	neural := &Call{Stage: "neural", Status: 200, answered: true, Backend: "b",
		stages: []cascade.Attempt{{Stage: "cache", Err: cascade.ErrMiss}, {Stage: "neural", Duration: time.Second}}}
	neuralFig := energy.Figure{Joules: 5, Grade: energy.Measured, Coverage: "partial"}
	failed := &Call{Stage: "neural", Status: 502, stages: []cascade.Attempt{{Stage: "neural", Err: errors.New("upstream failed")}}}
	for range 3 {
		m.observe(hit, hitFig, "m1", time.Millisecond)
		m.observe(neural, neuralFig, "m2", time.Second)
	}
	m.observe(failed, energy.Figure{}, "m2", time.Second)
	unrendered := *hit // answered, but its answer could not be rendered
	unrendered.Status = 500
	m.observe(&unrendered, hitFig, "m1", time.Millisecond)
	want := map[string]float64{
		"eoc_requests_total{model=m1,stage=cache,status=200}":                     3,
		"eoc_requests_total{model=m1,stage=cache,status=500}":                     1,
		"eoc_requests_total{model=m2,stage=neural,status=200}":                    3,
		"eoc_requests_total{model=m2,stage=neural,status=502}":                    1,
		"eoc_joules_total{coverage=whole,grade=estimated,model=m1,stage=cache}":   4,
		"eoc_joules_total{coverage=partial,grade=measured,model=m2,stage=neural}": 15,
		"eoc_joules_saved_total{model=m1,stage=cache}":                            8,
		"eoc_stage_duration_seconds{outcome=hit,stage=cache}":                     4,
		"eoc_stage_duration_seconds{outcome=miss,stage=cache}":                    3,
		"eoc_stage_duration_seconds{outcome=hit,stage=neural}":                    3,
		"eoc_stage_duration_seconds{outcome=error,stage=neural}":                  1,
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "eoc_requests_total") && !strings.HasPrefix(mf.GetName(), "eoc_joules_") &&
			mf.GetName() != "eoc_stage_duration_seconds" {
			continue
		}
		for _, s := range mf.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(labels)
			v := s.GetCounter().GetValue()
			if h := s.GetHistogram(); h != nil {
				v = float64(h.GetSampleCount())
			}
			got[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected series %s = %v", k, v)
		}
	}
}
