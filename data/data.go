// Package data ships the example seed files (faq.jsonl, facts.tsv) inside the binary, so the
// default eoc.yaml works from any directory.
package data

import "embed"

// Shipped holds faq.jsonl and facts.tsv as they are in this directory. eoc-proxy falls back to
// them when eoc.yaml names data/faq.jsonl or data/facts.tsv and the file is not on disk.
//
//go:embed faq.jsonl facts.tsv
var Shipped embed.FS
