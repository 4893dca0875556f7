package proxy

import (
	"encoding/json"
	"io"
	"io/fs"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/eoc-proxy/eoc-proxy/energy"
)

// okUpstream answers every chat call with "hi" and a usage of 3 completion tokens.
func okUpstream(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4}}`)
}

func get(t *testing.T, url string, hdr func(*http.Request)) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if hdr != nil {
		hdr(req)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// With auth.keys set, the page, its files and its data need an admin key: 401 without a key or
// with an unknown one (and a Basic challenge, so a browser asks), 403 with a key that is not an
// admin's, 200 with an admin key as Bearer or as the Basic password.
func TestUIAuth(t *testing.T) {
	keys := []APIKey{{ID: "boss", Key: "sk-boss"}, {ID: "user", Key: "sk-user"}}
	srv := upstreamEdge(t, okUpstream, Options{Keys: keys, AdminKeyIDs: []string{"boss"}})
	closed := upstreamEdge(t, okUpstream, Options{Keys: keys}) // keys, but no admin
	bearer := func(k string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+k) }
	}
	basic := func(k string) func(*http.Request) { return func(r *http.Request) { r.SetBasicAuth("anyone", k) } }
	for _, path := range []string{"/ui", "/ui/data", "/ui/static/app.js"} {
		tests := []struct {
			name   string
			srv    *httptest.Server
			hdr    func(*http.Request)
			status int
		}{
			{"no key", srv, nil, http.StatusUnauthorized},
			{"unknown key", srv, bearer("sk-nobody"), http.StatusUnauthorized},
			{"unknown basic", srv, basic("sk-nobody"), http.StatusUnauthorized},
			{"api key, not admin", srv, bearer("sk-user"), http.StatusForbidden},
			{"admin bearer", srv, bearer("sk-boss"), http.StatusOK},
			{"admin basic", srv, basic("sk-boss"), http.StatusOK},
			{"no admin configured", closed, bearer("sk-boss"), http.StatusForbidden},
			{"no admin configured, no key", closed, nil, http.StatusUnauthorized},
		}
		for _, tc := range tests {
			t.Run(path+"/"+tc.name, func(t *testing.T) {
				status, h, body := get(t, tc.srv.URL+path, tc.hdr)
				if status != tc.status {
					t.Fatalf("status %d, want %d: %s", status, tc.status, body)
				}
				if status == http.StatusUnauthorized && !strings.HasPrefix(h.Get("WWW-Authenticate"), "Basic ") {
					t.Errorf("401 without a Basic challenge: %q", h.Get("WWW-Authenticate"))
				}
				if status >= 400 && strings.Contains(string(body), "joules") {
					t.Errorf("a refusal carries figures: %s", body)
				}
			})
		}
	}
}

// Without keys the page is open, is HTML, and names nothing outside the proxy: it works offline.
func TestUIPageIsSelfContained(t *testing.T) {
	srv := upstreamEdge(t, okUpstream, Options{})
	status, h, body := get(t, srv.URL+"/ui", nil)
	if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/html") || !strings.Contains(string(body), "/ui/static/app.js") {
		t.Fatalf("GET /ui: %d %q", status, h.Get("Content-Type"))
	}
	err := fs.WalkDir(uiFiles, "ui", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(uiFiles, path)
		if err != nil {
			return err
		}
		s := strings.ReplaceAll(string(b), "http://www.w3.org/2000/svg", "") // a namespace, not a fetch
		for _, bad := range []string{"http://", "https://", "//cdn", "@import"} {
			if strings.Contains(s, bad) {
				t.Errorf("%s names %q: the page must work offline", path, bad)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/ui/static/app.js", "/ui/static/style.css"} {
		if status, _, _ := get(t, srv.URL+p, nil); status != http.StatusOK {
			t.Errorf("GET %s: %d", p, status)
		}
	}
	if status, _, _ := get(t, srv.URL+"/ui/static/../ui.go", nil); status == http.StatusOK {
		t.Errorf("a path out of the static dir was served")
	}
}

// The page's totals come from the settlement that feeds /metrics: per stage they equal
// eoc_joules_total, and the last calls carry figures and receipts but never the prompt or the
// completion.
func TestUIDataEqualsMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	keys := []APIKey{{ID: "boss", Key: "sk-boss", Budget: &Budget{Joules: 1e6, Per: "day"}}}
	counters := func() []Counter { return []Counter{{Name: "rapl", Reason: "no-rapl"}, {Name: "nvml", Live: true}} }
	srv := upstreamEdge(t, okUpstream, Options{Keys: keys, AdminKeyIDs: []string{"boss"}, Registry: reg, Counters: counters})
	auth := map[string]string{"Authorization": "Bearer sk-boss"}
	var coverage string // the last call's X-EOC-Budget-Coverage
	for range 3 {
		status, h, body := postChat(t, srv.URL, auth)
		if status != http.StatusOK {
			t.Fatalf("chat: %d %s", status, body)
		}
		coverage = h.Get(HeaderBudgetCoverage)
	}
	status, _, body := get(t, srv.URL+"/ui/data", func(r *http.Request) { r.Header.Set("Authorization", "Bearer sk-boss") })
	if status != http.StatusOK {
		t.Fatalf("/ui/data: %d %s", status, body)
	}
	var d UIData
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "eoc_joules_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			want[label(m, "stage")] += m.GetCounter().GetValue()
		}
	}
	if len(want) == 0 || len(d.Stages) != len(want) {
		t.Fatalf("stages %+v, metrics %v", d.Stages, want)
	}
	for _, s := range d.Stages {
		if math.Abs(s.Joules-want[s.Name]) > 1e-9 || s.Joules <= 0 || s.Calls != 3 {
			t.Errorf("stage %q: page %v J over %d calls, /metrics %v J", s.Name, s.Joules, s.Calls, want[s.Name])
		}
	}
	if len(d.Calls) != 3 || d.Calls[0].Receipt == "" || d.Calls[0].Backend != "up" || d.Calls[0].Tokens != 3 || d.Calls[0].Grade == "" {
		t.Errorf("last calls: %+v", d.Calls)
	}
	if len(d.Backends) != 1 || d.Backends[0].Calls != 3 || d.Backends[0].Measured+d.Backends[0].Estimated != 3 {
		t.Errorf("backends: %+v", d.Backends)
	}
	if p := d.Backends[0]; p.Estimated == 3 && (p.EstimatedPerToken == nil || p.JoulesPerToken != nil) {
		t.Errorf("J per token of estimated figures: %+v", p)
	}
	if len(d.Counters) != 2 || d.Counters[1].Name != "nvml" || !d.Counters[1].Live || d.Counters[0].Reason != "no-rapl" {
		t.Errorf("counters: %+v", d.Counters)
	}
	if len(d.Budgets) != 1 || d.Budgets[0].ID != "boss" || d.Budgets[0].Left >= 1e6 || d.Budgets[0].Left <= 0 ||
		coverage == "" || d.Budgets[0].Coverage != coverage {
		t.Errorf("budgets: %+v; the last call's budget coverage %q", d.Budgets, coverage)
	}
	if len(d.Minutes) != uiMinutes || d.Minutes[uiMinutes-1].Stages["neural"] <= 0 {
		t.Errorf("the last minute has no neural joules: %+v", d.Minutes[uiMinutes-1])
	}
	// The prompt is "a" and the completion "hi": neither may be a value in the data.
	if strings.Contains(string(body), `"hi"`) || strings.Contains(string(body), `"a"`) || strings.Contains(string(body), "sk-boss") {
		t.Errorf("the data carries a prompt, a completion or a key: %s", body)
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Saved joules are summed by stage and shown as a share of what the neural stage would have
// spent; the minute slots forget what is older than the window.
func TestUIStatsSavedAndWindow(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 30, 0, time.UTC)
	u := newUIStats(t0)
	fig := func(j, saved float64) energy.Figure {
		return energy.Figure{Joules: j, Saved: saved, Grade: energy.Estimated, Coverage: energy.CoverageWhole, Method: "stage-model"}
	}
	u.observe(&Call{Model: "m", Backend: "b", answered: true, tokens: 2, Stage: "neural", Status: 200, Receipt: "r1"}, "m", fig(6, 0), "", t0)
	u.observe(&Call{Model: "m", answered: true, Stage: "cache", Status: 200, Receipt: "r2"}, "m", fig(0.5, 6), "", t0)
	u.observe(&Call{Model: "m", answered: true, Stage: "graph", Status: 200, Receipt: "r3"}, "m", fig(0.5, 12), "", t0.Add(20*time.Minute))
	d := u.snapshot(t0.Add(20 * time.Minute))
	if d.Saved.Joules != 18 || d.Saved.ByStage["cache"] != 6 || d.Saved.ByStage["graph"] != 12 || math.Abs(d.Saved.Share-18.0/24) > 1e-12 {
		t.Errorf("saved: %+v", d.Saved)
	}
	var inWindow float64
	for _, m := range d.Minutes {
		for _, j := range m.Stages {
			inWindow += j
		}
	}
	if inWindow != 0.5 {
		t.Errorf("the window holds %v J, want only the last call's 0.5", inWindow)
	}
	if len(d.Calls) != 3 || d.Calls[0].Receipt != "r3" || d.Calls[2].Receipt != "r1" {
		t.Errorf("calls not newest first: %+v", d.Calls)
	}
}

// Once a stage, model and backend were seen, counting a call allocates nothing.
func TestUIStatsObserveDoesNotAllocate(t *testing.T) {
	u := newUIStats(time.Now())
	st := &Call{Model: "m", Backend: "b", answered: true, tokens: 5, Stage: "neural", Status: 200, Receipt: "r"}
	f := energy.Figure{Joules: 1, Grade: energy.Estimated, Coverage: energy.CoveragePartial, Method: "cpu-time-model", Reason: "no-rapl"}
	now := time.Now()
	u.observe(st, "m", f, "", now)
	if n := testing.AllocsPerRun(100, func() { u.observe(st, "m", f, "", now) }); n != 0 {
		t.Errorf("observe allocates %v times a call", n)
	}
}
