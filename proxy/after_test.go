package proxy

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
)

// heldLearner is a stage before the answering one that learns: Learn waits until release is
// closed, so a response that waited for the learning would never reach the client.
type heldLearner struct {
	release chan struct{}
	learned chan string // the request ids learned
}

func (heldLearner) Name() string { return "held" }
func (heldLearner) Serve(context.Context, *cascade.Request, cascade.Sink) (*cascade.Answer, error) {
	return nil, cascade.ErrMiss
}
func (l heldLearner) Learn(req *cascade.Request, _ *cascade.Answer) {
	<-l.release
	l.learned <- req.ID
}

// The response goes out before what only reports the call: a learner that holds the handler
// does not hold the client's answer (whole, or the stream up to its last event), while the
// ledger's record of the call is written before the client has it, and the metrics follow.
func TestResponseBeforeLearningAndMetrics(t *testing.T) {
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"known-*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, stream := range []bool{false, true} {
		learner := heldLearner{release: make(chan struct{}), learned: make(chan string, 1)}
		var mu sync.Mutex
		recorded := map[string]bool{}
		reg := prometheus.NewRegistry()
		s := New(Options{Cascade: cascade.New(router, []cascade.Stage{learner, echoStage{}}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()}),
			Logger: zerolog.Nop(), Registry: reg, Record: func(c Call) error {
				mu.Lock()
				defer mu.Unlock()
				recorded[c.RequestID] = true
				return nil
			}})
		srv := httptest.NewServer(s)
		released := false
		release := func() {
			if !released {
				released = true
				close(learner.release)
			}
		}
		body := `{"model":"known-1","messages":[{"role":"user","content":"hi"}]}`
		if stream {
			body = `{"model":"known-1","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		}
		// A response held by the learning never comes: the client gives up instead of hanging.
		client := &http.Client{Timeout: time.Minute}
		resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			release()
			t.Fatal(err)
		}
		id := resp.Header.Get("X-Request-Id")
		if stream {
			// Every event up to [DONE] arrives while the learner holds the handler.
			sc := bufio.NewScanner(resp.Body)
			done := false
			for !done && sc.Scan() {
				done = sc.Text() == "data: [DONE]"
			}
			if !done {
				release()
				t.Fatalf("stream: no [DONE] before the learning: %v", sc.Err())
			}
		} else if b, err := io.ReadAll(resp.Body); err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"hi"`) {
			release()
			t.Fatalf("whole: %d %s %v", resp.StatusCode, b, err)
		}
		mu.Lock()
		if !recorded[id] {
			t.Errorf("stream %v: the client has the answer of %s before its ledger record", stream, id)
		}
		mu.Unlock()
		release()
		if got := <-learner.learned; got != id {
			t.Errorf("stream %v: learned %q, want %q", stream, got, id)
		}
		_, _ = io.Copy(io.Discard, resp.Body) // a stream's trailers follow the report
		_ = resp.Body.Close()
		s.WaitReported()
		if n := counterSum(t, reg, "eoc_requests_total"); n != 1 {
			t.Errorf("stream %v: eoc_requests_total = %v after one call, want 1", stream, n)
		}
		srv.Close()
	}
}

// counterSum is the sum of the counter name's series in reg.
func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
