package proxy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// 150,000 invented model names leave /ui/data's size flat once the bound is reached: the page's
// per-model, per-minute and per-pair tables fold the names beyond it into "other", with metrics
// (the metrics' labels: no backend lists these) and without (the first uiModels names). The list
// of calls keeps a bounded prefix of each name.
func TestUIDataBoundedUnderInventedNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		reg  bool
	}{{"with metrics", true}, {"without metrics", false}} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Cascade: echoCascade(t), Logger: zerolog.Nop()}
			if tc.reg {
				o.Registry = prometheus.NewRegistry()
			}
			s := New(o)
			now := time.Unix(1_800_000_000, 0)
			fig := energy.Figure{Joules: 1.5, Grade: energy.Estimated, Method: "token-model", Reason: "no counter"}
			size := func() int {
				b, err := json.Marshal(s.ui.snapshot(now))
				if err != nil {
					t.Fatal(err)
				}
				return len(b)
			}
			feed := func(from, to int) {
				for i := from; i < to; i++ {
					model := fmt.Sprintf("invented-%d-%s", i, strings.Repeat("x", 300))
					c := &Call{Model: model, Backend: "b", answered: true, tokens: 3, Stage: "neural", Energy: fig, Status: 200, Time: now}
					s.observe(c, model)
				}
			}
			feed(0, 2*uiModels)
			atBound := size()
			feed(2*uiModels, 150_000)
			after := size()
			t.Logf("/ui/data: %d bytes after %d names, %d after 150,000", atBound, 2*uiModels, after)
			if after > atBound+atBound/100 {
				t.Errorf("/ui/data grew from %d to %d bytes between %d and 150,000 invented names", atBound, after, 2*uiModels)
			}
			d := s.ui.snapshot(now)
			if len(d.Models) > uiModels+1 || len(d.Backends) > uiModels+1 {
				t.Errorf("%d models, %d pairs on the page; want at most %d", len(d.Models), len(d.Backends), uiModels+1)
			}
			for _, c := range d.Calls {
				if len(c.Model) > uiModelName {
					t.Fatalf("a call's model kept %d bytes", len(c.Model))
				}
			}
		})
	}
}
