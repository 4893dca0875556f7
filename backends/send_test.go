package backends

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

// A call's request is a copy of its endpoint's, its headers shared, yet it reads as one made per
// call: the same headers reach the upstream, a redirect is followed, a user in the URL is sent as
// basic auth (on a copy of the shared headers), and a failure to connect is the client's
// *url.Error.
func TestRequestAsMadePerCall(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.typ+"/headers", func(t *testing.T) {
			f := d.fake(t)
			b := newBackend(t, d.typ, f, func(o *Options) { o.APIKey = "sk-test" })
			for _, sink := range []cascade.Sink{nil, (&collector{}).sink} {
				if _, err := b.Chat(context.Background(), chatRequest(t, helloBody), sink); err != nil {
					t.Fatal(err)
				}
				want := map[string]string{"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "eoc-proxy",
					"Authorization": "Bearer sk-test", "Traceparent": ""}
				if sink != nil {
					want["Accept"] = map[string]string{"ollama": "application/x-ndjson"}[d.typ]
					if want["Accept"] == "" {
						want["Accept"] = "text/event-stream"
					}
				}
				h := f.LastRequest().Header
				for k, v := range want {
					if got := h.Get(k); got != v {
						t.Errorf("stream %v: %s = %q, want %q", sink != nil, k, got, v)
					}
				}
			}
		})
		t.Run(d.typ+"/redirect", func(t *testing.T) {
			f := d.fake(t)
			moved := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, f.URL+strings.TrimPrefix(r.URL.Path, "/moved"), http.StatusTemporaryRedirect)
			}))
			t.Cleanup(moved.Close)
			b := newBackend(t, d.typ, f, func(o *Options) { o.URL = moved.URL + "/moved" + strings.TrimPrefix(o.URL, f.URL) })
			ans, err := b.Chat(context.Background(), chatRequest(t, helloBody), nil)
			if err != nil || ans.Text() != fakes.DefaultReply {
				t.Fatalf("Chat through a redirect: %v", err)
			}
			if got := string(f.LastBody()); !strings.Contains(got, "Say hello.") {
				t.Errorf("the redirected call's body: %s", got)
			}
		})
		t.Run(d.typ+"/user", func(t *testing.T) {
			f := d.fake(t)
			b := newBackend(t, d.typ, f, func(o *Options) { o.URL = strings.Replace(o.URL, "http://", "http://u:p@", 1) })
			if _, err := b.Chat(context.Background(), chatRequest(t, helloBody), nil); err != nil {
				t.Fatal(err)
			}
			if got := f.LastRequest().Header.Get("Authorization"); got != "Basic dTpw" {
				t.Errorf("Authorization = %q, want basic auth", got)
			}
		})
		t.Run(d.typ+"/given-client", func(t *testing.T) {
			// A given client's transport that rewrites each request's URL and headers (as a
			// prefixing proxy transport would) rewrites that call's copy, not every later call's.
			f := d.fake(t)
			rw := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				if !strings.HasPrefix(r.URL.Path, "/pre/") {
					return nil, errors.New("no /pre prefix: an earlier call's rewrite reached this one")
				}
				r.URL.Path = strings.TrimPrefix(r.URL.Path, "/pre")
				r.Header.Set("X-Seen", r.Header.Get("X-Seen")+"x")
				return http.DefaultTransport.RoundTrip(r)
			})
			b := newBackend(t, d.typ, f, func(o *Options) {
				o.URL = strings.Replace(o.URL, f.URL, f.URL+"/pre", 1)
				o.Client = &http.Client{Transport: rw}
			})
			for i := range 2 {
				if _, err := b.Chat(context.Background(), chatRequest(t, helloBody), nil); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if got := f.LastRequest().Header.Get("X-Seen"); got != "x" {
					t.Errorf("call %d: X-Seen = %q, want one mark (the headers were shared)", i, got)
				}
			}
			if _, err := b.Chat(context.Background(), chatRequest(t, helloBody), (&collector{}).sink); err != nil {
				t.Fatalf("stream after two whole calls: %v", err)
			}
		})
		t.Run(d.typ+"/unreachable", func(t *testing.T) {
			u := closedPortURL(t)
			b, err := New(Options{Name: "gone", Type: d.typ, URL: u})
			if err != nil {
				t.Fatal(err)
			}
			_, err = b.Chat(context.Background(), chatRequest(t, helloBody), nil)
			var ue *url.Error
			if !errors.As(err, &ue) || ue.Op != "Post" || !strings.HasPrefix(ue.URL, u+"/") {
				t.Errorf("err = %v, want the client's *url.Error for a POST to %s", err, u)
			}
		})
	}
}

// withTrace leaves the shared headers alone: without a trace context it returns them, with one
// a copy that carries it.
func TestWithTrace(t *testing.T) {
	shared := http.Header{"Accept": hdrJSON}
	if h := withTrace(context.Background(), shared); len(h) != 1 || h.Get("Traceparent") != "" {
		t.Errorf("without a trace context: %v", h)
	}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithRemoteSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}))
	h := withTrace(ctx, shared)
	if got, want := h.Get("Traceparent"), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; got != want || h.Get("Accept") != "application/json" {
		t.Errorf("traceparent = %q, want %q; headers %v", got, want, h)
	}
	if len(shared) != 1 {
		t.Errorf("the shared headers were written: %v", shared)
	}
}

// roundTripFunc is an http.RoundTripper of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
