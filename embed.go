// Package eocproxy holds the files that ship inside the binary: the default eoc.yaml.
package eocproxy

import _ "embed"

// DefaultConfig is the shipped eoc.yaml, so the binary runs with no file beside it.
//
//go:embed eoc.yaml
var DefaultConfig []byte
