package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/proxy"
)

// TestQuerySettles: a provisional call's state is printed, and query reads the settled figure
// from the calls endpoint (waiting, read after read, until it is settled) and prints it with
// both receipts; when the endpoint cannot say, the provisional figure stands, and query says so.
func TestQuerySettles(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set("X-Eoc-Joules", "10")
	rec.Header().Set("X-Eoc-Energy", "measured")
	rec.Header().Set(proxy.HeaderJoulesState, proxy.StateProvisional)
	rec.Header().Set("X-Eoc-Receipt", "client-receipt")
	rec.Header().Set("X-Request-Id", "req_1")
	rec.WriteHeader(http.StatusOK)
	res := queryResultOf("m", rec.Result())
	if res.State != proxy.StateProvisional {
		t.Fatalf("state %q", res.State)
	}

	reads := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reads++
		if r.URL.Path != "/v1/eoc/calls/req_1" || r.URL.Query().Get("wait") != "1" || r.Header.Get("Authorization") != "Bearer sk" {
			t.Errorf("read %s %v", r.URL, r.Header)
		}
		v := proxy.CallFigure{RequestID: "req_1", State: proxy.StateProvisional, View: energy.View{Joules: 10}, Receipt: "client-receipt"}
		if reads == 2 {
			v.State, v.View, v.SettledReceipt = proxy.StateSettled, energy.View{Joules: 12, JoulesLow: 12, JoulesHigh: 12, Grade: "measured", Coverage: "whole"}, "settled-receipt"
		}
		_ = json.NewEncoder(w).Encode(v)
	})
	settleQuery(context.Background(), h, "sk", &res)
	if reads != 2 || res.Settled == nil || res.Settled.State != proxy.StateSettled || res.Settled.Joules != 12 || res.Settled.SettledReceipt != "settled-receipt" {
		t.Fatalf("%d reads, settled %+v", reads, res.Settled)
	}
	var out bytes.Buffer
	if err := printQuery(&out, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"state   : provisional", "settled : 12 J measured", "receipt : client-receipt", "settled receipt : settled-receipt"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}

	res.Settled = nil
	settleQuery(context.Background(), http.NotFoundHandler(), "", &res)
	if res.Settled == nil || res.Settled.State != proxy.StateProvisional || !strings.Contains(res.Settled.Unsettled, "404") {
		t.Fatalf("endpoint failed: %+v", res.Settled)
	}
}
