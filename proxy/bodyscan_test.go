package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/cascade/routing"
)

// hostileBody is a body of n elements elem between head and tail, comma-separated.
func hostileBody(head, elem, tail string, n int) []byte {
	var b bytes.Buffer
	b.Grow(len(head) + n*(len(elem)+1) + len(tail))
	b.WriteString(head)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(elem)
	}
	b.WriteString(tail)
	return b.Bytes()
}

// allocated returns the bytes the process allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// errorOf decodes an error answer in OpenAI's shape.
func errorOf(t *testing.T, body []byte) (param, code, message string) {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Type != "invalid_request_error" {
		t.Fatalf("not an error in OpenAI's shape: %.300s", body)
	}
	if e.Error.Param != nil {
		param = *e.Error.Param
	}
	if e.Error.Code != nil {
		code = *e.Error.Code
	}
	return param, code, e.Error.Message
}

// A body shaped to amplify (millions of empty messages, content parts, tool calls, stop
// sequences, embedding inputs; deep nesting) is refused with a 400 naming the bound, and
// decoding it allocates a small multiple of its bytes: the body itself, read into one buffer of
// its declared length, and little else.
func TestHostileBodyDecodesWithinItsBytes(t *testing.T) {
	const big = 3_400_000 // `{},` three bytes each: 10.2 MB, under the default 10 MiB limit
	user := `{"role":"user","content":"hi"}`
	tests := []struct {
		name  string
		path  string
		body  []byte
		param string
	}{
		{"empty messages", "/v1/chat/completions", hostileBody(`{"model":"known-1","messages":[`, `{}`, `]}`, big), "messages"},
		{"null messages", "/v1/chat/completions", hostileBody(`{"model":"known-1","messages":[`, `null`, `]}`, 2_000_000), "messages"},
		{"messages under a name in capitals", "/v1/chat/completions", hostileBody(`{"model":"known-1","MESSAGES":[`, `{}`, `]}`, big), "messages"},
		{"messages sent twice", "/v1/chat/completions",
			[]byte(`{"model":"known-1","messages":[` + strings.Repeat(user+",", maxMessages-1) + user + `],"messages":[` + user + `]}`), "messages"},
		{"content parts", "/v1/chat/completions", hostileBody(`{"model":"known-1","messages":[{"role":"user","content":[`, `{}`, `]}]}`, big), "messages[0].content"},
		{"tool calls", "/v1/chat/completions", hostileBody(`{"model":"known-1","messages":[`+user+`,{"role":"assistant","tool_calls":[`, `{}`, `]}]}`, big), "messages[1].tool_calls"},
		{"tools", "/v1/chat/completions", hostileBody(`{"model":"known-1","messages":[`+user+`],"tools":[`, `{}`, `]}`, big), "tools"},
		{"stop", "/v1/chat/completions", hostileBody(`{"model":"known-1","messages":[`+user+`],"stop":[`, `""`, `]}`, 2_000_000), "stop"},
		{"nesting", "/v1/chat/completions", []byte(`{"model":"known-1","messages":[` + user + `],"x":` + strings.Repeat("[", 5_000_000) + strings.Repeat("]", 5_000_000) + `}`), ""},
		{"embedding inputs", "/v1/embeddings", hostileBody(`{"model":"known-1","input":[`, `""`, `]}`, 3_000_000), "input"},
	}
	s := New(Options{Cascade: echoCascade(t), Logger: zerolog.Nop()})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			got := allocated(func() {
				s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, tc.path, bytes.NewReader(tc.body)))
			})
			if rec.Code != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %.300s", rec.Code, rec.Body)
			}
			param, code, msg := errorOf(t, rec.Body.Bytes())
			if param != tc.param || code == "" {
				t.Errorf("param %q, code %q (%s); want param %q and a code", param, code, msg, tc.param)
			}
			ratio := float64(got) / float64(len(tc.body))
			t.Logf("%d bytes: %d allocated (%.2f×): %s", len(tc.body), got, ratio, msg)
			if ratio > 3 {
				t.Errorf("decoding %d bytes allocated %d (%.1f× the body); want at most 3×", len(tc.body), got, ratio)
			}
		})
	}
}

// The bounds refuse only what exceeds them: a request at every bound is served.
func TestBodyAtTheBoundsIsServed(t *testing.T) {
	user := `{"role":"user","content":[{"type":"text","text":"hi"}]}`
	var b strings.Builder
	b.WriteString(`{"model":"known-1","messages":[`)
	for i := range maxMessages {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(user)
	}
	b.WriteString(`],"stop":[` + strings.TrimSuffix(strings.Repeat(`"x",`, maxStop), ",") + `]`)
	b.WriteString(`,"tools":[` + strings.TrimSuffix(strings.Repeat(`{"type":"function","function":{"name":"f"}},`, maxTools), ",") + `]`)
	b.WriteString(`,"x":` + strings.Repeat("[", maxDepth-1) + strings.Repeat("]", maxDepth-1) + `}`)
	s := New(Options{Cascade: echoCascade(t), Logger: zerolog.Nop()})
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(b.String())))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %.300s", rec.Code, rec.Body)
	}
}

// FuzzScanBody: whatever the body, a JSON request that decodes with more elements than a bound
// allows is refused by the scan, and the scan refuses nothing it does not name.
func FuzzScanBody(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Add(hostileBody(`{"model":"m","messages":[`, `{"tool_calls":[{},{}],"content":[1]}`, `]}`, 70))
	f.Add(hostileBody(`{"Stop":[`, `"a"`, `]}`, 65))
	f.Add(hostileBody(`{"tools":[`, `{}`, `]}`, 129))
	f.Fuzz(func(t *testing.T, body []byte) {
		e := scanBody(body, scanChat)
		if e != nil && (e.Status != http.StatusBadRequest || e.Code == "") {
			t.Fatalf("scan refusal %+v", e)
		}
		var c cascade.ChatRequest
		if json.Unmarshal(body, &c) != nil {
			return
		}
		calls, parts := 0, 0
		for _, m := range c.Messages {
			calls += len(m.ToolCalls)
			if n := len(m.Parts()); n > 0 {
				parts += n
			}
		}
		over := len(c.Messages) > maxMessages || len(c.Tools) > maxTools || calls > maxToolCalls || parts > maxContentParts
		var stop []json.RawMessage
		if json.Unmarshal(c.Stop, &stop) == nil && len(stop) > maxStop {
			over = true
		}
		if over && e == nil {
			t.Fatalf("decoded over a bound (%d messages, %d tools, %d calls, %d parts, %d stop), not refused", len(c.Messages), len(c.Tools), calls, parts, len(stop))
		}
	})
}

// echoCascade answers every known-* model with "hi" and embeds nothing.
func echoCascade(t testing.TB) *cascade.Cascade {
	t.Helper()
	router, err := routing.New([]routing.Route{{Name: "b", Patterns: []string{"known-*"}, Backend: nopBackend{}}}, routing.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return cascade.New(router, []cascade.Stage{echoStage{}}, cascade.Options{StageWatts: 10, Logger: zerolog.Nop()})
}

// A content part that is not an object with a type, and a think that is not one of Ollama's
// values, are refused at the edge with a 400 naming the field, whichever stage would have
// answered: here an OpenAI backend that takes anything.
func TestMalformedFieldsRefusedAtTheEdge(t *testing.T) {
	srv := upstreamEdge(t, okUpstream, Options{})
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, body, param string
	}{
		{"content of numbers", `{"model":"m","messages":[{"role":"user","content":[1,2]}]}`, "messages[0].content[0]"},
		{"content part without a type", `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":[{"type":"text","text":"a"},{"text":"b"}]}]}`, "messages[1].content[1]"},
		{"text part of a number", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":7}]}]}`, "messages[0].content[0].text"},
		{"think maybe", `{"model":"m",` + msgs + `,"think":"maybe"}`, "think"},
		{"think number", `{"model":"m",` + msgs + `,"think":1}`, "think"},
		{"reasoning_effort number", `{"model":"m",` + msgs + `,"reasoning_effort":3}`, "reasoning_effort"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", resp.StatusCode, b)
			}
			if param, _, msg := errorOf(t, b); param != tc.param || !strings.Contains(msg, tc.param) {
				t.Errorf("param %q, message %q; want both to name %q", param, msg, tc.param)
			}
		})
	}
	for _, ok := range []string{
		`{"model":"m",` + msgs + `,"think":true}`, `{"model":"m",` + msgs + `,"think":"high"}`, `{"model":"m",` + msgs + `,"think":null}`,
		`{"model":"m",` + msgs + `,"reasoning_effort":"xhigh"}`, `{"model":"m",` + msgs + `,"think":1,"think":false}`,
		`{"model":"m",` + msgs + `,"Think":"maybe"}`, // not the name the backends read
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"input_audio","input_audio":{}}]}]}`,
	} {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(ok))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d: %s", ok, resp.StatusCode, b)
		}
	}
}

// A body that stalls gets its 408 and then the connection is closed: the server does not wait on
// the rest of the body (the read deadline stays), so no goroutine or descriptor is held. The
// client sees EOF after the answer.
func TestStalledBodyClosesTheConnection(t *testing.T) {
	for _, tc := range []struct{ name, head string }{
		{"content-length", "Content-Length: 1000\r\n"},
		{"chunked", "Transfer-Encoding: chunked\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(New(Options{Cascade: echoCascade(t), Logger: zerolog.Nop(), BodyTimeout: 200 * time.Millisecond}))
			t.Cleanup(srv.Close)
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			body := "{"
			if tc.name == "chunked" {
				body = "1\r\n{\r\n"
			}
			_, _ = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s\r\n%s", tc.head, body)
			_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second)) // bounds a hang only
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
				t.Fatalf("status %d, close %v: %s", resp.StatusCode, resp.Close, b)
			}
			n, err := br.Read(make([]byte, 1))
			if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("after the 408: read %d bytes, %v; want EOF, the connection closed", n, err)
			}
		})
	}
}

// A body read for a declared length takes room as bytes arrive, not as declared: a client that
// declares 10 MiB and sends two bytes holds kilobytes.
func TestReadBodyGrowsWithWhatArrives(t *testing.T) {
	var got []byte
	n := allocated(func() {
		var err error
		if got, err = readBody(strings.NewReader("{}"), 10<<20, 10<<20); err != nil {
			t.Error(err)
		}
	})
	if string(got) != "{}" || n > 128<<10 {
		t.Fatalf("read %q allocating %d bytes for a 10 MiB declaration", got, n)
	}
	// More than declared, past the limit (a reader net/http does not end at the declared length):
	// refused at the limit, not read to its end.
	for _, size := range []int{101, 1000} {
		got, err := readBody(strings.NewReader(strings.Repeat("x", size)), 10, 100)
		var tooBig *http.MaxBytesError
		if !errors.As(err, &tooBig) || tooBig.Limit != 100 || len(got) > 101 {
			t.Fatalf("a body of %d bytes past the limit: read %d bytes, err %v; want a MaxBytesError at 100", size, len(got), err)
		}
	}
	if got, err := readBody(strings.NewReader(strings.Repeat("x", 100)), 10, 100); err != nil || len(got) != 100 {
		t.Fatalf("a body at the limit: read %d bytes, err %v", len(got), err)
	}
}
