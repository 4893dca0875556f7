// Package config loads and validates eoc.yaml into plain structs.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
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
	Routing  Routing   `yaml:"routing"`
	Meter    Meter     `yaml:"meter"`
	Auth     Auth      `yaml:"auth"`
	Ledger   Ledger    `yaml:"ledger"`
	Debug    Debug     `yaml:"debug"`
	// Redis, when set, is the store replicas share (cache, kv learning, budgets, rate limits).
	Redis Redis `yaml:"redis"`
	// ReplicaID names this replica in ledger records and file names (default: the hostname).
	ReplicaID string `yaml:"replica_id"`
	// Telemetry exports OpenTelemetry traces; off unless otlp_endpoint is set.
	Telemetry Telemetry `yaml:"telemetry"`
}

// Debug holds the operator's diagnostics, all off by default.
type Debug struct {
	// Pprof, when set, serves net/http/pprof on this host:port, on its own listener and never
	// on the public one. Empty (the default) serves nothing.
	Pprof string `yaml:"pprof"`
}

// Redis is the store that several replicas share. No URL: each replica keeps its own state.
type Redis struct {
	// URL is redis://[user@]host:port/db, or rediss:// for TLS.
	URL Secret `yaml:"url"`
	// Password, when set, overrides the URL's: write it as ${REDIS_PASSWORD}, a whole value,
	// so ${ENV} expansion quotes it whatever it holds.
	Password Secret `yaml:"password"`
	// OpTimeout bounds one Redis operation on a call's path; past it Redis counts as down until
	// a ping answers. 0 is cluster.DefaultOpTimeout.
	OpTimeout Duration `yaml:"op_timeout"`
}

// DefaultMaxDuration is backends[].max_duration when a config leaves it out: no call, stream
// included, runs longer unless the config says so.
const DefaultMaxDuration = Duration(30 * time.Minute)

// Limits bound each request.
type Limits struct {
	// MaxBodyBytes bounds a request's body (0: proxy.DefaultMaxBodyBytes).
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

// Cache is the exact-match stage.
type Cache struct {
	MaxEntries int      `yaml:"max_entries"`
	TTL        Duration `yaml:"ttl"`
	// MaxBytes bounds the stored answers' bytes together; 0 is cache.DefaultMaxBytes.
	MaxBytes int64 `yaml:"max_bytes"`
	// MaxEntryBytes bounds one stored answer (larger ones are served, not stored); 0 is
	// cache.DefaultMaxEntryBytes.
	MaxEntryBytes int `yaml:"max_entry_bytes"`
}

// KV is the semantic key-value stage.
type KV struct {
	Embedder        Embedder `yaml:"embedder"`
	Threshold       float64  `yaml:"threshold"`
	SeedFiles       []string `yaml:"seed_files"`
	DataDir         string   `yaml:"data_dir"`
	MaxEntries      int      `yaml:"max_entries"`
	MaxTotalEntries int      `yaml:"max_total_entries"`
	MaxCollections  int      `yaml:"max_collections"`
	// MaxBytes and MaxEntryBytes bound the learned entries' bytes, together and each (kv.Options);
	// 0 is kv's default.
	MaxBytes              int64    `yaml:"max_bytes"`
	MaxEntryBytes         int      `yaml:"max_entry_bytes"`
	MaxSimilarTemperature *float64 `yaml:"max_similar_temperature"`
	LearnQueue            int      `yaml:"learn_queue"`
}

// Embedder picks the kv stage's embedding model.
type Embedder struct {
	Type   string `yaml:"type"` // one of Registry.Embedders
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
	Name   string   `yaml:"name"`
	Type   string   `yaml:"type"` // one of Registry.BackendTypes
	URL    string   `yaml:"url"`
	APIKey Secret   `yaml:"api_key"`
	Models []string `yaml:"models"`
	// Timeout bounds each silence of the upstream: the wait for the first byte and each gap
	// between chunks, never a stream that keeps flowing.
	Timeout Duration `yaml:"timeout"`
	// MaxDuration bounds one whole call, stream included (default DefaultMaxDuration, or Timeout
	// when that is longer): a stream that flows, or only sends keep-alive comments, forever is
	// cut there. A config raises it for longer calls.
	MaxDuration Duration `yaml:"max_duration"`
	Process     Process  `yaml:"process"`
	// JoulesPerToken is the token model's default for this backend when no meter.token_models
	// pattern matches (0 means the meter's default).
	JoulesPerToken float64 `yaml:"joules_per_token"`
}

// Routing spreads each model's calls over the backends that serve it (every backend whose
// models patterns match, in config order) and leaves failing ones out for a while.
type Routing struct {
	// Groups give models a strategy; the first group with a matching pattern wins, and a model
	// in none is routed by fallback (config order).
	Groups []RoutingGroup `yaml:"groups"`
	// EjectAfter failed attempts in a row eject a backend (0: routing.DefaultEjectAfter).
	EjectAfter int `yaml:"eject_after"`
	// Cooldown is how long an ejected backend is skipped before a probe may re-admit it
	// (0: routing.DefaultCooldown).
	Cooldown Duration `yaml:"cooldown"`
	// Explore is the share of least-joules calls sent to a random backend so that every
	// backend keeps a fresh figure (0: routing.DefaultExplore; negative: none).
	Explore float64 `yaml:"explore"`
}

// RoutingGroup gives the models matching Models a strategy.
type RoutingGroup struct {
	Models   []string `yaml:"models"`
	Strategy string   `yaml:"strategy"` // one of Registry.Strategies; default the first
}

// Process tells the meter where a local backend's processes are, when discovery is not enough.
type Process struct {
	PIDFile string `yaml:"pid_file"`
	Cgroup  string `yaml:"cgroup"`
}

// Meter configures the energy counters and the estimate models.
type Meter struct {
	RAPL            RAPL         `yaml:"rapl"`
	NVML            NVML         `yaml:"nvml"`
	CPUWattsPerCore float64      `yaml:"cpu_watts_per_core"`
	GPUWatts        float64      `yaml:"gpu_watts"`
	TokenModels     []TokenModel `yaml:"token_models"`
	// StageWattsPerCore prices in-process stages (cache, kv, graph): wall time × W.
	StageWattsPerCore float64 `yaml:"stage_watts_per_core"`
}

// RAPL switches the RAPL counter. SysfsRoot is where the meter reads sysfs (RAPL's powercap
// zones and the backends' cgroups; "": meter.DefaultSysfsRoot).
type RAPL struct {
	Enabled   string `yaml:"enabled"` // one of Registry.Switches; "": the first
	SysfsRoot string `yaml:"sysfs_root"`
}

// NVML switches the NVIDIA GPU counter.
type NVML struct {
	Enabled string `yaml:"enabled"` // one of Registry.Switches; "": the first
	// SettleInline makes a call's response wait for NVML's counter to settle its GPU figure, so
	// that it never carries a provisional one (meter.Options.SettleInline). Off by default: the
	// response goes out at once and the settled figure follows.
	SettleInline bool `yaml:"settle_inline"`
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
	// MetricsNeedKey makes GET /metrics take one of the keys too (default: open).
	MetricsNeedKey bool `yaml:"metrics_need_key"`
	// AdminKeys are ids of Keys that may open GET /ui and its data; with Keys set and no admin
	// key, the page is closed.
	AdminKeys []string `yaml:"admin_keys"`
}

// Key is one proxy API key; its ID names the tenant.
type Key struct {
	ID     string  `yaml:"id"`
	Key    Secret  `yaml:"key"`
	Budget *Budget `yaml:"budget"`
	Limits *Rate   `yaml:"limits"`
}

// Rate limits a key's calls per minute: RPM requests and TPM completion tokens (0: no limit).
type Rate struct {
	RPM int `yaml:"rpm"`
	TPM int `yaml:"tpm"`
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

// Load reads the file at p and parses it against reg.
func Load(p string, reg Registry) (*Config, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	c, err := Parse(b, reg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return c, nil
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// Parse expands ${ENV} (and ${ENV:-default}) references, decodes strictly, fills config's own
// defaults and then reg's, and validates against reg.
func Parse(b []byte, reg Registry) (*Config, error) {
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
	c.fillDefaults(reg)
	if reg.Defaults != nil {
		reg.Defaults(&c)
	}
	if err := c.Validate(reg); err != nil {
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

// fillDefaults fills the defaults config owns: those of settings whose package reads zero as
// "none" or takes no default (the listen address, the log level, the request and shutdown
// timeouts, the cache's entries and TTL, a backend's models and bounds, a group's strategy,
// the ledger's rotation). A default that a package owns (its Default constant, applied to a zero
// value: routing, the body limit, the counter switches, kv, the meter's prices) is left zero
// here and filled by Registry.Defaults from the owner, so each is written once.
func (c *Config) fillDefaults(reg Registry) {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&c.Listen, "127.0.0.1:8080")
	def(&c.LogLevel, "info")
	if c.Limits.RequestTimeout == 0 {
		c.Limits.RequestTimeout = Duration(300 * time.Second)
	}
	if c.Limits.ShutdownTimeout == 0 {
		c.Limits.ShutdownTimeout = Duration(30 * time.Second)
	}
	if c.Cascade.Stages == nil {
		c.Cascade.Stages = slices.Clone(reg.Stages)
	}
	if c.Cascade.Cache.MaxEntries == 0 {
		c.Cascade.Cache.MaxEntries = 10000
	}
	if c.Cascade.Cache.TTL == 0 {
		c.Cascade.Cache.TTL = Duration(time.Hour)
	}
	for i := range c.Backends {
		b := &c.Backends[i]
		if len(b.Models) == 0 {
			b.Models = []string{"*"}
		}
		if b.Timeout == 0 {
			b.Timeout = Duration(120 * time.Second)
		}
		if b.MaxDuration == 0 {
			b.MaxDuration = max(DefaultMaxDuration, b.Timeout)
		}
	}
	for i := range c.Routing.Groups {
		if c.Routing.Groups[i].Strategy == "" && len(reg.Strategies) > 0 {
			c.Routing.Groups[i].Strategy = reg.Strategies[0]
		}
	}
	if c.Ledger.MaxBytes == 0 {
		c.Ledger.MaxBytes = 64 << 20
	}
}

// Masked returns the config as YAML with every secret masked.
func (c *Config) Masked() ([]byte, error) { return yaml.Marshal(c) }

// StageOn reports whether a stage is in the walk.
func (c *Config) StageOn(name string) bool { return slices.Contains(c.Cascade.Stages, name) }

// Telemetry configures OpenTelemetry. With no OTLPEndpoint no exporter runs and no span is kept.
type Telemetry struct {
	// OTLPEndpoint is the OTLP/HTTP traces URL, e.g. http://127.0.0.1:4318/v1/traces.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
}
