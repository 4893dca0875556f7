//go:build linux

package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Both hit floors answer with the captured answer under a fresh id, with the captured headers and
// their own body's length; the decoding one refuses a body it cannot decode.
func TestHitFloorReplaysTheAnswerWithAFreshID(t *testing.T) {
	for _, decode := range []bool{true, false} {
		t.Run(map[bool]string{true: "decoding", false: "bytes"}[decode], func(t *testing.T) { testHitFloor(t, decode) })
	}
}

func testHitFloor(t *testing.T, decode bool) {
	answer := `{"object":"chat.completion","id":"chatcmpl-34e56787009ebe9dba2ec59b","model":"bench-model","created":1,` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello."},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":12,"completion_tokens":4,"total_tokens":16}}`
	captured, err := json.Marshal(cachedResponse{
		Header: http.Header{"Content-Length": {"999"}, "Date": {"then"}, "X-Eoc-Stage": {"cache"}, "Content-Type": {"application/json"}},
		Body:   []byte(answer),
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "hit.json")
	if err := os.WriteFile(path, captured, 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := hitFloorHandler(path, decode)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(body string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
		return w
	}
	q := `{"model":"bench-model","messages":[{"role":"user","content":"hi"}]}`
	var ids []string
	for range 2 {
		w := ask(q)
		if w.Code != http.StatusOK {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		if got := w.Header().Get("X-Eoc-Stage"); got != "cache" {
			t.Errorf("X-Eoc-Stage %q, want the captured cache", got)
		}
		if got := w.Header().Get("Date"); got != "" {
			t.Errorf("the captured Date %q replayed", got)
		}
		if got, want := w.Header().Get("Content-Length"), strconv.Itoa(w.Body.Len()); got != want {
			t.Errorf("Content-Length %s, want the body's %s", got, want)
		}
		var a hitAnswer
		if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
			t.Fatal(err)
		}
		if len(a.Choices) != 1 || a.Choices[0].Message == nil || a.Choices[0].Message.Content != "Hello." || a.Usage.TotalTokens != 16 {
			t.Errorf("answer %s, want the captured choices and usage", w.Body)
		}
		if len(a.ID) != len("chatcmpl-34e56787009ebe9dba2ec59b") || a.Created == 1 {
			t.Errorf("id %q created %d: want a fresh id as long as the captured one, and a fresh time", a.ID, a.Created)
		}
		ids = append(ids, a.ID)
	}
	if ids[0] == ids[1] {
		t.Errorf("two answers with the id %s", ids[0])
	}
	// The decoding floor refuses a body it cannot decode; the bytes floor keys bytes and reads
	// nothing in them.
	want := map[bool]int{true: http.StatusBadRequest, false: http.StatusOK}[decode]
	if w := ask(`{"model":`); w.Code != want {
		t.Errorf("a broken body: status %d, want %d", w.Code, want)
	}
}
