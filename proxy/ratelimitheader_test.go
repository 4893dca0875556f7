package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
)

// usageCounter is a shared budget store that counts its Usage round trips.
type usageCounter struct {
	*flakyShared
	usage atomic.Int64
}

func (u *usageCounter) Usage(ctx context.Context, key, period string, headroom float64) (float64, float64, float64, error) {
	u.usage.Add(1)
	return u.flakyShared.Usage(ctx, key, period, headroom)
}

// A call refused by its rate limit costs the shared store no budget round trip: the refusal
// carries no X-EOC-Budget-Remaining.
func TestRateLimitRefusalSkipsBudgetUsage(t *testing.T) {
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"known-*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := cascade.New(router, []cascade.Stage{figureStage{}}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	store := &usageCounter{flakyShared: newFlakyShared()}
	srv := httptest.NewServer(New(Options{Cascade: c, Logger: zerolog.Nop(), MaxBodyBytes: 1 << 20, SharedBudgets: store,
		Keys: []APIKey{{ID: "team", Key: "sk-team", Budget: &Budget{Joules: 10, Per: "day"}, Limits: &Rate{RPM: 1}}}}))
	t.Cleanup(srv.Close)
	post := func() (int, http.Header) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"known-1","messages":[{"role":"user","content":"hello"}]}`))
		req.Header.Set("Authorization", "Bearer sk-team")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		_, _ = io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header
	}
	if st, h := post(); st != http.StatusOK || h.Get(HeaderBudgetRemaining) == "" {
		t.Fatalf("first call: %d, remaining %q", st, h.Get(HeaderBudgetRemaining))
	}
	before := store.usage.Load()
	st, h := post()
	if st != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Fatalf("second call in the minute: %d", st)
	}
	if n := store.usage.Load() - before; n != 0 || h.Get(HeaderBudgetRemaining) != "" {
		t.Fatalf("a rate-limit refusal made %d budget usage round trips, remaining %q", n, h.Get(HeaderBudgetRemaining))
	}
}
