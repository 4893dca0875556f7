// Package config loads and validates eoc.yaml into plain structs.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is the whole of eoc.yaml. The zero value is not valid; use Load or Parse.
type Config struct {
	Listen   string    `yaml:"listen"`
	LogLevel string    `yaml:"log_level"`
	Limits   Limits    `yaml:"limits"`
	Cascade  Cascade   `yaml:"cascade"`
	Backends []Backend `yaml:"backends"`
	Meter    Meter     `yaml:"meter"`
	Auth     Auth      `yaml:"auth"`
	Ledger   Ledger    `yaml:"ledger"`
}

// Limits bound each request.
type Limits struct {
	MaxBodyBytes    int64    `yaml:"max_body_bytes"`
	RequestTimeout  Duration `yaml:"request_timeout"`
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
}

// Cascade chooses the stages and their settings.
type Cascade struct {
	Stages []string `yaml:"stages"`
	Cache  Cache    `yaml:"cache"`
	KV     KV       `yaml:"kv"`
	Graph  Graph    `yaml:"graph"`
}

// Stage names, in their natural order.
var StageNames = []string{"cache", "kv", "graph", "neural"}

// Cache is the exact-match stage.
type Cache struct {
	MaxEntries int      `yaml:"max_entries"`
	TTL        Duration `yaml:"ttl"`
}

// KV is the semantic key-value stage.
type KV struct {
	Embedder              Embedder `yaml:"embedder"`
	Threshold             float64  `yaml:"threshold"`
	SeedFiles             []string `yaml:"seed_files"`
	DataDir               string   `yaml:"data_dir"`
	MaxEntries            int      `yaml:"max_entries"`
	MaxSimilarTemperature *float64 `yaml:"max_similar_temperature"`
	LearnQueue            int      `yaml:"learn_queue"`
}

// Embedder picks the kv stage's embedding model.
type Embedder struct {
	Type   string `yaml:"type"` // builtin | ollama | openai
	URL    string `yaml:"url"`
	Model  string `yaml:"model"`
	APIKey Secret `yaml:"api_key"`
}

// Graph is the knowledge-graph stage.
type Graph struct {
	Files []string `yaml:"files"`
}

// Backend is one upstream.
type Backend struct {
	Name    string   `yaml:"name"`
	Type    string   `yaml:"type"` // ollama | openai | llamacpp
	URL     string   `yaml:"url"`
	APIKey  Secret   `yaml:"api_key"`
	Models  []string `yaml:"models"`
	Timeout Duration `yaml:"timeout"`
	Process Process  `yaml:"process"`
	// JoulesPerToken is the token model's default for this backend when no meter.token_models
	// pattern matches (0 means the meter's default).
	JoulesPerToken float64 `yaml:"joules_per_token"`
}

// Process tells the meter where a local backend's processes are, when discovery is not enough.
type Process struct {
	PIDFile string `yaml:"pid_file"`
	Cgroup  string `yaml:"cgroup"`
}

// BackendTypes are the accepted backend types.
var BackendTypes = []string{"ollama", "openai", "llamacpp"}

// Meter configures the energy counters and the estimate models.
type Meter struct {
	RAPL            Counter      `yaml:"rapl"`
	NVML            Counter      `yaml:"nvml"`
	CPUWattsPerCore float64      `yaml:"cpu_watts_per_core"`
	GPUWatts        float64      `yaml:"gpu_watts"`
	TokenModels     []TokenModel `yaml:"token_models"`
	// StageWattsPerCore prices in-process stages (cache, kv, graph): wall time × W.
	StageWattsPerCore float64 `yaml:"stage_watts_per_core"`
}

// Counter switches one hardware counter.
type Counter struct {
	Enabled   string `yaml:"enabled"` // auto | on | off
	SysfsRoot string `yaml:"sysfs_root"`
}

// TokenModel prices tokens for models matching the patterns.
type TokenModel struct {
	Models                   []string `yaml:"models"`
	JoulesPerPromptToken     float64  `yaml:"joules_per_prompt_token"`
	JoulesPerCompletionToken float64  `yaml:"joules_per_completion_token"`
}

// Auth holds the proxy's own API keys. No keys means auth is off.
type Auth struct {
	Keys []Key `yaml:"keys"`
}

// Key is one proxy API key; its ID names the tenant.
type Key struct {
	ID     string  `yaml:"id"`
	Key    Secret  `yaml:"key"`
	Budget *Budget `yaml:"budget"`
}

// Budget limits a key's joules per period.
type Budget struct {
	Joules float64 `yaml:"joules"`
	Per    string  `yaml:"per"` // day | month
}

// Ledger is the receipts ledger.
type Ledger struct {
	Path     string `yaml:"path"`
	Fsync    string `yaml:"fsync"` // every | batch
	HMACKey  Secret `yaml:"hmac_key"`
	MaxBytes int64  `yaml:"max_bytes"`
}

// Secret is a string that prints masked.
type Secret string

// String masks the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "***"
}

// MarshalYAML masks the secret, so a printed config never shows it.
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// Duration is a time.Duration written as "300s" or "1h".
type Duration time.Duration

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration like 30s or 1h", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Load reads and parses the file at p.
func Load(p string) (*Config, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return c, nil
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// Parse expands ${ENV} (and ${ENV:-default}) references, decodes strictly, fills defaults and
// validates.
func Parse(b []byte) (*Config, error) {
	b = envRef.ReplaceAllFunc(b, func(m []byte) []byte {
		sub := envRef.FindSubmatch(m)
		if v, ok := os.LookupEnv(string(sub[1])); ok && v != "" {
			return []byte(yamlQuoteInline(v))
		}
		return sub[3]
	})
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config: %w", err)
	}
	c.fillDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// yamlQuoteInline keeps an expanded secret a single scalar whatever characters it holds.
func yamlQuoteInline(v string) string {
	if strings.ContainsAny(v, ":#{}[],&*!|>'\"%@`\n") || strings.TrimSpace(v) != v {
		return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v) + `"`
	}
	return v
}

func (c *Config) fillDefaults() {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&c.Listen, "127.0.0.1:8080")
	def(&c.LogLevel, "info")
	if c.Limits.MaxBodyBytes == 0 {
		c.Limits.MaxBodyBytes = 10 << 20
	}
	if c.Limits.RequestTimeout == 0 {
		c.Limits.RequestTimeout = Duration(300 * time.Second)
	}
	if c.Limits.ShutdownTimeout == 0 {
		c.Limits.ShutdownTimeout = Duration(30 * time.Second)
	}
	if c.Cascade.Stages == nil {
		c.Cascade.Stages = slices.Clone(StageNames)
	}
	if c.Cascade.Cache.MaxEntries == 0 {
		c.Cascade.Cache.MaxEntries = 10000
	}
	if c.Cascade.Cache.TTL == 0 {
		c.Cascade.Cache.TTL = Duration(time.Hour)
	}
	kv := &c.Cascade.KV
	def(&kv.Embedder.Type, "builtin")
	if kv.Threshold == 0 {
		kv.Threshold = 0.95
	}
	if kv.MaxEntries == 0 {
		kv.MaxEntries = 100000
	}
	if kv.LearnQueue == 0 {
		kv.LearnQueue = 1024
	}
	if kv.MaxSimilarTemperature == nil {
		t := 0.5
		kv.MaxSimilarTemperature = &t
	}
	for i := range c.Backends {
		b := &c.Backends[i]
		if len(b.Models) == 0 {
			b.Models = []string{"*"}
		}
		if b.Timeout == 0 {
			b.Timeout = Duration(120 * time.Second)
		}
	}
	def(&c.Meter.RAPL.Enabled, "auto")
	def(&c.Meter.RAPL.SysfsRoot, "/sys")
	def(&c.Meter.NVML.Enabled, "auto")
	if c.Meter.CPUWattsPerCore == 0 {
		c.Meter.CPUWattsPerCore = 10
	}
	if c.Meter.GPUWatts == 0 {
		c.Meter.GPUWatts = 300
	}
	if c.Meter.StageWattsPerCore == 0 {
		c.Meter.StageWattsPerCore = c.Meter.CPUWattsPerCore
	}
	def(&c.Ledger.Fsync, "every")
	if c.Ledger.MaxBytes == 0 {
		c.Ledger.MaxBytes = 64 << 20
	}
}

// Validate checks every field and names the first bad one with its allowed values.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, a...)))
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("listen", "%q is not host:port", c.Listen)
	}
	if !slices.Contains([]string{"trace", "debug", "info", "warn", "error"}, c.LogLevel) {
		bad("log_level", "%q is not one of trace, debug, info, warn, error", c.LogLevel)
	}
	if c.Limits.MaxBodyBytes < 0 {
		bad("limits.max_body_bytes", "must be positive")
	}
	seen := map[string]bool{}
	for i, s := range c.Cascade.Stages {
		if !slices.Contains(StageNames, s) {
			bad(fmt.Sprintf("cascade.stages[%d]", i), "%q is not one of %s", s, strings.Join(StageNames, ", "))
		}
		if seen[s] {
			bad(fmt.Sprintf("cascade.stages[%d]", i), "%q is listed twice", s)
		}
		seen[s] = true
	}
	if n := len(c.Cascade.Stages); n > 0 && seen["neural"] && c.Cascade.Stages[n-1] != "neural" {
		bad("cascade.stages", "neural must be the last stage: nothing after it can run")
	}
	if c.Cascade.Cache.MaxEntries < 0 {
		bad("cascade.cache.max_entries", "must be positive")
	}
	kv := c.Cascade.KV
	if !slices.Contains([]string{"builtin", "ollama", "openai"}, kv.Embedder.Type) {
		bad("cascade.kv.embedder.type", "%q is not one of builtin, ollama, openai", kv.Embedder.Type)
	}
	if kv.Embedder.Type != "builtin" && kv.Embedder.URL == "" {
		bad("cascade.kv.embedder.url", "required for embedder type %s", kv.Embedder.Type)
	}
	if kv.Threshold <= 0 || kv.Threshold > 1 {
		bad("cascade.kv.threshold", "%v is not in (0, 1]", kv.Threshold)
	}
	if seen["neural"] && len(c.Backends) == 0 {
		bad("backends", "at least one backend is needed when the neural stage is on")
	}
	names := map[string]bool{}
	for i, b := range c.Backends {
		f := fmt.Sprintf("backends[%d]", i)
		if b.Name == "" {
			bad(f+".name", "required")
		}
		if names[b.Name] {
			bad(f+".name", "%q is used twice", b.Name)
		}
		names[b.Name] = true
		if !slices.Contains(BackendTypes, b.Type) {
			bad(f+".type", "%q is not one of %s", b.Type, strings.Join(BackendTypes, ", "))
		}
		if u, err := url.Parse(b.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad(f+".url", "%q is not an http(s) URL", b.URL)
		}
		for _, p := range b.Models {
			if _, err := path.Match(p, ""); err != nil {
				bad(f+".models", "%q is not a glob pattern", p)
			}
		}
		if b.Timeout < 0 {
			bad(f+".timeout", "must be positive")
		}
	}
	for _, cn := range []struct {
		field string
		v     string
	}{{"meter.rapl.enabled", c.Meter.RAPL.Enabled}, {"meter.nvml.enabled", c.Meter.NVML.Enabled}} {
		if !slices.Contains([]string{"auto", "on", "off"}, cn.v) {
			bad(cn.field, "%q is not one of auto, on, off", cn.v)
		}
	}
	if c.Meter.CPUWattsPerCore < 0 {
		bad("meter.cpu_watts_per_core", "must be positive")
	}
	for i, tm := range c.Meter.TokenModels {
		if len(tm.Models) == 0 {
			bad(fmt.Sprintf("meter.token_models[%d].models", i), "required")
		}
		if tm.JoulesPerPromptToken < 0 || tm.JoulesPerCompletionToken < 0 {
			bad(fmt.Sprintf("meter.token_models[%d]", i), "joules per token must be positive")
		}
	}
	ids := map[string]bool{}
	for i, k := range c.Auth.Keys {
		f := fmt.Sprintf("auth.keys[%d]", i)
		if k.ID == "" {
			bad(f+".id", "required")
		}
		if ids[k.ID] {
			bad(f+".id", "%q is used twice", k.ID)
		}
		ids[k.ID] = true
		if k.Key == "" {
			bad(f+".key", "empty (is its ${ENV} variable set?)")
		}
		if k.Budget != nil {
			if k.Budget.Joules <= 0 {
				bad(f+".budget.joules", "must be positive")
			}
			if !slices.Contains([]string{"day", "month"}, k.Budget.Per) {
				bad(f+".budget.per", "%q is not one of day, month", k.Budget.Per)
			}
		}
	}
	if !slices.Contains([]string{"every", "batch"}, c.Ledger.Fsync) {
		bad("ledger.fsync", "%q is not one of every, batch", c.Ledger.Fsync)
	}
	return errors.Join(errs...)
}

// Masked returns the config as YAML with every secret masked.
func (c *Config) Masked() ([]byte, error) { return yaml.Marshal(c) }

// StageOn reports whether a stage is in the walk.
func (c *Config) StageOn(name string) bool { return slices.Contains(c.Cascade.Stages, name) }
