package ledger

import (
	"path/filepath"
	"testing"
)

// BenchmarkAppend measures one append, for each fsync policy, from one goroutine and from many
// (where fsync every shares each fsync among the appends waiting for it).
func BenchmarkAppend(b *testing.B) {
	for _, fsync := range []string{FsyncEvery, FsyncBatch} {
		b.Run("fsync="+fsync, func(b *testing.B) {
			l := open(b, Options{Path: filepath.Join(b.TempDir(), "l.jsonl"), Fsync: fsync})
			r := rec(1)
			for b.Loop() {
				if _, err := l.Append(r); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("fsync="+fsync+"/parallel", func(b *testing.B) {
			l := open(b, Options{Path: filepath.Join(b.TempDir(), "l.jsonl"), Fsync: fsync})
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				r := rec(1)
				for pb.Next() {
					if _, err := l.Append(r); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
