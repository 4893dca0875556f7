//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eoc-proxy/eoc-proxy/internal/procs"
)

// kills runs rounds of load against eoc-proxy with the ledger at fsync: every, kills it with
// SIGKILL mid-load, checks the ledger with `eoc-proxy receipts verify` and that every receipt a
// client received is in it.
func (r *run) kills() {
	bg := context.Background()
	var mu sync.Mutex
	received := map[string]bool{}
	var total, missing int
	verified := 0
	for round := range r.o.kills {
		r.startEOC("every")
		var stop atomic.Bool
		var wg sync.WaitGroup
		for w := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; !stop.Load(); i++ {
					prompt := fmt.Sprintf("kill round %d worker %d call %d", round, w, i)
					if i%3 == 0 {
						prompt = fmt.Sprintf("kill repeated %d", i%50)
					}
					res := r.chat(bg, "m", prompt, i%4 == 1, 0)
					if res.receipt != "" {
						mu.Lock()
						received[res.receipt] = true
						mu.Unlock()
					}
				}
			}()
		}
		time.Sleep(time.Duration(1500+rand.IntN(1500)) * time.Millisecond)
		_ = r.eoc.Cmd.Process.Kill()
		<-r.eoc.Done()
		stop.Store(true)
		wg.Wait()
		files, _ := filepath.Glob(filepath.Join(r.dir, "ledger.jsonl*"))
		out, err := exec.Command(r.o.eocBin, append([]string{"receipts", "verify"}, files...)...).CombinedOutput()
		if err != nil {
			r.unexpectedf(&mu, "kill round %d: receipts verify: %v: %s", round, err, strings.TrimSpace(string(out)))
		} else {
			verified++
		}
	}
	ledger := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(r.dir, "ledger.jsonl*"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			procs.Fatalf("%v", err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			var rec struct {
				Receipt string `json:"receipt"`
			}
			if json.Unmarshal([]byte(l), &rec) == nil && rec.Receipt != "" {
				ledger[rec.Receipt] = true
			}
		}
	}
	for rc := range received {
		total++
		if !ledger[rc] {
			missing++
		}
	}
	if missing > 0 {
		r.unexpectedf(&mu, "kill: %d of %d receipts clients received are not in the ledger", missing, total)
	}
	r.line("kill -9: %d rounds with the ledger at fsync: every; receipts verify passed %d of %d; %d of %d receipts clients received missing from the ledger (%d records in it, earlier phases included)",
		r.o.kills, verified, r.o.kills, missing, total, len(ledger))
}
