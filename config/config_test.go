package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

// testRegistry stands in for the program's registry (cmd/eoc-proxy/registry.go, whose own
// test parses the shipped file against the real one).
var testRegistry = Registry{
	Stages:       []string{"cache", "kv", "graph", "neural"},
	LastStage:    "neural",
	BackendTypes: []string{"ollama", "openai", "llamacpp"},
	Embedders:    map[string]bool{"builtin": false, "ollama": true, "openai": true},
	Strategies:   []string{"fallback", "round-robin", "least-busy", "least-joules"},
	Switches:     []string{"auto", "on", "off"},
	Defaults: func(c *Config) {
		if c.Cascade.KV.Embedder.Type == "" {
			c.Cascade.KV.Embedder.Type = "builtin"
		}
		if c.Cascade.KV.Threshold == 0 {
			c.Cascade.KV.Threshold = 0.95
		}
		if c.Ledger.Fsync == "" {
			c.Ledger.Fsync = "every"
		}
	},
}

func TestShippedConfigParses(t *testing.T) {
	b, err := os.ReadFile("../eoc.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(b, testRegistry)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:8080" || len(c.Backends) != 1 || c.Backends[0].Type != "ollama" ||
		c.Backends[0].URL != "http://127.0.0.1:11434" || !c.StageOn("cache") || !c.StageOn("neural") {
		t.Fatalf("shipped config: %+v", c)
	}
	if c.Debug.Pprof != "" {
		t.Fatalf("pprof is on in the shipped config: %q", c.Debug.Pprof)
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
		{"bad pprof address", "debug: {pprof: 6061}\n", []string{"debug.pprof", "host:port"}},
		{"pprof on the public listener", "listen: 127.0.0.1:8080\ndebug: {pprof: 127.0.0.1:8080}\n", []string{"debug.pprof", "listen"}},
		{"bad backend url", "backends: [{name: a, type: openai, url: 'ftp://x'}]\n", []string{"backends[0].url"}},
		{"duplicate backend", "backends: [{name: a, type: openai, url: 'http://x'}, {name: a, type: openai, url: 'http://y'}]\n", []string{"backends[1].name", "twice"}},
		{"no backend with neural", "backends: []\n", []string{"backends", "at least one"}},
		{"bad glob", "backends: [{name: a, type: openai, url: 'http://x', models: ['[']}]\n", []string{"backends[0].models"}},
		{"bad rapl switch", "meter: {rapl: {enabled: maybe}}\nbackends: [{name: a, type: openai, url: 'http://x'}]\n", []string{"meter.rapl.enabled", "auto, on, off"}},
		{"bad budget period", "auth: {keys: [{id: a, key: k, budget: {joules: 1, per: week}}]}\nbackends: [{name: a, type: openai, url: 'http://x'}]\n", []string{"auth.keys[0].budget.per", "day, month"}},
		{"empty key", "auth: {keys: [{id: a, key: '${EOC_TEST_UNSET_KEY}'}]}\nbackends: [{name: a, type: openai, url: 'http://x'}]\n", []string{"auth.keys[0].key", "ENV"}},
		{"bad embedder", "cascade: {kv: {embedder: {type: word2vec}}}\nbackends: [{name: a, type: openai, url: 'http://x'}]\n", []string{"cascade.kv.embedder.type", "builtin, ollama, openai"}},
		{"embedder without url", "cascade: {kv: {embedder: {type: ollama}}}\nbackends: [{name: a, type: openai, url: 'http://x'}]\n", []string{"cascade.kv.embedder.url", "ollama"}},
		{"bad threshold", "cascade: {kv: {threshold: 1.5}}\nbackends: [{name: a, type: openai, url: 'http://x'}]\n", []string{"cascade.kv.threshold", "1.5"}},
		{"nvml has no sysfs_root", "meter: {nvml: {sysfs_root: /sys}}\n", []string{"line 1", "sysfs_root"}},
		{"bad strategy", "routing: {groups: [{models: ['*'], strategy: fastest}]}\nbackends: [{name: a, type: openai, url: 'http://x'}]\n", []string{"routing.groups[0].strategy", "fallback, round-robin, least-busy, least-joules"}},
		{"routing group without models", "routing: {groups: [{strategy: least-busy}]}\nbackends: [{name: a, type: openai, url: 'http://x'}]\n", []string{"routing.groups[0].models", "required"}},
		{"bad routing glob", "routing: {groups: [{models: ['['], strategy: least-busy}]}\nbackends: [{name: a, type: openai, url: 'http://x'}]\n", []string{"routing.groups[0].models"}},
		{"bad ejection", "routing: {eject_after: -1, cooldown: -1s, explore: 1}\nbackends: [{name: a, type: openai, url: 'http://x'}]\n", []string{"routing.eject_after", "routing.cooldown", "routing.explore"}},
		{"negative max_duration", "backends: [{name: a, type: openai, url: 'http://x', max_duration: -1s}]\n", []string{"backends[0].max_duration"}},
		{"bad fsync", "ledger: {fsync: sometimes}\nbackends: [{name: a, type: openai, url: 'http://x'}]\n", []string{"ledger.fsync", "every, batch"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), testRegistry)
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

func TestRoutingDefaults(t *testing.T) {
	c, err := Parse([]byte("routing: {groups: [{models: ['llama*']}, {models: ['gpt-*'], strategy: least-joules}]}\n"+
		"backends: [{name: a, type: openai, url: 'http://x', max_duration: 10m}]\n"), testRegistry)
	if err != nil {
		t.Fatal(err)
	}
	// The ejection and exploration defaults are routing's: config leaves them zero for
	// Registry.Defaults (cmd/eoc-proxy's TestOwnerDefaults checks the values filled).
	r := c.Routing
	if r.EjectAfter != 0 || r.Cooldown != 0 || r.Explore != 0 ||
		r.Groups[0].Strategy != "fallback" || r.Groups[1].Strategy != "least-joules" {
		t.Fatalf("routing %+v", r)
	}
	if c.Backends[0].MaxDuration.D() != 10*time.Minute || c.Backends[0].Timeout.D() != 120*time.Second {
		t.Fatalf("backend %+v", c.Backends[0])
	}
}

func TestEnvExpansionAndMasking(t *testing.T) {
	t.Setenv("EOC_TEST_SECRET", `s3cr:t "quoted" # not a comment`)
	c, err := Parse([]byte("backends: [{name: a, type: openai, url: 'https://api.example/v1', api_key: ${EOC_TEST_SECRET}}]\n"+
		"cascade: {kv: {embedder: {type: openai, url: '${EOC_TEST_UNSET:-http://127.0.0.1:9/v1}'}}}\n"), testRegistry)
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

// TestRegistryDrivesValidation shows that config knows no names of its own: the same file is
// valid or not by the registry it is parsed against, and the registry's defaults fill the
// fields the file leaves empty before validation runs.
func TestRegistryDrivesValidation(t *testing.T) {
	const yaml = "cascade: {stages: [cache, magic]}\nbackends: [{name: a, type: vllm, url: 'http://x'}]\n"
	if _, err := Parse([]byte(yaml), testRegistry); err == nil {
		t.Fatal("magic and vllm passed the test registry")
	}
	reg := testRegistry
	reg.Stages = []string{"cache", "magic"}
	reg.BackendTypes = []string{"vllm"}
	reg.LastStage = ""
	var sawThreshold float64
	reg.Defaults = func(c *Config) {
		testRegistry.Defaults(c)
		sawThreshold = c.Cascade.KV.Threshold
		c.Cascade.KV.MaxEntries = 7
	}
	c, err := Parse([]byte(yaml), reg)
	if err != nil {
		t.Fatal(err)
	}
	if sawThreshold != 0.95 || c.Cascade.KV.MaxEntries != 7 {
		t.Fatalf("registry defaults not applied: threshold %v, max_entries %d", sawThreshold, c.Cascade.KV.MaxEntries)
	}
	c, err = Parse([]byte("backends: [{name: a, type: vllm, url: 'http://x'}]\n"), reg)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.Cascade.Stages, ",") != "cache,magic" {
		t.Fatalf("default stages %v, want the registry's order", c.Cascade.Stages)
	}
	// The zero registry accepts no names at all.
	_, err = Parse([]byte(yaml), Registry{})
	for _, w := range []string{"cascade.stages[0]", "backends[0].type", "cascade.kv.embedder.type", "cascade.kv.threshold"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("zero registry: error %v lacks %s", err, w)
		}
	}
}

func TestReplicasSection(t *testing.T) {
	reg := testRegistry
	reg.LastStage = ""
	t.Setenv("EOC_TEST_REDIS_PW", "p@ss:word")
	c, err := Parse([]byte(`
redis: {url: "rediss://127.0.0.1:6379/0", password: ${EOC_TEST_REDIS_PW}}
cascade: {stages: [cache]}
replica_id: eu-1
auth: {keys: [{id: a, key: k, limits: {rpm: 10, tpm: 1000}}]}
`), reg)
	if err != nil {
		t.Fatal(err)
	}
	if c.Redis.URL != "rediss://127.0.0.1:6379/0" || c.Redis.Password != "p@ss:word" || c.ReplicaID != "eu-1" || c.Auth.Keys[0].Limits.RPM != 10 {
		t.Fatalf("%+v", c)
	}
	if m, _ := c.Masked(); strings.Contains(string(m), "p@ss") {
		t.Fatal("the redis password is printed")
	}
	for _, bad := range []string{
		`cascade: {stages: [cache]}` + "\n" + `redis: {url: "http://x"}`,
		`redis: {url: "redis://"}`,
		`replica_id: "a/b"`,
		`auth: {keys: [{id: a, key: k, limits: {rpm: -1}}]}`,
	} {
		if _, err := Parse([]byte(bad), reg); err == nil {
			t.Errorf("accepted: %s", bad)
		}
	}
}

// A backend without max_duration gets the default bound on a whole call (no call runs forever,
// a stream of keep-alive comments included), or its timeout when that is longer; a config
// raises it.
func TestMaxDurationDefault(t *testing.T) {
	c, err := Parse([]byte("backends: [{name: a, type: openai, url: 'http://x'}, {name: b, type: openai, url: 'http://x', max_duration: 4h},\n"+
		"  {name: c, type: openai, url: 'http://x', timeout: 2h}]\n"), testRegistry)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []time.Duration{30 * time.Minute, 4 * time.Hour, 2 * time.Hour} {
		if got := c.Backends[i].MaxDuration.D(); got != want {
			t.Errorf("backend %s: max_duration %v, want %v", c.Backends[i].Name, got, want)
		}
	}
}
