package backends

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkChatCold is one whole call to each dialect's fake with the CPU caches evicted before
// it, as the server runs a backend call between other work: call-ns is the median call. The
// fake runs in this process, so its own (cold) work is in the figure too, the same for any
// version of the backend. The backend has a timeout and a max duration, as the shipped config.
func BenchmarkChatCold(b *testing.B) {
	for _, d := range dialects {
		b.Run(d.typ, func(b *testing.B) {
			be := newBackend(b, d.typ, d.fake(b), func(o *Options) { o.MaxDuration = 30 * time.Minute })
			req := chatRequest(b, benchBody)
			ctx := context.Background()
			if _, err := be.Chat(ctx, req, nil); err != nil {
				b.Fatal(err)
			}
			evict := make([]byte, 16<<20)
			var calls []time.Duration
			b.ReportAllocs()
			for b.Loop() {
				coldCaches(evict)
				t0 := time.Now()
				ans, err := be.Chat(ctx, req, nil)
				calls = append(calls, time.Since(t0))
				if err != nil || !ans.Complete {
					b.Fatalf("Chat: %v", err)
				}
			}
			slices.Sort(calls)
			b.ReportMetric(float64(calls[len(calls)/2]), "call-ns")
		})
	}
}

// coldCaches writes over buf, a few times the size of the CPU's caches, so that the code and
// data a call touches next come from memory.
func coldCaches(buf []byte) {
	for i := 0; i < len(buf); i += 64 {
		buf[i]++
	}
}
