//go:build e2e && linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// toolModel is the model the weather fake serves.
const toolModel = "fake-weather"

// weatherFake is an OpenAI-compatible backend whose model calls the weather tool for Paris, and,
// once the conversation ends with the tool's result, says what the tool said. It answers whole
// and streamed (the arguments in two fragments), with usage.
func weatherFake(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","created":1700000000,"owned_by":"e2e"}]}`, toolModel)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Model    string `json:"model"`
			Stream   bool   `json:"stream"`
			Messages []struct {
				Role       string          `json:"role"`
				Content    json.RawMessage `json:"content"`
				ToolCallID string          `json:"tool_call_id"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || len(in.Messages) == 0 {
			http.Error(w, `{"error":{"message":"bad request","type":"invalid_request_error"}}`, http.StatusBadRequest)
			return
		}
		last := in.Messages[len(in.Messages)-1]
		reply, finish := "", "tool_calls"
		if last.Role == "tool" {
			var said string
			_ = json.Unmarshal(last.Content, &said)
			reply, finish = fmt.Sprintf("The weather tool (%s) says: %s", last.ToolCallID, said), "stop"
		}
		const usage = `{"prompt_tokens":20,"completion_tokens":9,"total_tokens":29}`
		const head = `{"id":"chatcmpl-weather","object":"%s","created":1700000000,"model":%q,`
		if !in.Stream {
			msg := `{"role":"assistant","content":null,"tool_calls":[{"id":"call_weather_1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]}`
			if reply != "" {
				b, _ := json.Marshal(reply)
				msg = `{"role":"assistant","content":` + string(b) + `}`
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, head+`"choices":[{"index":0,"message":%s,"finish_reason":%q}],"usage":%s}`, "chat.completion", in.Model, msg, finish, usage)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(choice string) {
			_, _ = fmt.Fprintf(w, "data: "+head+`"choices":[%s]}`+"\n\n", "chat.completion.chunk", in.Model, choice)
			_ = http.NewResponseController(w).Flush()
		}
		send(`{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}`)
		if reply != "" {
			b, _ := json.Marshal(reply)
			send(`{"index":0,"delta":{"content":` + string(b) + `},"finish_reason":null}`)
		} else {
			send(`{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_weather_1","type":"function","function":{"name":"weather","arguments":""}}]},"finish_reason":null}`)
			send(`{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]},"finish_reason":null}`)
			send(`{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]},"finish_reason":null}`)
		}
		send(fmt.Sprintf(`{"index":0,"delta":{},"finish_reason":%q}`, finish))
		_, _ = fmt.Fprintf(w, "data: "+head+`"choices":[],"usage":%s}`+"\n\n", "chat.completion.chunk", in.Model, usage)
		_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// The keys of the Messages proxy: one without a budget, one whose budget a single call spends.
const (
	messagesKey = "sk-e2e-messages"
	poorKey     = "sk-e2e-poor"
)

const messagesConfig = `listen: %s
log_level: info
limits: {max_body_bytes: 10485760, request_timeout: 300s}
auth:
  keys:
    - {id: messages, key: ` + messagesKey + `}
    - {id: poor, key: ` + poorKey + `, budget: {joules: 0.000001, per: day}}
cascade:
  stages: [cache, kv, graph, neural]
  cache: {max_entries: 10000, ttl: 1h}
backends:
  - name: weather
    type: openai
    url: %s/v1
    models: [` + toolModel + `]
    timeout: 30s
  - name: local
    type: ollama
    url: %s
    models: ["*"]
    timeout: 120s
`

// nodeModules is EOC_E2E_NODE_MODULES, holding pkg; the test skips when it is unset, unless
// EOC_E2E=1 or CI=true (as TestNodeSDK).
func nodeModules(t *testing.T, pkg string) (node, modules string) {
	t.Helper()
	modules = os.Getenv("EOC_E2E_NODE_MODULES")
	if modules == "" {
		if os.Getenv("EOC_E2E") == "1" || os.Getenv("CI") == "true" {
			t.Fatal("EOC_E2E_NODE_MODULES is not set (scripts/test.sh sets it; run `npm ci --prefix e2e/node`)")
		}
		t.Skip("EOC_E2E_NODE_MODULES not set")
	}
	if _, err := os.Stat(filepath.Join(modules, pkg, "package.json")); err != nil {
		t.Fatalf("no %s in EOC_E2E_NODE_MODULES=%s (run `npm ci --prefix e2e/node`): %v", pkg, modules, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on PATH: %v", err)
	}
	return node, modules
}

// runNode runs one of e2e/node's scripts with the environment variables vars and wants checks "ok - " lines.
func runNode(t *testing.T, node, script string, checks int, vars ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(env.root, "e2e", "node", script))
	cmd.Env = append(os.Environ(), vars...)
	out, err := cmd.CombinedOutput()
	t.Logf("node %s:\n%s", script, out)
	if err != nil {
		t.Fatalf("%s failed: %v", script, err)
	}
	if n := strings.Count(string(out), "ok - "); n != checks {
		t.Fatalf("%d of %d checks passed", n, checks)
	}
}

// TestMessagesSDK runs e2e/node/messages.cjs, Anthropic's SDK (`@anthropic-ai/sdk`, pinned by
// e2e/node/package-lock.json), against POST /v1/messages and /v1/messages/count_tokens of a proxy
// with keys (sent as x-api-key), the real Ollama and a fake that calls a tool: messages.create
// whole and streamed with X-EOC headers and the eoc event, a cache hit, a tool_use round trip,
// countTokens, and refusals as NotFoundError, BadRequestError, RateLimitError (a spent joule
// budget) and AuthenticationError.
func TestMessagesSDK(t *testing.T) {
	node, modules := nodeModules(t, "@anthropic-ai/sdk")
	fake := weatherFake(t)
	p, err := startProxyWith("messages", func(addr, _ string) string {
		return fmt.Sprintf(messagesConfig, addr, fake.URL, env.ollama.url)
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
	runNode(t, node, "messages.cjs", 10, "EOC_PROXY_URL="+p.url, "EOC_MODEL="+model, "EOC_TOOL_MODEL="+toolModel,
		"EOC_KEY="+messagesKey, "EOC_POOR_KEY="+poorKey, "EOC_E2E_NODE_MODULES="+modules)
}

// TestCompletionsSDK runs e2e/node/completions.cjs, the OpenAI Node SDK's legacy
// completions.create, whole and streamed (with the usage and eoc chunks), a cache hit, suffix
// and several prompts refused as BadRequestErrors naming the field, and a spent joule budget
// refused as a RateLimitError, against a proxy with keys (the Messages proxy's) and the real
// Ollama.
func TestCompletionsSDK(t *testing.T) {
	node, modules := nodeModules(t, "openai")
	fake := weatherFake(t)
	p, err := startProxyWith("completions", func(addr, _ string) string {
		return fmt.Sprintf(messagesConfig, addr, fake.URL, env.ollama.url)
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
	runNode(t, node, "completions.cjs", 7, "EOC_BASE_URL="+p.url+"/v1", "EOC_MODEL="+model,
		"EOC_KEY="+messagesKey, "EOC_POOR_KEY="+poorKey, "EOC_E2E_NODE_MODULES="+modules)
}
