package fakes

import (
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	colmetric "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// OTLPCollector is an OTLP/HTTP collector that keeps the points of the metrics posted to its
// /v1/metrics as protobuf: each histogram's and sum's points by metric name, as their string
// attributes. Posts to other paths (traces) are counted, not read.
type OTLPCollector struct {
	URL string

	mu     sync.Mutex
	points map[string][]map[string]string
	other  []string
}

// NewOTLPCollector starts a collector, closed when the test ends. A metrics post that is not
// OTLP protobuf fails the test.
func NewOTLPCollector(t testing.TB) *OTLPCollector {
	c := &OTLPCollector{points: map[string][]map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		defer c.mu.Unlock()
		if r.URL.Path != "/v1/metrics" {
			c.other = append(c.other, r.URL.Path)
			return
		}
		var req colmetric.ExportMetricsServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Errorf("the collector got no OTLP protobuf: %v", err)
			return
		}
		for _, rm := range req.GetResourceMetrics() {
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					var points [][]*commonpb.KeyValue
					for _, p := range m.GetHistogram().GetDataPoints() {
						points = append(points, p.GetAttributes())
					}
					for _, p := range m.GetSum().GetDataPoints() {
						points = append(points, p.GetAttributes())
					}
					for _, attrs := range points {
						kv := map[string]string{}
						for _, a := range attrs {
							kv[a.GetKey()] = a.GetValue().GetStringValue()
						}
						c.points[m.GetName()] = append(c.points[m.GetName()], kv)
					}
				}
			}
		}
	}))
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

// Points is what the collector kept: metric name → its points' string attributes.
func (c *OTLPCollector) Points() map[string][]map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.points)
}

// OtherPaths are the paths of the posts that were not metrics.
func (c *OTLPCollector) OtherPaths() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.other...)
}
