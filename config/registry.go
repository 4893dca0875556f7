package config

import (
	"maps"
	"slices"
)

// Registry is what the program loading a config can build: the names each section may use and
// the defaults their owning packages give. config knows no stage, backend or embedder itself;
// the program fills a Registry from its factories (cmd/eoc-proxy/registry.go) and Parse
// validates against it. The zero Registry accepts no names and fills no owner defaults.
type Registry struct {
	// Stages are the stage names in their natural order: the walk when a file lists none.
	Stages []string
	// LastStage, when set, is the stage that answers every request: listed, it must come last,
	// and it needs at least one backend.
	LastStage string
	// BackendTypes are the accepted backends[].type values.
	BackendTypes []string
	// Strategies are the accepted routing.groups[].strategy values, the default first.
	Strategies []string
	// Switches are the accepted meter.rapl.enabled and meter.nvml.enabled values, the default
	// first; an empty switch is left for Defaults.
	Switches []string
	// Embedders maps each cascade.kv.embedder.type to whether it calls a server, and so needs
	// a url.
	Embedders map[string]bool
	// Defaults, when set, fills the fields a file left empty with their owners' defaults. It
	// runs after config's own defaults and before validation.
	Defaults func(*Config)
}

// embedderNames lists the registered embedder types, sorted.
func (r Registry) embedderNames() []string { return slices.Sorted(maps.Keys(r.Embedders)) }
