package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"slices"
	"strings"
)

// problems collects what Validate finds, each naming its field.
type problems []error

func (p *problems) add(field, format string, a ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, a...)))
}

// oneOf reports v as bad unless it is one of allowed.
func (p *problems) oneOf(field, v string, allowed []string) {
	if !slices.Contains(allowed, v) {
		p.add(field, "%q is not one of %s", v, strings.Join(allowed, ", "))
	}
}

// Validate checks every field against reg and names each bad one with its allowed values.
func (c *Config) Validate(reg Registry) error {
	var p problems
	c.validateServer(&p)
	c.validateStages(&p, reg)
	c.validateKV(&p, reg)
	c.validateBackends(&p, reg)
	c.validateRouting(&p, reg)
	c.validateMeter(&p, reg)
	c.validateAuth(&p)
	c.validateLedger(&p)
	c.validateReplicas(&p)
	return errors.Join(p...)
}

// validateServer checks listen, log_level and limits.
func (c *Config) validateServer(p *problems) {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		p.add("listen", "%q is not host:port", c.Listen)
	}
	p.oneOf("log_level", c.LogLevel, []string{"trace", "debug", "info", "warn", "error"})
	if c.Debug.Pprof != "" {
		if _, _, err := net.SplitHostPort(c.Debug.Pprof); err != nil {
			p.add("debug.pprof", "%q is not host:port", c.Debug.Pprof)
		} else if c.Debug.Pprof == c.Listen {
			p.add("debug.pprof", "must not be the listen address")
		}
	}
	if c.Limits.MaxBodyBytes < 0 {
		p.add("limits.max_body_bytes", "must be positive")
	}
}

// validateStages checks cascade.stages against the registry, and the cache stage's bounds.
func (c *Config) validateStages(p *problems, reg Registry) {
	seen := map[string]bool{}
	for i, s := range c.Cascade.Stages {
		f := fmt.Sprintf("cascade.stages[%d]", i)
		p.oneOf(f, s, reg.Stages)
		if seen[s] {
			p.add(f, "%q is listed twice", s)
		}
		seen[s] = true
	}
	if n := len(c.Cascade.Stages); reg.LastStage != "" && seen[reg.LastStage] && c.Cascade.Stages[n-1] != reg.LastStage {
		p.add("cascade.stages", "%s must be the last stage: nothing after it can run", reg.LastStage)
	}
	if c.Cascade.Cache.MaxEntries < 0 {
		p.add("cascade.cache.max_entries", "must be positive")
	}
	for _, b := range []struct {
		field string
		v     int64
	}{
		{"cascade.cache.max_bytes", c.Cascade.Cache.MaxBytes}, {"cascade.cache.max_entry_bytes", int64(c.Cascade.Cache.MaxEntryBytes)},
		{"cascade.kv.max_bytes", c.Cascade.KV.MaxBytes}, {"cascade.kv.max_entry_bytes", int64(c.Cascade.KV.MaxEntryBytes)},
	} {
		if b.v < 0 {
			p.add(b.field, "must not be negative")
		}
	}
}

// validateKV checks the kv stage's embedder and threshold.
func (c *Config) validateKV(p *problems, reg Registry) {
	kv := c.Cascade.KV
	needsURL, ok := reg.Embedders[kv.Embedder.Type]
	if !ok {
		p.add("cascade.kv.embedder.type", "%q is not one of %s", kv.Embedder.Type, strings.Join(reg.embedderNames(), ", "))
	}
	if needsURL && kv.Embedder.URL == "" {
		p.add("cascade.kv.embedder.url", "required for embedder type %s", kv.Embedder.Type)
	}
	if kv.Threshold <= 0 || kv.Threshold > 1 {
		p.add("cascade.kv.threshold", "%v is not in (0, 1]", kv.Threshold)
	}
}

// validateBackends checks each backend, and that the last stage has one to call.
func (c *Config) validateBackends(p *problems, reg Registry) {
	if reg.LastStage != "" && c.StageOn(reg.LastStage) && len(c.Backends) == 0 {
		p.add("backends", "at least one backend is needed when the %s stage is on", reg.LastStage)
	}
	names := map[string]bool{}
	for i, b := range c.Backends {
		f := fmt.Sprintf("backends[%d]", i)
		if b.Name == "" {
			p.add(f+".name", "required")
		}
		if names[b.Name] {
			p.add(f+".name", "%q is used twice", b.Name)
		}
		names[b.Name] = true
		p.oneOf(f+".type", b.Type, reg.BackendTypes)
		if u, err := url.Parse(b.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.add(f+".url", "%q is not an http(s) URL", b.URL)
		}
		for _, pat := range b.Models {
			if _, err := path.Match(pat, ""); err != nil {
				p.add(f+".models", "%q is not a glob pattern", pat)
			}
		}
		if b.Timeout < 0 {
			p.add(f+".timeout", "must be positive")
		}
		if b.MaxDuration < 0 {
			p.add(f+".max_duration", "must be positive")
		}
	}
}

// validateRouting checks the routing groups and the ejection settings.
func (c *Config) validateRouting(p *problems, reg Registry) {
	r := c.Routing
	for i, g := range r.Groups {
		f := fmt.Sprintf("routing.groups[%d]", i)
		if len(g.Models) == 0 {
			p.add(f+".models", "required")
		}
		for _, pat := range g.Models {
			if _, err := path.Match(pat, ""); err != nil {
				p.add(f+".models", "%q is not a glob pattern", pat)
			}
		}
		p.oneOf(f+".strategy", g.Strategy, reg.Strategies)
	}
	if r.EjectAfter < 0 {
		p.add("routing.eject_after", "must be at least 1 (0: the default)")
	}
	if r.Cooldown < 0 {
		p.add("routing.cooldown", "must be positive")
	}
	if r.Explore >= 1 {
		p.add("routing.explore", "%v is not below 1", r.Explore)
	}
}

// validateMeter checks the counter switches and the estimate models.
func (c *Config) validateMeter(p *problems, reg Registry) {
	for _, sw := range []struct{ field, v string }{{"meter.rapl.enabled", c.Meter.RAPL.Enabled}, {"meter.nvml.enabled", c.Meter.NVML.Enabled}} {
		if sw.v != "" {
			p.oneOf(sw.field, sw.v, reg.Switches)
		}
	}
	if c.Meter.CPUWattsPerCore < 0 {
		p.add("meter.cpu_watts_per_core", "must be positive")
	}
	for i, tm := range c.Meter.TokenModels {
		if len(tm.Models) == 0 {
			p.add(fmt.Sprintf("meter.token_models[%d].models", i), "required")
		}
		if tm.JoulesPerPromptToken < 0 || tm.JoulesPerCompletionToken < 0 {
			p.add(fmt.Sprintf("meter.token_models[%d]", i), "joules per token must be positive")
		}
	}
}

// validateAuth checks the proxy's keys and their budgets.
func (c *Config) validateAuth(p *problems) {
	ids := map[string]bool{}
	for i, k := range c.Auth.Keys {
		f := fmt.Sprintf("auth.keys[%d]", i)
		if k.ID == "" {
			p.add(f+".id", "required")
		}
		if ids[k.ID] {
			p.add(f+".id", "%q is used twice", k.ID)
		}
		ids[k.ID] = true
		if k.Key == "" {
			p.add(f+".key", "empty (is its ${ENV} variable set?)")
		}
		if k.Budget != nil {
			if k.Budget.Joules <= 0 {
				p.add(f+".budget.joules", "must be positive")
			}
			p.oneOf(f+".budget.per", k.Budget.Per, []string{"day", "month"})
		}
	}
	for i, id := range c.Auth.AdminKeys {
		if !ids[id] {
			p.add(fmt.Sprintf("auth.admin_keys[%d]", i), "%q is not the id of one of auth.keys", id)
		}
	}
	if e := c.Telemetry.OTLPEndpoint; e != "" {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.add("telemetry.otlp_endpoint", "%q is not an http(s) URL", e)
		}
	}
}

// validateLedger checks the ledger's fsync mode.
func (c *Config) validateLedger(p *problems) {
	p.oneOf("ledger.fsync", c.Ledger.Fsync, []string{"every", "batch"})
}
