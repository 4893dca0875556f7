package kv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// 5,000 invented model names, each with one learned answer, made 5,000 collections: MaxEntries
// bounds only each one. With the defaults the collections are now bounded, and a collection that
// clients keep asking survives the flood.
func TestInventedModelsBoundCollections(t *testing.T) {
	s := newStage(t, Options{LearnQueue: 8192})
	teach(t, s, request("", "real", user("How do I reset my password?")), neural("use the link", 1))
	for i := range 5000 {
		s.Learn(request("", fmt.Sprintf("invented-%d", i), user(fmt.Sprintf("question number %d about things", i))), neural("x", 1))
		if i%500 == 0 {
			s.Flush()
			if _, hit := serve(t, s, request("", "real", user("How do I reset my password?"))); !hit {
				t.Fatalf("after %d invented names the real model's answer is gone: %+v", i, s.Stats())
			}
		}
	}
	s.Flush()
	st := s.Stats()
	if st.Learned != 5001 || st.Collections > DefaultMaxCollections || st.Entries > DefaultMaxCollections {
		t.Fatalf("after 5,000 invented names: %+v (want at most %d collections)", st, DefaultMaxCollections)
	}
	if st.DroppedCollections != int64(5001-st.Collections) {
		t.Errorf("dropped %d collections, want %d", st.DroppedCollections, 5001-st.Collections)
	}
	if _, hit := serve(t, s, request("", "real", user("How do I reset my password?"))); !hit {
		t.Error("the real model's answer was dropped")
	}
}

// MaxTotalEntries bounds the sum over collections: each collection trims itself to its share,
// and the least recently used ones go first, from disk too.
func TestTotalEntriesBound(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kv")
	o := Options{DataDir: dir, MaxEntries: 1000, MaxTotalEntries: 200, MaxCollections: 3}
	s := newStage(t, o)
	for m := range 6 {
		for i := range 150 {
			s.Learn(request("", fmt.Sprintf("m%d", m), user(fmt.Sprintf("question %d for model %d", i, m))), neural("a", 1))
		}
		s.Flush()
		if st := s.Stats(); st.Entries > 200 || st.Collections > 3 {
			t.Fatalf("after model %d: %+v", m, st)
		}
	}
	st := s.Stats()
	if st.Learned != 900 || st.Collections != 3 || st.Entries > 200 || st.Entries < 3*minShare {
		t.Fatalf("stats: %+v", st)
	}
	// The latest model keeps its newest answers.
	if _, hit := serve(t, s, request("", "m5", user("question 149 for model 5"))); !hit {
		t.Error("the newest answer of the newest model is gone")
	}
	if _, hit := serve(t, s, request("", "m0", user("question 149 for model 0"))); hit {
		t.Error("the least recently used model was kept")
	}
	_ = s.Close()
	dirs, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) != 3 {
		t.Errorf("%d collections on disk, want 3", len(dirs))
	}
	// Reopening with a smaller bound drops the excess at load.
	s2 := newStage(t, Options{DataDir: dir, MaxEntries: 1000, MaxTotalEntries: 100, MaxCollections: 3})
	if st := s2.Stats(); st.Entries > 100 {
		t.Errorf("reopened with a total bound of 100: %+v", st)
	}
}

// Inserting an id the collection holds replaces its entry: the store's total does not move, so
// a stream of repeats does not drift it upward (and trim the store for entries it does not hold).
func TestReplacedEntryKeepsTheTotal(t *testing.T) {
	s := newStage(t, Options{})
	col := newCollection("", "m")
	l := newLSH(4)
	for i := range 10 {
		v := []float32{1, float32(i % 2), 0, 1}
		normalize(v)
		s.insertBounded(t.Context(), col, &entry{id: fmt.Sprint(i % 2), vec: v, sketch: l.sketch(v)})
	}
	if got, held := s.total.Load(), len(col.entries()); got != int64(held) || held != 2 {
		t.Fatalf("total %d after 10 inserts of 2 ids; the collection holds %d", got, held)
	}
}

// MaxBytes bounds the entries' bytes whatever their count, across collections, the newest
// answer of the collection written kept; an answer over MaxEntryBytes is not learned and is
// counted.
func TestBytesBound(t *testing.T) {
	const maxBytes = 256 << 10
	s := newStage(t, Options{MaxBytes: maxBytes, MaxEntryBytes: 32 << 10})
	long := strings.Repeat("answer text ", 2000) // 24 kB
	for m := range 3 {
		for i := range 20 {
			s.Learn(request("", fmt.Sprintf("m%d", m), user(fmt.Sprintf("question %d for model %d", i, m))), neural(long, 1))
		}
		s.Flush()
		if st := s.Stats(); st.Bytes > maxBytes {
			t.Fatalf("after model %d: %d bytes, over the %d bound (%+v)", m, st.Bytes, maxBytes, st)
		}
	}
	st := s.Stats()
	if st.Learned != 60 || st.Entries >= 60 || st.Bytes < maxBytes/2 {
		t.Fatalf("stats %+v", st)
	}
	if _, hit := serve(t, s, request("", "m2", user("question 19 for model 2"))); !hit {
		t.Error("the newest answer is gone")
	}
	s.Learn(request("", "m0", user("a question with a huge answer")), neural(strings.Repeat("y", 33<<10), 1))
	over := neural("cut", 1)
	over.Oversize = true
	s.Learn(request("", "m0", user("a question whose stream was cut")), over)
	s.Flush()
	if st := s.Stats(); st.TooLarge != 2 || st.Learned != 60 {
		t.Fatalf("stats %+v: want 2 answers not learned for their size", st)
	}
}
