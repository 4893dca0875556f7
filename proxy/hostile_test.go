package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

// A panic in a stage is a 500 in OpenAI's shape, and the call is still settled: it has a ledger
// record, and a budgeted key whose first call it was is not blocked afterwards.
func TestPanicSettlesAndRecords(t *testing.T) {
	router, err := cascade.NewRouter([]cascade.Route{{Name: "b", Patterns: []string{"known-*"}, Backend: nopBackend{}}})
	if err != nil {
		t.Fatal(err)
	}
	c := cascade.New(router, []cascade.Stage{echoStage{}}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	var mu sync.Mutex
	var calls []Call
	srv := httptest.NewServer(New(Options{Cascade: c, Logger: zerolog.Nop(), MaxBodyBytes: 1 << 20,
		Keys: []APIKey{{ID: "team", Key: "sk-team", Budget: &Budget{Joules: 1000, Per: "day"}}},
		Record: func(c Call) error { mu.Lock(); defer mu.Unlock(); calls = append(calls, c); return nil }}))
	t.Cleanup(srv.Close)
	post := func(prompt string) *http.Response {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		body := `{"model":"known-1","messages":[{"role":"user","content":"` + prompt + `"}]}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-team")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v (a blocked key times out here)", prompt, err)
		}
		_ = resp.Body.Close()
		return resp
	}
	if resp := post("panic"); resp.StatusCode != http.StatusInternalServerError || resp.Header.Get("Content-Type") != "application/json" ||
		resp.Header.Get(HeaderReceipt) == "" {
		t.Fatalf("panic: status %d, headers %v", resp.StatusCode, resp.Header)
	}
	mu.Lock()
	n := len(calls)
	if n != 1 || calls[0].Status != http.StatusInternalServerError || calls[0].KeyID != "team" {
		t.Fatalf("records after the panic: %+v", calls)
	}
	mu.Unlock()
	for i := range 3 {
		if resp := post("hello"); resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d after the panic: status %d", i, resp.StatusCode)
		}
	}
}
