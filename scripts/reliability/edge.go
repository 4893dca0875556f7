//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eoc-proxy/eoc-proxy/internal/procs"
)

// memory is the proxy's resident set now and its high-water mark since the last reset.
type memory struct{ rssMB, hwmMB float64 }

func (r *run) memory() memory {
	var m memory
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.eoc.Cmd.Process.Pid))
	if err != nil {
		return m
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			m.rssMB = kb / 1024
		case "VmHWM:":
			m.hwmMB = kb / 1024
		}
	}
	return m
}

// resetPeak starts the proxy's VmHWM afresh at its current RSS (clear_refs 5, Linux 4.0 on); it
// reports whether it could, so a figure says whether its peak is since the reset or since start.
func (r *run) resetPeak() bool {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", r.eoc.Cmd.Process.Pid), []byte("5"), 0) == nil
}

// emptyMessages is a chat body of n empty messages: three bytes each, the shape that amplified
// most when decoded.
func emptyMessages(n int) []byte {
	var b bytes.Buffer
	b.Grow(3*n + 40)
	b.WriteString(`{"model":"m","messages":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("{}")
	}
	b.WriteString("]}")
	return b.Bytes()
}

// post sends body to path and returns the status and the error's param.
func (r *run) post(path string, body []byte) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, r.eocURL+path, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct {
			Param *string `json:"param"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	param := ""
	if e.Error.Param != nil {
		param = *e.Error.Param
	}
	return resp.StatusCode, param, nil
}

// bodies is issue 32's row 1: one 10.2 MB body of 3.4 million empty messages, then 64 at once of
// 0.6 MB each. Each must get a 400 naming messages; the proxy's peak RSS over what it held
// before each must stay under 100 MB and 300 MB.
func (r *run) bodies() {
	var mu sync.Mutex
	row := func(name string, n, conc int, bound float64) {
		body := emptyMessages(n)
		before := r.memory()
		fresh := r.resetPeak()
		statuses := map[string]int{}
		start := time.Now()
		var wg sync.WaitGroup
		for range conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, param, err := r.post("/v1/chat/completions", body)
				k := fmt.Sprintf("%d %s", status, param)
				if err != nil {
					k = "error: " + err.Error()
				}
				mu.Lock()
				statuses[k]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		took := time.Since(start)
		after := r.memory()
		peak := after.hwmMB - before.rssMB
		since := "since the phase began"
		if !fresh {
			since = "since the proxy started (clear_refs refused)"
		}
		r.line("bodies: %s (%d × %.1f MB of empty messages): %v in %s; RSS %.0f MB before, peak %.0f MB %s (+%.0f MB), %.0f MB after",
			name, conc, float64(len(body))/1e6, statuses, took.Round(time.Millisecond), before.rssMB, after.hwmMB, since, peak, after.rssMB)
		if statuses["400 messages"] != conc {
			r.unexpectedf(&mu, "bodies: %s: %v, want %d × 400 naming messages", name, statuses, conc)
		}
		if fresh && peak > bound {
			r.unexpectedf(&mu, "bodies: %s: peak RSS %.0f MB over the %.0f MB before; want under %.0f", name, peak, before.rssMB, bound)
		}
	}
	row("one body", 3_400_000, 1, 100)
	row("64 at once", 200_000, 64, 300)
}

// fields is issue 32's rows 7 and 8: content [1, 2] to the OpenAI backend and think "maybe" to
// the Ollama one (in a question the kv stage answers) get 400s naming the field; and the max_duration a backend gets when its config
// leaves it out, as `eoc-proxy config check` prints it.
func (r *run) fields() {
	var mu sync.Mutex
	// A seeded question: kv would answer it without the Ollama backend ever reading think.
	q, _ := json.Marshal(r.faqQuestions()[0])
	for _, tc := range []struct{ name, body, param string }{
		{"content [1, 2] to OpenAI", `{"model":"oa-1","messages":[{"role":"user","content":[1,2]}]}`, "messages[0].content[0]"},
		{`think "maybe" to Ollama, a question kv answers`, `{"model":"m","messages":[{"role":"user","content":` + string(q) + `}],"think":"maybe"}`, "think"},
	} {
		status, param, err := r.post("/v1/chat/completions", []byte(tc.body))
		r.line("fields: %s: %d, param %q", tc.name, status, param)
		if err != nil || status != http.StatusBadRequest || param != tc.param {
			r.unexpectedf(&mu, "fields: %s: status %d, param %q, err %v; want 400 naming %s", tc.name, status, param, err, tc.param)
		}
	}
	cfg := filepath.Join(r.dir, "default-max-duration.yaml")
	if err := os.WriteFile(cfg, []byte("backends: [{name: b, type: ollama, url: 'http://127.0.0.1:1'}]\n"), 0o644); err != nil {
		procs.Fatalf("%v", err)
	}
	out, err := exec.Command(r.o.eocBin, "config", "check", "-config", cfg).CombinedOutput()
	got := "none"
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "max_duration:" {
			got = f[1]
		}
	}
	r.line("fields: a backend without max_duration is bounded at %s a call", got)
	if err != nil || got == "none" || got == "0s" {
		r.unexpectedf(&mu, "fields: default max_duration %q (%v): %s", got, err, out)
	}
}
