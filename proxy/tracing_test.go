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
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/eoc-proxy/eoc-proxy/backends"
	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/neural"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
)

// missStage never answers.
type missStage struct{}

func (missStage) Name() string { return "cache" }
func (missStage) Serve(context.Context, *cascade.Request, cascade.Sink) (*cascade.Answer, error) {
	return nil, cascade.ErrMiss
}

// tracedEdge is an edge with a stage that misses, then the neural stage over two OpenAI
// backends: "down" answers 503, "up" answers. It returns the traceparents each upstream saw.
func tracedEdge(t *testing.T, tp trace.TracerProvider) (*httptest.Server, func() map[string][]string) {
	t.Helper()
	var mu sync.Mutex
	seen := map[string][]string{}
	upstream := func(name string, h http.HandlerFunc) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[name] = append(seen[name], r.Header.Get("Traceparent"))
			mu.Unlock()
			h(w, r)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	var routes []routing.Route
	for _, b := range []struct {
		name string
		h    http.HandlerFunc
	}{{"down", upstreamStatus(http.StatusServiceUnavailable, "")}, {"up", okUpstream}} {
		be, err := backends.New(backends.Options{Name: b.name, Type: "openai", URL: upstream(b.name, b.h), Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		routes = append(routes, routing.Route{Name: b.name, Type: "openai", Patterns: []string{"*"}, Backend: be})
	}
	router, err := routing.New(routes, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := cascade.New(router, []cascade.Stage{missStage{}, neural.New(router, nil)}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
	srv := httptest.NewServer(New(Options{Cascade: c, Logger: zerolog.Nop(), Tracing: tp}))
	t.Cleanup(srv.Close)
	return srv, func() map[string][]string {
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// checkEnergy fails unless the span carries a whole energy figure under k, and none under the
// other names: the billed figure (eoc.energy.*) is on the call's span alone.
func checkEnergy(t *testing.T, s sdktrace.ReadOnlySpan, k figureKeys) {
	t.Helper()
	a := attrs(s)
	if a[k.joules].AsFloat64() <= 0 || a[k.grade].AsString() == "" || a[k.coverage].AsString() == "" || a[k.method].AsString() == "" {
		t.Errorf("span %q lacks the energy figure under %s: %v", s.Name(), k.joules, s.Attributes())
	}
	for _, other := range []figureKeys{callFigure, stageFigure, attemptFigure} {
		if _, ok := a[other.joules]; ok && other != k {
			t.Errorf("span %q carries %s as well: %v", s.Name(), other.joules, s.Attributes())
		}
	}
}

// One trace per call: the server span, under the client's traceparent when it sent one, a child
// per stage tried and, under the neural stage, one per backend attempt, each with the energy
// figure; the answering attempt's span context goes upstream as traceparent.
func TestTracesCarryStagesAttemptsAndEnergy(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	srv, upstreams := tracedEdge(t, tp)

	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	if status, _, body := postChat(t, srv.URL, map[string]string{"Traceparent": "00-" + clientTrace + "-" + clientSpan + "-01"}); status != http.StatusOK {
		t.Fatalf("chat: %d %s", status, body)
	}
	if status, _, body := postChat(t, srv.URL, nil); status != http.StatusOK {
		t.Fatalf("chat: %d %s", status, body)
	}
	settled(t, srv) // the call span ends after the response
	byTrace := map[trace.TraceID][]sdktrace.ReadOnlySpan{}
	for _, s := range exp.GetSpans().Snapshots() {
		byTrace[s.SpanContext().TraceID()] = append(byTrace[s.SpanContext().TraceID()], s)
	}
	if len(byTrace) != 2 {
		t.Fatalf("%d traces for 2 calls", len(byTrace))
	}
	for id, spans := range byTrace {
		named := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range spans {
			named[s.Name()] = s
		}
		root, cache, neuralSpan, down, up := named["POST /v1/chat/completions"], named["stage cache"], named["stage neural"], named["attempt down"], named["attempt up"]
		if len(spans) != 5 || root == nil || cache == nil || neuralSpan == nil || down == nil || up == nil {
			t.Fatalf("trace %s: spans %v", id, keys(named))
		}
		if root.SpanKind() != trace.SpanKindServer || up.SpanKind() != trace.SpanKindClient {
			t.Errorf("kinds: root %v, attempt %v", root.SpanKind(), up.SpanKind())
		}
		if cache.Parent().SpanID() != root.SpanContext().SpanID() || neuralSpan.Parent().SpanID() != root.SpanContext().SpanID() ||
			down.Parent().SpanID() != neuralSpan.SpanContext().SpanID() || up.Parent().SpanID() != neuralSpan.SpanContext().SpanID() {
			t.Errorf("trace %s: stage spans are not the call's children, or attempts not the neural stage's", id)
		}
		if id.String() == clientTrace {
			if root.Parent().SpanID().String() != clientSpan || !root.Parent().IsRemote() {
				t.Errorf("the call's span is not under the client's traceparent: parent %v", root.Parent())
			}
		} else if root.Parent().IsValid() {
			t.Errorf("a call without traceparent has a parent: %v", root.Parent())
		}
		a := attrs(root)
		if a[attrStage].AsString() != "neural" || a[attrBackend].AsString() != "up" || a[attrModel].AsString() != "m" ||
			a[attrOutTokens].AsInt64() != 3 || a[attrInTokens].AsInt64() != 1 || a[attrReceipt].AsString() == "" || a[attrStatusCode].AsInt64() != 200 {
			t.Errorf("call span attributes: %v", root.Attributes())
		}
		checkEnergy(t, root, callFigure)
		checkEnergy(t, up, attemptFigure)
		checkEnergy(t, neuralSpan, stageFigure)
		// Summed over the trace, the billed joules are the call's, counted once.
		sum := 0.0
		for _, s := range spans {
			sum += attrs(s)[callFigure.joules].AsFloat64()
		}
		if sum != attrs(root)[callFigure.joules].AsFloat64() {
			t.Errorf("trace %s: eoc.energy.joules sums to %v, the call's is %v", id, sum, attrs(root)[callFigure.joules].AsFloat64())
		}
		if o := attrs(cache)[attrOutcome].AsString(); o != "miss" || cache.Status().Code == codes.Error {
			t.Errorf("cache stage: outcome %q, status %v", o, cache.Status())
		}
		if down.Status().Code != codes.Error || attrs(down)[attrOutcome].AsString() != "status" || attrs(up)[attrOutTokens].AsInt64() != 3 {
			t.Errorf("attempts: down %v %v, up %v", down.Status(), down.Attributes(), up.Attributes())
		}
		sent := upstreams()["up"]
		want := "00-" + id.String() + "-" + up.SpanContext().SpanID().String() + "-01"
		found := false
		for _, tp := range sent {
			found = found || tp == want
		}
		if !found {
			t.Errorf("upstream saw traceparents %v, want one of %s (the attempt's span)", sent, want)
		}
	}
}

// Without a tracer the edge makes no span, even with a global provider installed, and passes the
// client's traceparent upstream as it came.
func TestNoTracerNoSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	srv, upstreams := tracedEdge(t, nil)
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if status, _, body := postChat(t, srv.URL, map[string]string{"Traceparent": tp}); status != http.StatusOK {
		t.Fatalf("chat: %d %s", status, body)
	}
	if postChat(t, srv.URL, nil); len(exp.GetSpans()) != 0 {
		t.Errorf("%d spans without a tracer", len(exp.GetSpans()))
	}
	if got := upstreams()["up"]; len(got) != 2 || got[0] != tp || got[1] != "" {
		t.Errorf("upstream traceparents %q, want the client's, then none", got)
	}
}

func keys(m map[string]sdktrace.ReadOnlySpan) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return strings.Join(out, ", ")
}
