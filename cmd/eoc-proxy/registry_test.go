package main

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"

	eocproxy "github.com/eoc-proxy/eoc-proxy"
	"github.com/eoc-proxy/eoc-proxy/backends"
	"github.com/eoc-proxy/eoc-proxy/config"
)

// TestRegistryMatchesFactories: every name config accepts has a factory here or in backends,
// and every factory has its name in the registry.
func TestRegistryMatchesFactories(t *testing.T) {
	reg := registry()
	if got, want := slices.Sorted(slices.Values(reg.Stages)), slices.Sorted(maps.Keys(stageFactories)); !slices.Equal(got, want) {
		t.Errorf("stage order %v, factories %v", got, want)
	}
	if len(reg.Stages) == 0 || reg.Stages[len(reg.Stages)-1] != reg.LastStage {
		t.Errorf("the default walk %v does not end with %s", reg.Stages, reg.LastStage)
	}
	if got, want := slices.Sorted(maps.Keys(reg.Embedders)), slices.Sorted(maps.Keys(embedderTypes)); !slices.Equal(got, want) {
		t.Errorf("embedders %v, factories %v", got, want)
	}
	if _, ok := embedderTypes[defaultEmbedder]; !ok || embedderTypes[defaultEmbedder].needsURL {
		t.Errorf("default embedder %q is not a registered type that runs without a server", defaultEmbedder)
	}
	if len(reg.BackendTypes) == 0 {
		t.Fatal("no backend types")
	}
	for _, typ := range reg.BackendTypes {
		if _, err := backends.New(backends.Options{Name: "b", Type: typ, URL: "http://127.0.0.1:1"}); err != nil {
			t.Errorf("backend type %s has no working factory: %v", typ, err)
		}
	}
}

// TestEmbedderTypes builds each embedder type the way serve does, from the config section.
func TestEmbedderTypes(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  config.Embedder
		ok   bool
	}{
		{"builtin", config.Embedder{Type: "builtin"}, true},
		{"ollama", config.Embedder{Type: "ollama", URL: "http://127.0.0.1:11434", Model: "nomic-embed-text"}, true},
		{"ollama without model", config.Embedder{Type: "ollama", URL: "http://127.0.0.1:11434"}, false},
		{"openai", config.Embedder{Type: "openai", URL: "https://api.example/v1", Model: "m"}, true},
		{"openai bad url", config.Embedder{Type: "openai", URL: "localhost", Model: "m"}, false},
		{"llamacpp", config.Embedder{Type: "llamacpp", URL: "http://127.0.0.1:8081", Model: "m"}, true},
		{"unknown", config.Embedder{Type: "word2vec"}, false},
		{"empty (config fills the default)", config.Embedder{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &config.Config{}
			cfg.Cascade.KV.Embedder = tc.cfg
			o, err := kvOptions(cfg, nil, configFiles{}, zerolog.Nop())
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok %v", err, tc.ok)
			}
			if err == nil && o.Embedder == nil {
				t.Fatal("no embedder")
			}
		})
	}
	// The kv stage's embedder backend is metered under a reserved name.
	cfg := &config.Config{Backends: []config.Backend{{Name: kvEmbedderName}}}
	cfg.Cascade.KV.Embedder = config.Embedder{Type: "ollama", URL: "http://127.0.0.1:11434", Model: "m"}
	if _, err := kvOptions(cfg, nil, configFiles{}, zerolog.Nop()); err == nil {
		t.Error("a backend named kv-embedder: no error")
	}
	// A file that names no embedder gets the default one.
	c, err := config.Parse([]byte("backends: [{name: a, type: openai, url: 'http://x'}]\n"), registry())
	if err != nil {
		t.Fatal(err)
	}
	if c.Cascade.KV.Embedder.Type != defaultEmbedder {
		t.Fatalf("embedder type %q, want %q", c.Cascade.KV.Embedder.Type, defaultEmbedder)
	}
}

// TestShippedConfigBuilds parses the shipped eoc.yaml, file and embedded copy alike, against the
// real registry and wires every stage it lists, reading its data files beside it.
func TestShippedConfigBuilds(t *testing.T) {
	onDisk, err := os.ReadFile("../../eoc.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, eocproxy.DefaultConfig) {
		t.Fatal("the embedded eoc.yaml differs from the file")
	}
	cfg, err := config.Load("../../eoc.yaml", registry())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Cascade.Stages, stageOrder) {
		t.Fatalf("stages %v, want %v", cfg.Cascade.Stages, stageOrder)
	}
	a, err := build(cfg, filesFor("../../eoc.yaml"), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	a.close()
}

// TestREADMEConfigTable checks the README's configuration table against the keys config
// accepts: every documented key exists, every key is documented (itself or through a parent
// documented as a whole), and every plain default the table states is the one Parse fills.
func TestREADMEConfigTable(t *testing.T) {
	readme, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := readmeConfigRows(t, string(readme))
	keys := map[string]bool{}
	configKeys(reflect.TypeFor[config.Config](), "", keys)

	documented := map[string]bool{}
	for _, r := range rows {
		for _, k := range r.keys {
			if !keys[k] {
				t.Errorf("README documents %s, which config does not accept", k)
			}
			documented[k] = true
		}
	}
	for k := range keys {
		covered := false
		for p := k; p != ""; p = parentKey(p) {
			covered = covered || documented[p]
		}
		if !covered && !hasDocumentedChild(k, documented) {
			t.Errorf("config accepts %s, which the README does not document", k)
		}
	}

	// The defaults: the table's plain values against a config that sets nothing defaulted.
	c, err := config.Parse([]byte("backends: [{name: a, type: openai, url: 'http://x'}]\n"), registry())
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var tree map[string]any
	if err := yaml.Unmarshal(out, &tree); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, r := range rows {
		vals := splitDefaults(r.def)
		if len(vals) != len(r.keys) {
			continue
		}
		for i, k := range r.keys {
			want, ok := plainDefault(vals[i])
			if !ok {
				continue
			}
			got, found := lookup(tree, strings.ReplaceAll(k, "[]", ".0"))
			if !found {
				t.Errorf("README gives %s a default of %s; Parse leaves it unset", k, vals[i])
				continue
			}
			if !sameDefault(fmt.Sprint(got), want) {
				t.Errorf("README gives %s a default of %s; Parse fills %v", k, want, got)
			}
			checked++
		}
	}
	if checked < 15 {
		t.Errorf("only %d defaults compared: the table's shape changed?", checked)
	}
}

type readmeRow struct {
	keys []string
	def  string
}

// readmeConfigRows reads the rows of the table under "## Configuration".
func readmeConfigRows(t *testing.T, readme string) []readmeRow {
	t.Helper()
	_, sec, ok := strings.Cut(readme, "\n## Configuration\n")
	if !ok {
		t.Fatal("README has no Configuration section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	cell := regexp.MustCompile("`([^`]*)`")
	var rows []readmeRow
	for _, line := range strings.Split(sec, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cols := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cols) < 3 {
			t.Fatalf("table row with %d columns: %s", len(cols), line)
		}
		var r readmeRow
		for i, m := range cell.FindAllStringSubmatch(cols[0], -1) {
			k := m[1]
			if i > 0 { // "`a.b.c`, `.d`" and "`a.b.c`, `d`" name a sibling of the first key
				k = parentKey(r.keys[0]) + "." + strings.TrimPrefix(k, ".")
			}
			r.keys = append(r.keys, k)
		}
		r.def = strings.TrimSpace(cols[1])
		rows = append(rows, r)
	}
	if len(rows) < 20 {
		t.Fatalf("only %d rows in the configuration table", len(rows))
	}
	return rows
}

// configKeys adds every key under t, by its yaml tags: nested sections, "[]" for list items.
func configKeys(t reflect.Type, prefix string, out map[string]bool) {
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		key := strings.TrimPrefix(prefix+"."+name, ".")
		out[key] = true
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
			configKeys(ft.Elem(), key+"[]", out)
		} else if ft.Kind() == reflect.Struct {
			configKeys(ft, key, out)
		}
	}
}

func parentKey(k string) string {
	i := strings.LastIndexAny(k, ".")
	if i < 0 {
		return ""
	}
	return strings.TrimSuffix(k[:i], "[]")
}

// hasDocumentedChild reports whether a section is documented through its keys.
func hasDocumentedChild(k string, documented map[string]bool) bool {
	for d := range documented {
		if strings.HasPrefix(d, k+".") || strings.HasPrefix(d, k+"[].") {
			return true
		}
	}
	return false
}

// splitDefaults splits "10000, `1h`" into its values; a default with brackets is one value.
func splitDefaults(s string) []string {
	if strings.ContainsAny(s, "[{") {
		return []string{s}
	}
	return strings.Split(s, ", ")
}

// plainDefault is the value a default cell states, when it states one literally: a number or
// a backticked scalar or list, not prose like "none (auth off)" or a reference to another key.
func plainDefault(s string) (string, bool) {
	if v, ok := strings.CutPrefix(s, "`"); ok {
		v, rest, _ := strings.Cut(v, "`")
		if strings.TrimSpace(rest) != "" && !strings.HasPrefix(strings.TrimSpace(rest), "(") {
			return "", false
		}
		if strings.HasPrefix(v, "{") || regexp.MustCompile(`^[a-z_]+$`).MatchString(v) && strings.Contains(v, "_") {
			return "", false // a mapping, or the name of another key
		}
		return v, true
	}
	if regexp.MustCompile(`^[0-9.]+$`).MatchString(s) {
		return s, true
	}
	return "", false
}

func lookup(tree map[string]any, key string) (any, bool) {
	var cur any = tree
	for _, p := range strings.Split(key, ".") {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[p]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			if p != "0" || len(c) == 0 {
				return nil, false
			}
			cur = c[0]
		default:
			return nil, false
		}
	}
	return cur, true
}

// sameDefault compares a value Parse filled, as fmt prints it, with a default as the README
// writes it.
func sameDefault(got, want string) bool {
	return got == want || (want == `""` && got == "") || sameList(got, want) || sameDuration(got, want)
}

// sameList compares Go's "[a b]" with YAML's "[a, b]" (and quoted "*").
func sameList(got, want string) bool {
	w := strings.NewReplacer(", ", " ", `"`, "").Replace(want)
	return got == w
}

// sameDuration compares "5m0s" with "300s".
func sameDuration(got, want string) bool {
	g, err1 := time.ParseDuration(got)
	w, err2 := time.ParseDuration(want)
	return err1 == nil && err2 == nil && g == w
}

// TestOwnerDefaults: the settings whose defaults their packages own, which config leaves zero
// (config's TestRoutingDefaults), are filled from the owners by registry's Defaults. The routing
// values moved here from config's test.
func TestOwnerDefaults(t *testing.T) {
	c, err := config.Parse([]byte("backends: [{name: a, type: openai, url: 'http://x'}]\n"), registry())
	if err != nil {
		t.Fatal(err)
	}
	r := c.Routing
	if r.EjectAfter != 3 || r.Cooldown.D() != 30*time.Second || r.Explore != 0.05 {
		t.Errorf("routing %+v", r)
	}
	if c.Limits.MaxBodyBytes != 10<<20 {
		t.Errorf("max body bytes %d", c.Limits.MaxBodyBytes)
	}
	if m := c.Meter; m.RAPL.Enabled != "auto" || m.NVML.Enabled != "auto" || m.RAPL.SysfsRoot != "/sys" {
		t.Errorf("meter switches %+v %+v", m.RAPL, m.NVML)
	}
}
