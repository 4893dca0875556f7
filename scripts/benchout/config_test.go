//go:build linux

package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestShippedConfig(t *testing.T) {
	shipped, err := os.ReadFile("../../eoc.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, src, wantURL, wantErr string
	}{
		{name: "shipped eoc.yaml", src: string(shipped), wantURL: "http://127.0.0.1:9"},
		{name: "openai backend gets /v1", src: "backends: [{name: a, type: openai, url: http://x}]", wantURL: "http://127.0.0.1:9/v1"},
		{name: "two backends", src: "backends: [{name: a, url: http://x}, {name: b, url: http://y}]", wantErr: "exactly one backend"},
		{name: "no url", src: "backends: [{name: a}]", wantErr: "no url"},
		{name: "unknown type", src: "backends: [{name: a, type: vllm, url: http://x}]", wantErr: "vllm"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, stages, err := shippedConfig([]byte(tc.src), "127.0.0.1:7", "http://127.0.0.1:9")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got, want map[string]any
			if err := yaml.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal([]byte(tc.src), &want); err != nil {
				t.Fatal(err)
			}
			if got["listen"] != "127.0.0.1:7" {
				t.Errorf("listen = %v", got["listen"])
			}
			be := got["backends"].([]any)[0].(map[string]any)
			if be["url"] != tc.wantURL {
				t.Errorf("url = %v, want %s", be["url"], tc.wantURL)
			}
			// Nothing else changed.
			delete(got, "listen")
			delete(want, "listen")
			want["backends"].([]any)[0].(map[string]any)["url"] = tc.wantURL
			if g, w := yamlString(t, got), yamlString(t, want); g != w {
				t.Errorf("config changed beyond listen and url:\n got %s\nwant %s", g, w)
			}
			var wantStages []string
			if c, ok := want["cascade"].(map[string]any); ok {
				for _, s := range c["stages"].([]any) {
					wantStages = append(wantStages, s.(string))
				}
			}
			if !slices.Equal(stages, wantStages) {
				t.Errorf("stages = %v, want %v", stages, wantStages)
			}
		})
	}
}

func yamlString(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
