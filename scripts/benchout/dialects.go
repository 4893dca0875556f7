//go:build linux

package main

import (
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/eoc-proxy/eoc-proxy/internal/procs"
)

// dialectPath is one of eoc-proxy's other dialects, called with the chat phase's question; each
// reaches the fake upstream as the same Ollama call a chat call makes.
type dialectPath struct {
	name, label, path string
	body              func(user string, stream bool) []byte
	whole, stream     bool // measured whole (the dialects phase), streamed (the stream phase)
}

var dialectPaths = []dialectPath{
	{name: "responses", label: "Responses (store: false)", path: "/v1/responses", whole: true, stream: true,
		body: func(u string, s bool) []byte { return responsesBody(u, s, false) }},
	{name: "responses-stored", label: "Responses (store default: kept for previous_response_id)", path: "/v1/responses", whole: true,
		body: func(u string, s bool) []byte { return responsesBody(u, s, true) }},
	{name: "messages", label: "Anthropic Messages", path: "/v1/messages", whole: true, stream: true, body: messagesBody},
	{name: "completions", label: "legacy completions", path: "/v1/completions", whole: true, stream: true, body: completionsBody},
}

// dialectNames are the names of the dialects measured whole, or streamed.
func dialectNames(stream bool) []string {
	var ns []string
	for _, d := range dialectPaths {
		if (stream && d.stream) || (!stream && d.whole) {
			ns = append(ns, d.name)
		}
	}
	return ns
}

// dialectTargets are eoc-proxy's dialect routes, whole or streamed, each with fresh prompts.
// A route the build answers with 404 (one from before the dialects) is left out, and said so.
func dialectTargets(c *http.Client, eocURL string, p *prompts, stream bool) []target {
	var ts []target
	for _, d := range dialectPaths {
		if (stream && !d.stream) || (!stream && !d.whole) {
			continue
		}
		t := target{name: d.name, url: eocURL + d.path, stage: "neural", fresh: true, stream: stream,
			body: func(u string) []byte { return d.body(u, stream) }}
		var status int
		var stage string
		var err error
		if stream {
			status, stage, _, _, err = doStream(c, t.url, t.body(p.next()))
		} else {
			status, stage, err = do(c, t.url, t.body(p.next()))
		}
		switch {
		case err != nil:
			procs.Fatalf("%s: %v", d.path, err)
		case status == http.StatusNotFound:
			fmt.Fprintf(os.Stderr, "benchout: %s answers 404: not measured for this build\n", d.path)
			continue
		case status != http.StatusOK || stage != t.stage:
			procs.Fatalf("%s: status %d, stage %q (want 200, stage %q)", d.path, status, stage, t.stage)
		}
		ts = append(ts, t)
	}
	return ts
}

// quantiles are the p50 and p99 of each target's times, by its name.
func quantiles(ts []target, lat [][]time.Duration) map[string][2]time.Duration {
	m := make(map[string][2]time.Duration, len(ts))
	for i, t := range ts {
		s := sortedCopy(lat[i])
		m[t.name] = [2]time.Duration{quantile(s, 0.5), quantile(s, 0.99)}
	}
	return m
}
