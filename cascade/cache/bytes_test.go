package cache

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
)

func answerOf(text string) *cascade.Answer {
	return &cascade.Answer{ID: "a", Model: "m", Backend: "b", Complete: true,
		Choices: []cascade.Choice{{Message: cascade.AnswerMessage{Role: "assistant", Content: &text}, FinishReason: "stop"}}}
}

func requestFor(q string) *cascade.Request {
	r := &cascade.Request{Raw: json.RawMessage(`{"model":"m","messages":[{"role":"user","content":` + fmt.Sprintf("%q", q) + `}]}`)}
	r.Chat.Model = "m"
	return r
}

// The cache holds at most MaxBytes of answers whatever their count, the least recently used
// going first; an answer over MaxEntryBytes, or one whose stream was too large to record, is
// not stored and is counted; an answer stored twice under one key is counted once.
func TestCacheBoundedInBytes(t *testing.T) {
	const maxBytes, maxEntry = 64 << 10, 16 << 10
	s := New(10000, time.Hour, MaxBytes(maxBytes), MaxEntryBytes(maxEntry))
	if s.MaxEntryBytes() != maxEntry {
		t.Fatalf("MaxEntryBytes %d", s.MaxEntryBytes())
	}
	text := strings.Repeat("x", 10<<10)
	for i := range 100 {
		s.Learn(requestFor(fmt.Sprint("q", i)), answerOf(text))
		if b := s.Stats().Bytes; b > maxBytes {
			t.Fatalf("after %d answers the cache holds %d bytes, over its %d", i+1, b, maxBytes)
		}
	}
	st := s.Stats()
	if st.Entries == 0 || st.Entries >= 100 || st.Bytes <= maxBytes/2 {
		t.Fatalf("stats %+v: want the newest answers kept within the bound", st)
	}
	if _, err := s.Serve(t.Context(), requestFor("q99"), nil); err != nil {
		t.Fatalf("the newest answer was evicted: %v", err)
	}
	// The same key again: its bytes are counted once.
	before := s.Stats().Bytes
	s.Learn(requestFor("q99"), answerOf(text))
	if after := s.Stats().Bytes; after != before {
		t.Fatalf("storing a key again moved the byte count %d → %d", before, after)
	}

	s.Learn(requestFor("huge"), answerOf(strings.Repeat("y", maxEntry+1)))
	over := answerOf("")
	over.Oversize = true
	s.Learn(requestFor("cut"), over)
	if st := s.Stats(); st.TooLarge != 2 {
		t.Fatalf("TooLarge %d, want 2", st.TooLarge)
	}
	for _, q := range []string{"huge", "cut"} {
		if _, err := s.Serve(t.Context(), requestFor(q), nil); err != cascade.ErrMiss { //nolint:errorlint // the sentinel itself
			t.Fatalf("%s: an answer over the entry bound was stored (%v)", q, err)
		}
	}
	// Expiry and eviction count bytes out: an emptied cache holds none.
	s.lru.Purge()
	if b := s.Stats().Bytes; b != 0 {
		t.Fatalf("an empty cache counts %d bytes", b)
	}
}
