package backends

import (
	"context"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/coldbench"
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
			cold := coldbench.New()
			b.ReportAllocs()
			for b.Loop() {
				var ans *cascade.Answer
				var err error
				cold.Time(b, func() { ans, err = be.Chat(ctx, req, nil) })
				if err != nil || !ans.Complete {
					b.Fatalf("Chat: %v", err)
				}
			}
			cold.Report(b, "call-ns")
		})
	}
}
