package kv

import (
	"testing"
	"testing/fstest"
)

func TestOptionsDefaults(t *testing.T) {
	zero := 0.0
	for _, tc := range []struct {
		name      string
		o         Options
		threshold float32
		max, q    int
		temp      float64
	}{
		{"zero value", Options{}, DefaultThreshold, DefaultMaxEntries, DefaultLearnQueue, DefaultMaxSimilarTemperature},
		{"DefaultOptions", DefaultOptions(), DefaultThreshold, DefaultMaxEntries, DefaultLearnQueue, DefaultMaxSimilarTemperature},
		{"set", Options{Threshold: 0.9, MaxEntries: 5, LearnQueue: 3, MaxSimilarTemperature: &zero}, 0.9, 5, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStage(t, tc.o)
			if s.threshold != tc.threshold || s.maxEntries != tc.max || cap(s.queue) != tc.q || s.maxTemp != tc.temp {
				t.Fatalf("threshold %v max %d queue %d temp %v", s.threshold, s.maxEntries, cap(s.queue), s.maxTemp)
			}
			if _, ok := s.emb.(Builtin); !ok {
				t.Fatalf("embedder %T, want Builtin", s.emb)
			}
		})
	}
}

// TestSeedFilesFromFS reads seeds through the given file system, not the disk.
func TestSeedFilesFromFS(t *testing.T) {
	fsys := fstest.MapFS{"seeds/faq.jsonl": {Data: []byte(`{"question":"Where is it?","answer":"In the FS.","joules":7}` + "\n")}}
	s := newStage(t, Options{SeedFiles: []string{"seeds/faq.jsonl"}, Files: fsys})
	if ans, hit := serve(t, s, request("", "m", user("where is it"))); !hit || ans.Text() != "In the FS." || ans.Energy.Saved != 7 {
		t.Fatalf("seed from the FS not served: %v", hit)
	}
	if _, err := New(Options{SeedFiles: []string{"seeds/other.jsonl"}, Files: fsys}); err == nil {
		t.Fatal("a file missing from the FS loaded")
	}
}
