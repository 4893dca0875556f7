package config

import (
	"os"
	"strings"
	"testing"
)

func TestShippedConfigParses(t *testing.T) {
	b, err := os.ReadFile("../eoc.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:8080" || len(c.Backends) != 1 || c.Backends[0].Type != "ollama" ||
		c.Backends[0].URL != "http://127.0.0.1:11434" || !c.StageOn("cache") || !c.StageOn("neural") {
		t.Fatalf("shipped config: %+v", c)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string // all must appear in the error
	}{
		{"unknown key names its line", "listen: 127.0.0.1:1\nlisten_port: 3\n", []string{"line 2", "listen_port"}},
		{"nested unknown key", "cascade:\n  cache:\n    max_entry: 3\n", []string{"line 3", "max_entry"}},
		{"bad duration", "limits: {request_timeout: soon}\n", []string{"line 1", "soon"}},
		{"bad stage", "cascade: {stages: [cache, magic]}\n", []string{"cascade.stages[1]", "magic", "cache, kv, graph, neural"}},
		{"neural not last", "cascade: {stages: [neural, cache]}\nbackends: [{name: a, type: ollama, url: 'http://x'}]\n", []string{"neural must be the last"}},
		{"bad backend type", "backends: [{name: a, type: vllm, url: 'http://x'}]\n", []string{"backends[0].type", "vllm", "ollama, openai, llamacpp"}},
		{"bad backend url", "backends: [{name: a, type: openai, url: 'ftp://x'}]\n", []string{"backends[0].url"}},
		{"duplicate backend", "backends: [{name: a, type: openai, url: 'http://x'}, {name: a, type: openai, url: 'http://y'}]\n", []string{"backends[1].name", "twice"}},
		{"no backend with neural", "backends: []\n", []string{"backends", "at least one"}},
		{"bad glob", "backends: [{name: a, type: openai, url: 'http://x', models: ['[']}]\n", []string{"backends[0].models"}},
		{"bad rapl switch", "meter: {rapl: {enabled: maybe}}\nbackends: [{name: a, type: openai, url: 'http://x'}]\n", []string{"meter.rapl.enabled", "auto, on, off"}},
		{"bad budget period", "auth: {keys: [{id: a, key: k, budget: {joules: 1, per: week}}]}\nbackends: [{name: a, type: openai, url: 'http://x'}]\n", []string{"auth.keys[0].budget.per", "day, month"}},
		{"empty key", "auth: {keys: [{id: a, key: '${EOC_TEST_UNSET_KEY}'}]}\nbackends: [{name: a, type: openai, url: 'http://x'}]\n", []string{"auth.keys[0].key", "ENV"}},
		{"bad fsync", "ledger: {fsync: sometimes}\nbackends: [{name: a, type: openai, url: 'http://x'}]\n", []string{"ledger.fsync", "every, batch"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestEnvExpansionAndMasking(t *testing.T) {
	t.Setenv("EOC_TEST_SECRET", `s3cr:t "quoted" # not a comment`)
	c, err := Parse([]byte("backends: [{name: a, type: openai, url: 'https://api.example/v1', api_key: ${EOC_TEST_SECRET}}]\n" +
		"cascade: {kv: {embedder: {type: openai, url: '${EOC_TEST_UNSET:-http://127.0.0.1:9/v1}'}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if string(c.Backends[0].APIKey) != `s3cr:t "quoted" # not a comment` {
		t.Fatalf("api_key %q", c.Backends[0].APIKey)
	}
	if c.Cascade.KV.Embedder.URL != "http://127.0.0.1:9/v1" {
		t.Fatalf("default not applied: %q", c.Cascade.KV.Embedder.URL)
	}
	out, err := c.Masked()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "s3cr") || !strings.Contains(string(out), "api_key: '***'") {
		t.Fatalf("secret not masked:\n%s", out)
	}
}
