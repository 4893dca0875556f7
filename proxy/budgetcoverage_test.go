package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

// figureStage answers every call with a stated figure: 4 J partial (its GPU part unknown) when
// the prompt is "partial", else 1 J whole.
type figureStage struct{}

func (figureStage) Name() string { return "neural" }
func (figureStage) Serve(ctx context.Context, req *cascade.Request, _ cascade.Sink) (*cascade.Answer, error) {
	ans, err := echoStage{}.Serve(ctx, req, nil)
	if err != nil {
		return nil, err
	}
	ans.Energy = whole(1)
	if req.Chat.Messages[0].Text() == "partial" {
		ans.Energy = partialFig(4)
	}
	return ans, nil
}

// Every response of a key with a budget says whether the period's spend is whole or partly
// unknown, beside what remains: plain answers, streams (the header sent up front, the trailer
// and the eoc chunk) and refusals alike (issue 10).
func TestBudgetCoverageHeader(t *testing.T) {
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"known-*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := cascade.New(router, []cascade.Stage{figureStage{}}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	srv := httptest.NewServer(New(Options{Cascade: c, Logger: zerolog.Nop(), MaxBodyBytes: 1 << 20,
		Keys:        []APIKey{{ID: "team", Key: "sk-team", Budget: &Budget{Joules: 10, Per: "day"}}, {ID: "free", Key: "sk-free"}},
		AdminKeyIDs: []string{"team"}}))
	t.Cleanup(srv.Close)
	// reply is what a call got back: the body is read, so the trailers are there too.
	type reply struct {
		StatusCode      int
		Header, Trailer http.Header
	}
	post := func(key, prompt string, stream bool) (reply, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		body := `{"model":"known-1","stream":` + map[bool]string{true: "true", false: "false"}[stream] +
			`,"messages":[{"role":"user","content":"` + prompt + `"}]}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body) // the trailers are read with the body
		return reply{resp.StatusCode, resp.Header, resp.Trailer}, string(b)
	}
	check := func(name string, resp reply, remaining, coverage string) {
		t.Helper()
		if got := resp.Header.Get(HeaderBudgetRemaining); got != remaining {
			t.Errorf("%s: %s %q, want %q", name, HeaderBudgetRemaining, got, remaining)
		}
		if got := resp.Header.Get(HeaderBudgetCoverage); got != coverage {
			t.Errorf("%s: %s %q, want %q", name, HeaderBudgetCoverage, got, coverage)
		}
	}

	resp, _ := post("sk-team", "hello", false)
	check("whole call", resp, "9", energy.CoverageWhole)
	resp, _ = post("sk-team", "partial", false)
	check("partial call", resp, "5", energy.CoveragePartial) // charged its 4 J all the same
	if resp.Header.Get(HeaderCoverage) != energy.CoveragePartial {
		t.Fatalf("the call's own coverage: %q", resp.Header.Get(HeaderCoverage))
	}
	resp, _ = post("sk-team", "hello", false)
	check("whole call after a partial one", resp, "4", energy.CoveragePartial)
	// The page says so too: what is left is an upper bound.
	status, _, page := get(t, srv.URL+"/ui/data", func(r *http.Request) { r.Header.Set("Authorization", "Bearer sk-team") })
	var d UIData
	if status != http.StatusOK || json.Unmarshal(page, &d) != nil || len(d.Budgets) != 1 ||
		d.Budgets[0].Coverage != energy.CoveragePartial || d.Budgets[0].Left != 4 {
		t.Errorf("/ui/data: %d, budgets %+v", status, d.Budgets)
	}

	// A stream: the header up front (less the stream's own reservation, twice the dearest call),
	// then the trailer and the eoc chunk after the call.
	resp, body := post("sk-team", "hello", true)
	check("stream, up front", resp, "-4", energy.CoveragePartial)
	if got := resp.Trailer.Get(HeaderBudgetCoverage); got != energy.CoveragePartial {
		t.Errorf("stream trailer %s %q (trailers %v)", HeaderBudgetCoverage, got, resp.Trailer)
	}
	eoc := lastEOC(t, body)
	if eoc == nil || eoc.BudgetRemaining == nil || *eoc.BudgetRemaining != 3 || eoc.BudgetCoverage != energy.CoveragePartial {
		t.Errorf("stream eoc chunk: %+v", eoc)
	}

	// A refusal says it too: 3 J left, a 4 J partial call takes the key past its budget.
	resp, _ = post("sk-team", "partial", false)
	check("last call", resp, "-1", energy.CoveragePartial)
	resp, _ = post("sk-team", "hello", false)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("over budget: status %d", resp.StatusCode)
	}
	check("refusal", resp, "-1", energy.CoveragePartial)

	// A key without a budget gets neither header.
	resp, _ = post("sk-free", "partial", false)
	if resp.Header.Get(HeaderBudgetRemaining) != "" || resp.Header.Get(HeaderBudgetCoverage) != "" {
		t.Errorf("a key without a budget: %v", resp.Header)
	}
}
