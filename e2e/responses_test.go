//go:build e2e && linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/redistest"
)

// responsesConfig serves the real Ollama's models (eoc-tiny*) and two fakes: fake-tools always
// calls get_weather, fake-text answers with text. Fake tokens are priced at 0.0001 J, so one
// fake call spends the broke key's budget. Args: listen, Ollama, fake-tools, fake-text.
const responsesConfig = `listen: %s
log_level: info
limits: {max_body_bytes: 10485760, request_timeout: 300s}
cascade:
  stages: [cache, neural]
  cache: {max_entries: 10000, ttl: 1h}
backends:
  - {name: local, type: ollama, url: %s, models: ["eoc-tiny*"], timeout: 120s}
  - {name: tools, type: openai, url: %s, models: ["fake-tools"], timeout: 60s}
  - {name: text, type: openai, url: %s, models: ["fake-text"], timeout: 60s}
meter:
  token_models: [{models: ["fake-*"], joules_per_prompt_token: 0.0001, joules_per_completion_token: 0.0001}]
auth:
  keys:
    - {id: team, key: key-team}
    - {id: other, key: key-other}
    - {id: broke, key: key-broke, budget: {joules: 0.0005, per: day}}
`

const textReply = "It is sunny in Paris."

// TestResponsesNodeSDK runs e2e/node/responses.cjs, openai-node's Responses API (pinned by
// e2e/node/package-lock.json), against the real binary: the real Ollama for whole, streamed and
// continued answers, a cache hit, retrieve and delete; fakes for a function tool round trip and a
// budget spent by one call. TestResponsesToolTurnUpstream checks what the round trip sends
// upstream.
func TestResponsesNodeSDK(t *testing.T) {
	modules := responsesNodeModules(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on PATH: %v", err)
	}
	call := cascade.ToolCall{ID: "call_weather_1", Type: "function",
		Function: cascade.ToolCallFunction{Name: "get_weather", Arguments: `{"city":"Paris"}`}}
	tools := fakes.NewOpenAI(t, fakes.Config{Models: []string{"fake-tools"}, ToolCalls: []cascade.ToolCall{call}})
	text := fakes.NewOpenAI(t, fakes.Config{Models: []string{"fake-text"}, Reply: textReply, Chunks: 3})
	p, err := startProxyWith("responses", func(addr, _ string) string {
		return fmt.Sprintf(responsesConfig, addr, env.ollama.url, tools.BaseURL(), text.BaseURL())
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	t.Cleanup(func() {
		if t.Failed() {
			p.tail(os.Stderr)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(env.root, "e2e", "node", "responses.cjs"))
	cmd.Env = append(os.Environ(), "EOC_BASE_URL="+p.url+"/v1", "EOC_MODEL="+model, "EOC_E2E_NODE_MODULES="+modules,
		"EOC_TOOLS_MODEL=fake-tools", "EOC_TEXT_MODEL=fake-text", "EOC_TEXT_REPLY="+textReply,
		"EOC_KEY=key-team", "EOC_OTHER_KEY=key-other", "EOC_BROKE_KEY=key-broke")
	out, err := cmd.CombinedOutput()
	t.Logf("node %s:\n%s", filepath.Base(node), out)
	if err != nil {
		t.Fatalf("the Responses SDK scenario failed: %v", err)
	}
	const checks = 11
	if n := strings.Count(string(out), "ok - "); n != checks {
		t.Fatalf("%d of %d checks passed", n, checks)
	}

	// The call_id the SDK read is the one the fake's model made.
	m := regexp.MustCompile(`tool call_id (\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatal("the scenario printed no tool call_id")
	}
	if string(m[1]) != call.ID {
		t.Errorf("call_id %q, the fake's was %q", m[1], call.ID)
	}
}

// responsesNodeModules is EOC_E2E_NODE_MODULES, as TestNodeSDK reads it.
func responsesNodeModules(t *testing.T) string {
	t.Helper()
	modules := os.Getenv("EOC_E2E_NODE_MODULES")
	if modules == "" {
		if os.Getenv("EOC_E2E") == "1" || os.Getenv("CI") == "true" {
			t.Fatal("EOC_E2E_NODE_MODULES is not set (scripts/test.sh sets it; run `npm ci --prefix e2e/node`)")
		}
		t.Skip("EOC_E2E_NODE_MODULES not set")
	}
	if _, err := os.Stat(filepath.Join(modules, "openai", "package.json")); err != nil {
		t.Fatalf("no openai SDK in EOC_E2E_NODE_MODULES=%s (run `npm ci --prefix e2e/node`): %v", modules, err)
	}
	return modules
}

// TestResponsesToolTurnUpstream: a function_call_output continuing a stored tool call reaches
// the upstream as the whole chat conversation, and the repeat of that continuation is a cache hit
// (its key covers the conversation). Plain HTTP against fakes, so the bodies can be checked.
func TestResponsesToolTurnUpstream(t *testing.T) {
	call := cascade.ToolCall{ID: "call_w", Type: "function", Function: cascade.ToolCallFunction{Name: "get_weather", Arguments: `{"city":"Oslo"}`}}
	tools := fakes.NewOpenAI(t, fakes.Config{Models: []string{"fake-tools"}, ToolCalls: []cascade.ToolCall{call}})
	text := fakes.NewOpenAI(t, fakes.Config{Models: []string{"fake-text"}, Reply: textReply, Chunks: 3})
	p, err := startProxyWith("responses-tool", func(addr, _ string) string {
		return fmt.Sprintf(responsesConfig, addr, env.ollama.url, tools.BaseURL(), text.BaseURL())
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	question := prompt()
	st, h, r1 := responsesCall(t, http.MethodPost, p.url, "key-team", "", map[string]any{"model": "fake-tools", "input": question,
		"tools": []any{map[string]any{"type": "function", "name": "get_weather", "parameters": map[string]any{"type": "object"}}}})
	if st != 200 || h.Get("X-EOC-Stage") != "neural" || len(r1.Output) != 1 || r1.Output[0].Type != "function_call" {
		t.Fatalf("first turn: %d %s %+v", st, h.Get("X-EOC-Stage"), r1)
	}
	turn2 := map[string]any{"model": "fake-text", "previous_response_id": r1.ID,
		"input": []any{map[string]any{"type": "function_call_output", "call_id": r1.Output[0].CallID, "output": "cold"}}}
	st, h, r2 := responsesCall(t, http.MethodPost, p.url, "key-team", "", turn2)
	if st != 200 || r2.OutputText != textReply || h.Get("X-EOC-Stage") != "neural" {
		t.Fatalf("second turn: %d %s %+v", st, h.Get("X-EOC-Stage"), r2)
	}
	var sent struct {
		Messages []cascade.Message `json:"messages"`
	}
	if err := json.Unmarshal(text.LastBody(), &sent); err != nil {
		t.Fatal(err)
	}
	ms := sent.Messages
	if len(ms) != 3 || ms[0].Text() != question || len(ms[1].ToolCalls) != 1 || ms[1].ToolCalls[0].ID != "call_w" ||
		ms[2].Role != "tool" || ms[2].ToolCallID != "call_w" || ms[2].Text() != "cold" {
		t.Fatalf("upstream got %s", text.LastBody())
	}
	// The same continuation again is the same conversation: a cache hit, not a second call.
	before := text.Requests()
	st, h, _ = responsesCall(t, http.MethodPost, p.url, "key-team", "", turn2)
	if st != 200 || h.Get("X-EOC-Stage") != "cache" || text.Requests() != before {
		t.Fatalf("repeat: %d stage %q, upstream calls %d → %d", st, h.Get("X-EOC-Stage"), before, text.Requests())
	}
	// The same last turn in another conversation is not.
	st, h, _ = responsesCall(t, http.MethodPost, p.url, "key-team", "", map[string]any{"model": "fake-text",
		"input": []any{map[string]any{"type": "function_call_output", "call_id": r1.Output[0].CallID, "output": "cold"}}})
	if st != 200 || h.Get("X-EOC-Stage") != "neural" {
		t.Fatalf("the last turn alone: %d stage %q", st, h.Get("X-EOC-Stage"))
	}
}

// responseObject is what the tests read of a Response.
type responseObject struct {
	ID                 string  `json:"id"`
	Object             string  `json:"object"`
	Status             string  `json:"status"`
	OutputText         string  `json:"output_text"`
	PreviousResponseID *string `json:"previous_response_id"`
	Output             []struct {
		Type   string `json:"type"`
		CallID string `json:"call_id"`
		Name   string `json:"name"`
	} `json:"output"`
	Error *struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
	} `json:"error"`
}

// responsesCall sends method to base's /v1/responses (/v1/responses/id when id is set) as key
// with body (none when nil), and decodes the answer.
func responsesCall(t *testing.T, method, base, key, id string, body any) (int, http.Header, responseObject) {
	t.Helper()
	url := base + "/v1/responses"
	if id != "" {
		url += "/" + id
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var r responseObject
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("%s %s: %d %v: %s", method, url, resp.StatusCode, err, b)
	}
	return resp.StatusCode, resp.Header, r
}

// TestResponsesTwoReplicas: two proxies on one real redis-server share stored responses: a
// conversation started on A continues on B (the upstream gets the whole conversation), B
// retrieves and deletes what A stored, and another key sees none of it.
func TestResponsesTwoReplicas(t *testing.T) {
	srv := redistest.Start(t)
	fake := fakes.NewOpenAI(t, fakes.Config{Models: []string{"fake-chat"}, Reply: "Nice to meet you, Ada.", Chunks: 3})
	cfg := func(replica string) func(addr, _ string) string {
		return func(addr, _ string) string {
			return fmt.Sprintf(`listen: %s
log_level: info
replica_id: %s
redis: {url: %q, op_timeout: 30s}
cascade: {stages: [cache, neural]}
backends: [{name: up, type: openai, url: %q, models: ["fake-*"], timeout: 60s}]
meter: {token_models: [{models: ["fake-*"], joules_per_prompt_token: 0.0001, joules_per_completion_token: 0.0001}]}
auth: {keys: [{id: team, key: key-team}, {id: other, key: key-other}]}
`, addr, replica, srv.URL, fake.BaseURL())
		}
	}
	var reps [2]*proxyProc
	for i, name := range []string{"resp-a", "resp-b"} {
		p, err := startProxyWith(name, cfg(name), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.stop)
		reps[i] = p
	}
	a, b := reps[0].url, reps[1].url
	t.Cleanup(func() {
		if t.Failed() {
			reps[0].tail(os.Stderr)
			reps[1].tail(os.Stderr)
		}
	})

	name := prompt()
	st, _, r1 := responsesCall(t, http.MethodPost, a, "key-team", "", map[string]any{"model": "fake-chat", "input": "My name is " + name})
	if st != 200 || !strings.HasPrefix(r1.ID, "resp_") {
		t.Fatalf("turn 1 on A: %d %+v", st, r1)
	}
	for _, stream := range []bool{false, true} {
		body := map[string]any{"model": "fake-chat", "previous_response_id": r1.ID, "input": "What is my name? " + prompt()}
		if stream {
			body["stream"] = true
			types, last := responsesStream(t, b, "key-team", body)
			if len(types) < 3 || types[0] != "response.created" || types[len(types)-1] != "response.completed" {
				t.Fatalf("turn 2 streamed on B: events %v", types)
			}
			var done struct {
				Response struct {
					PreviousResponseID string         `json:"previous_response_id"`
					OutputText         string         `json:"output_text"`
					EOC                map[string]any `json:"eoc"`
				} `json:"response"`
			}
			if err := json.Unmarshal(last, &done); err != nil || done.Response.PreviousResponseID != r1.ID ||
				done.Response.OutputText != "Nice to meet you, Ada." || done.Response.EOC["receipt"] == nil {
				t.Fatalf("turn 2 streamed on B: %v %s", err, last)
			}
		} else {
			st, _, r2 := responsesCall(t, http.MethodPost, b, "key-team", "", body)
			if st != 200 || r2.PreviousResponseID == nil || *r2.PreviousResponseID != r1.ID {
				t.Fatalf("turn 2 on B: %d %+v", st, r2)
			}
		}
		var sent struct {
			Messages []cascade.Message `json:"messages"`
		}
		if err := json.Unmarshal(fake.LastBody(), &sent); err != nil {
			t.Fatal(err)
		}
		if ms := sent.Messages; len(ms) != 3 || ms[0].Text() != "My name is "+name || ms[1].Text() != "Nice to meet you, Ada." {
			t.Fatalf("B sent upstream (stream %v): %s", stream, fake.LastBody())
		}
	}

	if st, _, got := responsesCall(t, http.MethodGet, b, "key-team", r1.ID, nil); st != 200 || got.ID != r1.ID || got.OutputText != r1.OutputText {
		t.Fatalf("GET on B: %d %+v", st, got)
	}
	if st, _, got := responsesCall(t, http.MethodGet, b, "key-other", r1.ID, nil); st != 404 || got.Error == nil || got.Error.Type != "invalid_request_error" {
		t.Fatalf("another key's GET on B: %d %+v", st, got)
	}
	if st, _, _ := responsesCall(t, http.MethodDelete, b, "key-other", r1.ID, nil); st != 404 {
		t.Fatalf("another key's DELETE on B: %d", st)
	}
	if st, _, _ := responsesCall(t, http.MethodDelete, b, "key-team", r1.ID, nil); st != 200 {
		t.Fatalf("DELETE on B: %d", st)
	}
	if st, _, got := responsesCall(t, http.MethodGet, a, "key-team", r1.ID, nil); st != 404 || got.Error == nil {
		t.Fatalf("GET on A after B deleted it: %d %+v", st, got)
	}
	st, _, got := responsesCall(t, http.MethodPost, a, "key-team", "", map[string]any{"model": "fake-chat", "previous_response_id": r1.ID, "input": "x"})
	if st != 404 || got.Error == nil || got.Error.Param == nil || *got.Error.Param != "previous_response_id" {
		t.Fatalf("continuing a deleted response on A: %d %+v", st, got)
	}
}

// responsesStream posts body to base's /v1/responses as key and reads the stream to its end: the
// event types in order, and the last event's data.
func responsesStream(t *testing.T, base, key string, body any) (types []string, last []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, base+"/v1/responses", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		msg, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), msg)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			types = append(types, strings.TrimPrefix(line, "event: "))
		case strings.HasPrefix(line, "data: "):
			last = []byte(strings.TrimPrefix(line, "data: "))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if resp.Trailer.Get("X-EOC-Joules") == "" {
		t.Errorf("stream without the X-EOC-Joules trailer (trailers %v)", resp.Trailer)
	}
	return types, last
}
