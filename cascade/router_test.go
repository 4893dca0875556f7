package cascade

import (
	"context"
	"fmt"
	"path"
)

// patternRouter is the walk's tests' Router (routing imports cascade): it knows the models its
// path.Match patterns match, with one backend, "b", that is always up. The error is always nil.
func patternRouter(patterns ...string) (Router, error) { return patternSet(patterns), nil }

type patternSet []string

func (ps patternSet) Known(model string) error {
	for _, p := range ps {
		if ok, _ := path.Match(p, model); ok {
			return nil
		}
	}
	return fmt.Errorf("%w: %q", ErrModelNotFound, model)
}

func (patternSet) Ready(context.Context) error               { return nil }
func (patternSet) Models(context.Context) ([]Model, []error) { return nil, nil }
func (patternSet) LiteralModels() []string                   { return nil }
func (patternSet) Names() []string                           { return []string{"b"} }
func (patternSet) Up(name string) bool                       { return name == "b" }
