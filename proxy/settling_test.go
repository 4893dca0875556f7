package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

// gpuFig is a measured GPU figure of j joules, bounds low..high, provisional or not.
func gpuFig(j, low, high float64, provisional bool) energy.Figure {
	return energy.Figure{Joules: j, Low: low, High: high, Grade: energy.Measured, Coverage: energy.CoverageWhole,
		Method: "rapl+nvml", Provisional: provisional}
}

// settlingStage answers like the neural stage on a GPU before NVML's counter updated: a
// provisional 10 J (8..14) whose Settle gives 12 J once release is closed, or, with fail set,
// gives up at once with the provisional figure and an error, as a wait that ran out does.
type settlingStage struct {
	release chan struct{}
	fail    bool
	partial bool // Settle gives 11 J still provisional: a part could not settle
	calls   *int // Settle calls
	mu      *sync.Mutex
}

func newSettlingStage(fail bool) settlingStage {
	return settlingStage{release: make(chan struct{}), fail: fail, calls: new(int), mu: &sync.Mutex{}}
}

func (settlingStage) Name() string { return "neural" }

func (s settlingStage) settle(ctx context.Context) (energy.Figure, error) {
	s.mu.Lock()
	*s.calls++
	s.mu.Unlock()
	if s.fail {
		return gpuFig(10, 8, 14, true), context.DeadlineExceeded
	}
	if s.partial {
		return gpuFig(11, 9, 13, true), nil
	}
	select {
	case <-s.release:
		return gpuFig(12, 12, 12, false), nil
	case <-ctx.Done():
		return gpuFig(10, 8, 14, true), ctx.Err()
	}
}

func (s settlingStage) Serve(ctx context.Context, req *cascade.Request, _ cascade.Sink) (*cascade.Answer, error) {
	ans, err := echoStage{}.Serve(ctx, req, nil)
	if err != nil {
		return nil, err
	}
	ans.Backend, ans.Energy, ans.Settle = "gpu", gpuFig(10, 8, 14, true), s.settle
	ans.Attempts = []cascade.BackendAttempt{{Backend: "gpu", Outcome: "ok", Status: 200, Energy: ans.Energy}}
	return ans, nil
}

func (s settlingStage) ServeEmbed(context.Context, *cascade.EmbedCall) (*cascade.Embeddings, error) {
	return &cascade.Embeddings{Vectors: [][]float32{{1, 2}}, PromptTokens: 1, Backend: "gpu",
		Energy: gpuFig(10, 8, 14, true), Settle: s.settle}, nil
}

// settleEdge is a proxy over one stage, with two keys (team has a budget), a ledger hook and
// metrics.
type settleEdge struct {
	srv *Server
	url string
	reg *prometheus.Registry
	mu  sync.Mutex
	rec []Call
	// failCalls makes the ledger hook fail every call's own record (not a settlement).
	failCalls bool
}

func newSettleEdge(t *testing.T, st cascade.Stage) *settleEdge {
	t.Helper()
	router, err := routing.New([]routing.Route{{Name: "gpu", Patterns: []string{"*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := &settleEdge{reg: prometheus.NewRegistry()}
	e.srv = New(Options{Cascade: cascade.New(router, []cascade.Stage{st}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()}),
		Logger: zerolog.Nop(), Registry: e.reg,
		Keys: []APIKey{{ID: "team", Key: "sk-team", Budget: &Budget{Joules: 1000, Per: "day"}}, {ID: "other", Key: "sk-other"}},
		Record: func(c Call) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.failCalls && c.Settles == "" {
				return errors.New("disk full")
			}
			e.rec = append(e.rec, c)
			return nil
		}})
	hs := httptest.NewServer(e.srv)
	t.Cleanup(hs.Close)
	e.url = hs.URL
	return e
}

func (e *settleEdge) recorded() []Call {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Call(nil), e.rec...)
}

// do sends a request with key and returns the status, the headers and trailers, and the body.
func (e *settleEdge) do(t *testing.T, method, path, key, body string) (int, http.Header, http.Header, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, resp.Trailer, string(b)
}

// call gets GET /v1/eoc/calls/{id} as key.
func (e *settleEdge) call(t *testing.T, key, id string, wait bool) (int, CallFigure) {
	t.Helper()
	path := "/v1/eoc/calls/" + id
	if wait {
		path += "?wait=1"
	}
	status, _, _, body := e.do(t, http.MethodGet, path, key, "")
	var v CallFigure
	if status == http.StatusOK {
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
	} else if !strings.Contains(body, `"error"`) || !strings.Contains(body, `"code":"call_not_found"`) {
		t.Fatalf("status %d without OpenAI's error shape: %s", status, body)
	}
	return status, v
}

// settledCall waits, a bounded wait at a time, until the call is settled or its wait failed.
func (e *settleEdge) settledCall(t *testing.T, key, id string) CallFigure {
	t.Helper()
	for range 30 {
		status, v := e.call(t, key, id, true)
		if status != http.StatusOK {
			t.Fatalf("status %d", status)
		}
		if v.State == StateSettled || v.Unsettled != "" {
			return v
		}
	}
	t.Fatal("the call never settled")
	return CallFigure{}
}

// counter is the sum of a counter's series whose labels include want.
func (e *settleEdge) counter(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

const settleBody = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

// TestResponseDoesNotWaitForSettlement: the response carries the provisional figure and says
// so while the settlement is still blocked; the call's record is written with it; only once it
// settles do the ledger (a settlement record naming the call), the budget, the metrics and the
// page get the settled figure, once; the client reads it by request id.
func TestResponseDoesNotWaitForSettlement(t *testing.T) {
	st := newSettlingStage(false)
	e := newSettleEdge(t, st)
	status, h, _, _ := e.do(t, http.MethodPost, "/v1/chat/completions", "sk-team", settleBody)
	// The settlement is blocked until release closes: this response did not wait for it.
	if status != http.StatusOK || h.Get(HeaderJoules) != "10" || h.Get(HeaderJoulesState) != StateProvisional ||
		h.Get(HeaderJoulesLow) != "8" || h.Get(HeaderJoulesHigh) != "14" {
		t.Fatalf("status %d, headers %v", status, h)
	}
	id, receipt := h.Get("X-Request-Id"), h.Get(HeaderReceipt)
	rt, err := time.Parse(time.RFC3339Nano, h.Get(HeaderReceiptTime))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.recorded(); len(got) != 1 || !got[0].Energy.Provisional || got[0].Receipt != receipt || got[0].Settles != "" {
		t.Fatalf("recorded before settlement: %+v", got)
	}
	if want := (energy.Receipt{Key: e.recorded()[0].Key, Stage: "neural", Model: "m", Joules: 10, Grade: energy.Measured, Time: rt}).Hash(); receipt != want {
		t.Fatalf("receipt %s is not the provisional figure's (%s)", receipt, want)
	}
	// Nothing is counted before the figure settles.
	if n := e.counter(t, "eoc_requests_total", nil); n != 0 {
		t.Fatalf("%v requests counted before settlement", n)
	}
	if status, v := e.call(t, "sk-team", id, false); status != http.StatusOK || v.State != StateProvisional || v.Joules != 10 ||
		v.Receipt != receipt || v.Provisional.Joules != 10 {
		t.Fatalf("before settlement: %d %+v", status, v)
	}
	if status, _ := e.call(t, "sk-other", id, false); status != http.StatusNotFound {
		t.Fatalf("another key's call: status %d, want 404", status)
	}
	if status, _ := e.call(t, "sk-team", "req_unknown", false); status != http.StatusNotFound {
		t.Fatalf("an unknown id: status %d, want 404", status)
	}

	close(st.release)
	v := e.settledCall(t, "sk-team", id)
	if v.State != StateSettled || v.Joules != 12 || v.JoulesLow != 12 || v.Provisional.Joules != 10 || v.Provisional.JoulesHigh != 14 ||
		v.Receipt != receipt || v.SettledReceipt == "" || v.SettledReceipt == receipt || v.Unsettled != "" {
		t.Fatalf("settled: %+v", v)
	}
	if err := e.srv.Close(); err != nil {
		t.Fatal(err)
	}
	got := e.recorded()
	if len(got) != 2 {
		t.Fatalf("%d records, want the call and its settlement", len(got))
	}
	s := got[1]
	if s.Settles != receipt || s.RequestID != id || s.KeyID != "team" || s.Energy.Joules != 12 || s.Energy.Provisional ||
		s.Receipt != v.SettledReceipt || s.Attempts != nil {
		t.Fatalf("settlement record %+v", s)
	}
	if want := (energy.Receipt{Key: s.Key, Stage: s.Stage, Model: s.Model, Joules: 12, Grade: energy.Measured, Time: s.Time}).Hash(); s.Receipt != want {
		t.Fatalf("settlement's receipt %s, its fields give %s", s.Receipt, want)
	}
	if j := e.counter(t, "eoc_joules_total", map[string]string{"stage": "neural"}); j != 12 {
		t.Errorf("eoc_joules_total %v, want the settled 12 once", j)
	}
	if n := e.counter(t, "eoc_requests_total", nil); n != 1 {
		t.Errorf("eoc_requests_total %v, want 1", n)
	}
	if left, ok := e.srv.budgets.remaining("team"); !ok || left.joules != 1000-12 {
		t.Errorf("budget left %+v, want 988 (charged the settled figure)", left)
	}
	d := e.srv.ui.snapshot(time.Now())
	if len(d.Stages) != 1 || d.Stages[0].Joules != 12 || d.Stages[0].Calls != 1 || len(d.Calls) != 1 || d.Calls[0].Joules != 12 ||
		d.Calls[0].Receipt != receipt || d.Calls[0].SettledReceipt != s.Receipt {
		t.Errorf("page: stages %+v, calls %+v", d.Stages, d.Calls)
	}
	if *st.calls != 1 {
		t.Errorf("Settle called %d times, want once", *st.calls)
	}
}

// TestSettlementFails: when the wait for the settled figure fails, the call's record stands with
// its provisional figure (marked so), no settlement is recorded, and the budget, metrics and
// endpoint take the provisional figure, saying it did not settle.
func TestSettlementFails(t *testing.T) {
	e := newSettleEdge(t, newSettlingStage(true))
	status, h, _, _ := e.do(t, http.MethodPost, "/v1/chat/completions", "sk-team", settleBody)
	if status != http.StatusOK || h.Get(HeaderJoulesState) != StateProvisional {
		t.Fatalf("status %d, headers %v", status, h)
	}
	v := e.settledCall(t, "sk-team", h.Get("X-Request-Id"))
	if v.State != StateProvisional || v.Joules != 10 || v.Unsettled == "" || v.SettledReceipt != "" {
		t.Fatalf("a failed settlement: %+v", v)
	}
	if err := e.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if got := e.recorded(); len(got) != 1 || !got[0].Energy.Provisional {
		t.Fatalf("records %+v: want the call's alone, provisional", got)
	}
	if j := e.counter(t, "eoc_joules_total", nil); j != 10 {
		t.Errorf("eoc_joules_total %v, want the provisional 10", j)
	}
	if left, ok := e.srv.budgets.remaining("team"); !ok || left.joules != 990 {
		t.Errorf("budget left %+v, want 990", left)
	}
}

// TestStreamSaysProvisional: a stream's trailer and final eoc chunk carry the state.
func TestStreamSaysProvisional(t *testing.T) {
	st := newSettlingStage(false)
	e := newSettleEdge(t, st)
	defer close(st.release)
	status, _, tr, body := e.do(t, http.MethodPost, "/v1/chat/completions", "sk-team",
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if status != http.StatusOK || tr.Get(HeaderJoulesState) != StateProvisional || tr.Get(HeaderJoules) != "10" {
		t.Fatalf("status %d, trailers %v", status, tr)
	}
	eoc := lastEOC(t, body)
	if eoc == nil || eoc.State != StateProvisional || eoc.Joules != 10 || eoc.JoulesHigh != 14 || !strings.Contains(body, `"state":"provisional"`) {
		t.Fatalf("eoc chunk %+v in %s", eoc, body)
	}
}

// TestEmbeddingsSettle: an embeddings call settles the same way.
func TestEmbeddingsSettle(t *testing.T) {
	st := newSettlingStage(false)
	e := newSettleEdge(t, st)
	status, h, _, _ := e.do(t, http.MethodPost, "/v1/embeddings", "sk-team", `{"model":"m","input":"a"}`)
	if status != http.StatusOK || h.Get(HeaderJoulesState) != StateProvisional || h.Get(HeaderJoules) != "10" {
		t.Fatalf("status %d, headers %v", status, h)
	}
	close(st.release)
	if v := e.settledCall(t, "sk-team", h.Get("X-Request-Id")); v.State != StateSettled || v.Joules != 12 {
		t.Fatalf("settled: %+v", v)
	}
	if err := e.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if got := e.recorded(); len(got) != 2 || got[1].Settles != h.Get(HeaderReceipt) {
		t.Fatalf("records %+v", got)
	}
}

// TestFinalFigureIsSettled: a figure that is final when made says so, and the endpoint has it
// at once; with auth off any caller reads any call.
func TestFinalFigureIsSettled(t *testing.T) {
	srv := newEdge(t, 1<<20)
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"known-1","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.Header.Get(HeaderJoulesState) != StateSettled {
		t.Fatalf("state %q", resp.Header.Get(HeaderJoulesState))
	}
	get, err := http.Get(srv.URL + "/v1/eoc/calls/" + resp.Header.Get("X-Request-Id") + "?wait=1")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = get.Body.Close() }()
	var v CallFigure
	if err := json.NewDecoder(get.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	if get.StatusCode != http.StatusOK || v.State != StateSettled || v.Receipt != resp.Header.Get(HeaderReceipt) ||
		v.Joules != v.Provisional.Joules || v.Method != "stage-model" {
		t.Fatalf("status %d, %+v", get.StatusCode, v)
	}
}

// TestCallsTableBounds: a key's calls are bounded by count and by bytes, its oldest dropped
// first, and another key's stay.
func TestCallsTableBounds(t *testing.T) {
	tab := newCallsTable()
	o := Call{Stage: "neural", Energy: gpuFig(1, 1, 1, false), Receipt: "r"}
	tab.put(callOf("b", "keep", o), nil)
	for i := range maxCallsPerKey + 10 {
		tab.put(callOf("a", "id-"+strconv.Itoa(i), o), nil)
	}
	if _, ok := tab.get("a", "id-0"); ok {
		t.Error("the oldest call beyond the count bound is kept")
	}
	if _, ok := tab.get("a", "id-"+strconv.Itoa(maxCallsPerKey+9)); !ok {
		t.Error("the newest call is gone")
	}
	if n := len(tab.keys["a"].byID); n != maxCallsPerKey {
		t.Errorf("%d calls kept, want %d", n, maxCallsPerKey)
	}
	// The ring has wrapped: every call kept is the newest ones, each under its own id, and a
	// replayed id keeps its place.
	tab.put(callOf("a", "id-20", Call{Stage: "replayed", Energy: gpuFig(1, 1, 1, false), Receipt: "r2"}), nil)
	for i := 10; i < maxCallsPerKey+10; i++ {
		e, ok := tab.get("a", "id-"+strconv.Itoa(i))
		if want := "r"; i == 20 {
			want = "r2"
			if !ok || e.receipt != want {
				t.Fatalf("id-%d: kept %v, receipt %q; want %q", i, ok, e.receipt, want)
			}
		} else if !ok || e.receipt != want || e.id != "id-"+strconv.Itoa(i) {
			t.Fatalf("id-%d: kept %v, entry %q receipt %q", i, ok, e.id, e.receipt)
		}
	}
	tab.put(callOf("a", "id-next", o), nil)
	if _, ok := tab.get("a", "id-10"); ok {
		t.Error("the oldest call is kept past the count bound")
	}
	if _, ok := tab.get("a", "id-20"); !ok {
		t.Error("a replayed id lost its place")
	}
	big := o
	big.Energy.Reason = strings.Repeat("r", 64<<10)
	for i := range 100 {
		tab.put(callOf("a", "big-"+strconv.Itoa(i), big), nil)
	}
	if k := tab.keys["a"]; k.bytes > maxCallBytesPerKey || len(k.byID) != k.n {
		t.Errorf("%d bytes in %d calls (%d ids), bound %d", k.bytes, k.n, len(k.byID), maxCallBytesPerKey)
	}
	if _, ok := tab.get("a", "big-99"); !ok {
		t.Error("the newest big call is gone")
	}
	if _, ok := tab.get("b", "keep"); !ok {
		t.Error("another key's call was dropped")
	}
	if _, ok := tab.get("a", "keep"); ok {
		t.Error("a key reads another key's call")
	}
}

// TestSettlementLeavesAPartProvisional: when a part of the figure has no settlement of its own,
// the rest is settled and recorded, and the call says it is still provisional, and why.
func TestSettlementLeavesAPartProvisional(t *testing.T) {
	st := newSettlingStage(false)
	st.partial = true
	e := newSettleEdge(t, st)
	_, h, _, _ := e.do(t, http.MethodPost, "/v1/chat/completions", "sk-team", settleBody)
	v := e.settledCall(t, "sk-team", h.Get("X-Request-Id"))
	if v.State != StateProvisional || v.Joules != 11 || v.Unsettled == "" || v.SettledReceipt == "" {
		t.Fatalf("%+v", v)
	}
	if err := e.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if got := e.recorded(); len(got) != 2 || got[1].Energy.Joules != 11 || got[1].Settles != h.Get(HeaderReceipt) {
		t.Fatalf("records %+v", got)
	}
}

// TestNextCallDoesNotWaitForSettlement: a budgeted key's first call settles its budget at its
// High with the response, so the key's next call is answered while the first call's settlement
// is still blocked; each settlement then books the settled figure, once.
func TestNextCallDoesNotWaitForSettlement(t *testing.T) {
	st := newSettlingStage(false)
	e := newSettleEdge(t, st)
	status, h, _, _ := e.do(t, http.MethodPost, "/v1/chat/completions", "sk-team", settleBody)
	if status != http.StatusOK || h.Get(HeaderBudgetRemaining) != "986" {
		t.Fatalf("first call: status %d, headers %v", status, h)
	}
	first := h.Get("X-Request-Id")
	status, h, _, _ = e.do(t, http.MethodPost, "/v1/chat/completions", "sk-team", settleBody)
	if status != http.StatusOK || h.Get(HeaderBudgetRemaining) != "972" {
		t.Fatalf("second call: status %d, headers %v", status, h)
	}
	// The second call was answered before the first's settlement ran (it still blocks on
	// release): not after the first gave up waiting.
	if status, v := e.call(t, "sk-team", first, false); status != http.StatusOK || v.State != StateProvisional || v.Unsettled != "" {
		t.Fatalf("the first call settled before the second was answered: %d %+v", status, v)
	}
	close(st.release)
	for _, id := range []string{first, h.Get("X-Request-Id")} {
		if v := e.settledCall(t, "sk-team", id); v.State != StateSettled {
			t.Fatalf("%s: %+v", id, v)
		}
	}
	if err := e.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if left, ok := e.srv.budgets.remaining("team"); !ok || left.joules != 1000-24 {
		t.Errorf("budget left %+v, want 976 (the settled 12 J twice)", left)
	}
}

// TestSettlementNeedsTheCallsRecord: when the call's own ledger record failed, its settlement
// is not recorded (it would name a record the chain lacks); the budget, metrics and calls table
// still take the settled figure.
func TestSettlementNeedsTheCallsRecord(t *testing.T) {
	st := newSettlingStage(false)
	e := newSettleEdge(t, st)
	e.mu.Lock()
	e.failCalls = true
	e.mu.Unlock()
	_, h, _, _ := e.do(t, http.MethodPost, "/v1/chat/completions", "sk-team", settleBody)
	close(st.release)
	v := e.settledCall(t, "sk-team", h.Get("X-Request-Id"))
	if err := e.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if got := e.recorded(); len(got) != 0 {
		t.Fatalf("records %+v: a settlement of a call the ledger lacks", got)
	}
	if v.State != StateSettled || v.Joules != 12 || v.SettledReceipt != "" {
		t.Fatalf("%+v", v)
	}
	if left, _ := e.srv.budgets.remaining("team"); left.joules != 988 {
		t.Errorf("budget left %+v, want 988", left)
	}
	if j := e.counter(t, "eoc_joules_total", nil); j != 12 {
		t.Errorf("eoc_joules_total %v, want 12", j)
	}
}

// TestSettlementAfterClose: a call whose response goes out after Close keeps its provisional
// figure: no settlement runs or is recorded (the ledger may be closed), and the rest take the
// provisional figure.
func TestSettlementAfterClose(t *testing.T) {
	st := newSettlingStage(false)
	close(st.release)
	e := newSettleEdge(t, st)
	if err := e.srv.Close(); err != nil {
		t.Fatal(err)
	}
	_, h, _, _ := e.do(t, http.MethodPost, "/v1/chat/completions", "sk-team", settleBody)
	v := e.settledCall(t, "sk-team", h.Get("X-Request-Id"))
	if got := e.recorded(); len(got) != 1 || got[0].Settles != "" {
		t.Fatalf("records %+v: want the call's alone", got)
	}
	if v.State != StateProvisional || v.Joules != 10 || v.Unsettled == "" || *st.calls != 0 {
		t.Fatalf("%+v, Settle called %d times", v, *st.calls)
	}
	if left, _ := e.srv.budgets.remaining("team"); left.joules != 990 {
		t.Errorf("budget left %+v, want 990", left)
	}
}

// TestCallWaitOutlivesEviction: a ?wait=1 read whose call is dropped from the table while it
// waits answers with the figure it read, not an empty one.
func TestCallWaitOutlivesEviction(t *testing.T) {
	e := newSettleEdge(t, newSettlingStage(false))
	done := make(chan struct{})
	o := Call{Stage: "neural", Energy: gpuFig(10, 8, 14, true), Receipt: "r", Time: time.Now()}
	e.srv.calls.put(callOf("team", "req_x", o), done)
	e.srv.calls.waiting = func(string) {
		for i := range maxCallsPerKey {
			e.srv.calls.put(callOf("team", "other-"+strconv.Itoa(i), o), nil)
		}
		close(done)
	}
	status, v := e.call(t, "sk-team", "req_x", true)
	if status != http.StatusOK || v.RequestID != "req_x" || v.Joules != 10 || v.JoulesHigh != 14 || v.Receipt != "r" || v.State != StateProvisional {
		t.Fatalf("status %d, %+v", status, v)
	}
	if _, ok := e.srv.calls.get("team", "req_x"); ok {
		t.Fatal("the call was not dropped: the test tests nothing")
	}
}

// TestCallsTableTotalBytes: across keys the table holds at most maxCallBytes, the key with the
// most bytes dropping its oldest first, and every key keeps its newest call.
func TestCallsTableTotalBytes(t *testing.T) {
	tab := newCallsTable()
	big := Call{Stage: "neural", Energy: gpuFig(1, 1, 1, false), Receipt: "r"}
	big.Energy.Reason = strings.Repeat("r", 64<<10)
	keys := 2 * maxCallBytes / maxCallBytesPerKey
	for i := range 20 {
		for k := range keys {
			tab.put(callOf("k"+strconv.Itoa(k), "id-"+strconv.Itoa(i), big), nil)
		}
	}
	sum := 0
	for name, k := range tab.keys {
		sum += k.bytes
		if _, ok := k.byID["id-19"]; !ok {
			t.Errorf("key %s lost its newest call", name)
		}
	}
	if tab.bytes > maxCallBytes || sum != tab.bytes {
		t.Fatalf("%d bytes held (keys sum to %d), bound %d", tab.bytes, sum, maxCallBytes)
	}
}

// lastEOC is the figures of the last `eoc` chunk of an SSE body, nil when it has none.
func lastEOC(t *testing.T, body string) *eocFigures {
	t.Helper()
	var eoc *eocFigures
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || !strings.Contains(line, `"eoc"`) {
			continue
		}
		var ch eocChunk
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			t.Fatal(err)
		}
		eoc = &ch.EOC
	}
	return eoc
}

// callOf is c as key's call id, for the calls table.
func callOf(key, id string, c Call) *Call {
	c.KeyID, c.RequestID = key, id
	return &c
}
