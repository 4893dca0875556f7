//go:build linux

package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eoc-proxy/eoc-proxy/internal/procs"
)

func (r *run) upDo(method, path string) {
	req, _ := http.NewRequest(method, r.up+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		procs.Fatalf("upstream control: %v", err)
	}
	_ = resp.Body.Close()
}

func (r *run) upCount(prompt string) int {
	n, _ := strconv.Atoi(r.upGet("/control/count?p=" + urlQuery(prompt)))
	return n
}

func urlQuery(s string) string {
	return strings.NewReplacer(" ", "+", "&", "%26", "=", "%3D").Replace(s)
}

// outcome names what a client got: the status, and for a stream how it ended.
func outcome(res result, stream bool) string {
	switch {
	case res.err != nil && res.status == 0:
		return "no answer: " + res.err.Error()
	case !stream || res.status != http.StatusOK:
		return strconv.Itoa(res.status)
	case res.errEvent:
		return "200, error event"
	case res.done:
		return "200, [DONE]"
	}
	return "200, cut"
}

// faults runs the fault matrix: each fault on both dialects, whole and streamed. After each, the
// fault is removed and the same request sent again: it must reach the upstream (nothing failed
// was cached) and be answered.
func (r *run) faults() {
	var mu sync.Mutex
	r.line("")
	r.line("| fault | Ollama, whole | Ollama, stream | OpenAI, whole | OpenAI, stream | repeated after the fault: upstream called, 200 |")
	r.line("|---|---|---|---|---|---|")
	type cell struct {
		model  string
		stream bool
	}
	cells := []cell{{"m-fault", false}, {"m-fault", true}, {"oa-fault", false}, {"oa-fault", true}}
	for _, f := range append(append([]string{}, faultNames...), "refused", "client gone") {
		row := []string{f}
		repeats := 0
		for _, c := range cells {
			model := c.model
			prompt := fmt.Sprintf("fault %s %s %v", f, c.model, c.stream)
			switch f {
			case "refused":
				model = "dead-" + c.model
			case "client gone":
				if !c.stream {
					row = append(row, "—")
					repeats++
					continue
				}
				r.upDo(http.MethodPost, "/control/fault?f=endless&p="+urlQuery(prompt))
			default:
				r.upDo(http.MethodPost, "/control/fault?f="+f+"&p="+urlQuery(prompt))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			var res result
			var got string
			if f == "client gone" {
				before := r.upGet("/control/cancels")
				res = r.chat(ctx, model, prompt, true, 16)
				deadline := time.Now().Add(5 * time.Second)
				for r.upGet("/control/cancels") == before && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				got = fmt.Sprintf("%d; upstream cancelled: %v", res.status, r.upGet("/control/cancels") != before)
				if r.upGet("/control/cancels") == before {
					r.unexpectedf(&mu, "client gone on %s: the upstream call was not cancelled", model)
				}
			} else {
				start := time.Now()
				res = r.chat(ctx, model, prompt, c.stream, 0)
				got = outcome(res, c.stream)
				if d := time.Since(start); d > time.Second {
					got += fmt.Sprintf(" after %.1f s", d.Seconds())
				}
				if f == "429" && res.status == http.StatusTooManyRequests {
					got += ", Retry-After: " + res.retry
				}
				if res.status == http.StatusOK && !c.stream || res.status >= 500 && res.status < 502 || res.status == 0 ||
					(c.stream && res.status == http.StatusOK && res.done && !res.errEvent) {
					r.unexpectedf(&mu, "fault %s on %s (stream %v): %s", f, model, c.stream, got)
				}
			}
			cancel()
			row = append(row, got)
			if f == "refused" {
				repeats++ // nothing upstream to count; the refusal is not cached either (checked below)
				if again := r.chat(context.Background(), model, prompt, c.stream, 0); again.status == http.StatusOK {
					r.unexpectedf(&mu, "refused on %s answered 200 on repeat (cached?)", model)
				}
				continue
			}
			r.upDo(http.MethodDelete, "/control/fault?p="+urlQuery(prompt))
			before := r.upCount(prompt)
			again := r.chat(context.Background(), model, prompt, c.stream, 0)
			after := r.upCount(prompt)
			if after == before+1 && again.status == http.StatusOK && again.stage == "neural" {
				repeats++
			} else {
				r.unexpectedf(&mu, "fault %s on %s (stream %v), repeated: status %d, stage %q, upstream calls %d -> %d",
					f, model, c.stream, again.status, again.stage, before, after)
			}
		}
		row = append(row, fmt.Sprintf("%d of 4", repeats))
		r.line("| %s |", strings.Join(row, " | "))
	}
	r.line("")
}
