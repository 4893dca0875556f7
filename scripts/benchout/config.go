//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// shippedConfig is eoc.yaml with the listen address and the one backend's URL pointed at the
// benchmark's ports; everything else (stages, kv, graph, meter, log level) stays as shipped. It
// also returns the stages, for the table's title.
func shippedConfig(src []byte, listen, upstream string) ([]byte, []string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, nil, errors.New("config is not a YAML mapping")
	}
	root := doc.Content[0]
	setScalar(root, "listen", listen)

	bes := lookup(root, "backends")
	if bes == nil || bes.Kind != yaml.SequenceNode || len(bes.Content) != 1 {
		return nil, nil, errors.New("the benchmark expects exactly one backend in the config")
	}
	be := bes.Content[0]
	typ := "ollama"
	if t := lookup(be, "type"); t != nil {
		typ = t.Value
	}
	u := upstream // Ollama and llama.cpp take the root; OpenAI-style backends the /v1 root
	switch typ {
	case "ollama", "llamacpp":
	case "openai":
		u += "/v1"
	default:
		return nil, nil, fmt.Errorf("backend type %q: the fake upstream speaks ollama, openai and llamacpp", typ)
	}
	if lookup(be, "url") == nil {
		return nil, nil, errors.New("the backend has no url")
	}
	setScalar(be, "url", u)

	var stages []string
	if c := lookup(root, "cascade"); c != nil {
		if s := lookup(c, "stages"); s != nil {
			for _, n := range s.Content {
				stages = append(stages, n.Value)
			}
		}
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, nil, err
	}
	return out.Bytes(), stages, enc.Close()
}

func lookup(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// setScalar sets key to a plain string value, adding it when missing.
func setScalar(m *yaml.Node, key, value string) {
	if v := lookup(m, key); v != nil {
		v.Kind, v.Tag, v.Value, v.Style = yaml.ScalarNode, "!!str", value, 0
		return
	}
	m.Content = append(m.Content,
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key},
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value})
}

// stagesString is "[cache, kv, graph, neural]".
func stagesString(s []string) string { return "[" + strings.Join(s, ", ") + "]" }
