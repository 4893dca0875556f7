package cascade

import "context"

// Router is what the cascade asks of its routing table (routing.Router, which imports cascade):
// the walk asks Known whether any backend serves a model; the edge, through Cascade.Router,
// asks for readiness, the model lists and each backend's state.
type Router interface {
	// Known returns nil when a backend serves model, else an error wrapping ErrModelNotFound.
	Known(model string) error
	// Ready returns nil while every model has a live backend.
	Ready(ctx context.Context) error
	// Models lists the models the backends serve, with the errors of those that could not list;
	// LiteralModels lists those the configuration spells out, asking no backend.
	Models(ctx context.Context) ([]Model, []error)
	LiteralModels() []string
	// Names lists the backends in config order; Up reports whether one is taking calls.
	Names() []string
	Up(name string) bool
}

// Model is one model a backend serves.
type Model struct {
	ID      string
	Backend string
}
