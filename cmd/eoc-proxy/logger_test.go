package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/config"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

// TestLoggerLeavesZerologAlone: newLogger configures its own logger value and none of
// zerolog's package settings, which belong to whoever embeds the packages.
func TestLoggerLeavesZerologAlone(t *testing.T) {
	unit, integer, level, tf := zerolog.DurationFieldUnit, zerolog.DurationFieldInteger, zerolog.GlobalLevel(), zerolog.TimeFieldFormat
	t.Cleanup(func() {
		zerolog.DurationFieldUnit, zerolog.DurationFieldInteger, zerolog.TimeFieldFormat = unit, integer, tf
		zerolog.SetGlobalLevel(level)
	})
	zerolog.DurationFieldUnit, zerolog.DurationFieldInteger, zerolog.TimeFieldFormat = time.Second, true, time.Kitchen
	zerolog.SetGlobalLevel(zerolog.DebugLevel)
	var logs syncBuffer
	log := newLogger("warn", &logs)
	if zerolog.DurationFieldUnit != time.Second || !zerolog.DurationFieldInteger || zerolog.TimeFieldFormat != time.Kitchen ||
		zerolog.GlobalLevel() != zerolog.DebugLevel {
		t.Fatal("newLogger changed zerolog's package settings")
	}
	log.Info().Msg("below the level")
	log.Warn().Msg("at the level")
	if out := logs.String(); strings.Contains(out, "below") || !strings.Contains(out, "at the level") {
		t.Fatalf("level not applied:\n%s", out)
	}
}

// TestComponentsAndReload: each package's lines carry a component field, and a SIGHUP reload
// of the graph is logged once, by the graph's component, whether it worked or not.
func TestComponentsAndReload(t *testing.T) {
	fake := fakes.NewOpenAI(t, fakes.Config{})
	dir := t.TempDir()
	facts := filepath.Join(dir, "facts.tsv")
	writeFile(t, facts, "France\tcapital\tParis\n")
	cfgPath := filepath.Join(dir, "eoc.yaml")
	writeFile(t, cfgPath, `
log_level: debug
cascade: {stages: [graph, neural], graph: {files: [facts.tsv]}}
backends: [{name: up, type: openai, url: '`+fake.BaseURL()+`'}]
`)
	cfg, err := loadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	a, err := build(cfg, filesFor(cfgPath), newLogger(cfg.LogLevel, &logs))
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()

	writeFile(t, facts, "France\tcapital\tParis\nJapan\tcapital\tTokyo\n")
	a.reload()
	writeFile(t, facts, "France\tcapital\n")
	a.reload()

	// The meter's and the ledger's messages still start with "meter: " and "ledger: ": their
	// packages are being reworked elsewhere (issue 9, item 5), so they are not checked here yet.
	prefixed := map[string]bool{"meter": true, "ledger": true}
	var reloads []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		if ev["component"] == nil {
			t.Errorf("a line without a component: %s", line)
		}
		if c, _ := ev["component"].(string); !prefixed[c] && strings.HasPrefix(ev["message"].(string), c+":") {
			t.Errorf("a component named in the message: %s", line)
		}
		if strings.Contains(strings.ToLower(ev["message"].(string)), "reload") {
			reloads = append(reloads, ev)
		}
	}
	if len(reloads) != 2 {
		t.Fatalf("%d reload lines for 2 reloads: %v", len(reloads), reloads)
	}
	if r := reloads[0]; r["component"] != "graph" || r["level"] != "info" || r["triples"] != 2.0 {
		t.Errorf("reload: %v", r)
	}
	if r := reloads[1]; r["component"] != "graph" || r["level"] != "error" || !strings.Contains(r["error"].(string), "facts.tsv:1") {
		t.Errorf("failed reload: %v", r)
	}
}

// TestReloadWithNothingToReload: without a graph stage, SIGHUP says so once.
func TestReloadWithNothingToReload(t *testing.T) {
	fake := fakes.NewOpenAI(t, fakes.Config{})
	cfg, err := config.Parse([]byte("cascade: {stages: [cache, neural]}\nbackends: [{name: up, type: openai, url: '"+fake.BaseURL()+"'}]\n"), registry())
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	a, err := build(cfg, configFiles{}, newLogger("info", &logs))
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	a.reload()
	if n := strings.Count(logs.String(), "reload"); n != 1 || !strings.Contains(logs.String(), `"component":"serve"`) {
		t.Fatalf("%d reload lines:\n%s", n, logs.String())
	}
}
