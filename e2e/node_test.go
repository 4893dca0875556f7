//go:build e2e && linux

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNodeSDK runs e2e/node/sdk.cjs, the official OpenAI Node SDK (`openai` from npm, pinned by
// e2e/node/package-lock.json), against the proxy and the real Ollama: models.list, withResponse()
// and the X-EOC headers, a stream with include_usage, an abort mid-stream, and errors mapped to
// the SDK's NotFoundError and BadRequestError. EOC_E2E_NODE_MODULES names the node_modules that
// `npm ci --prefix e2e/node` made (scripts/test.sh sets it; .ci/run runs npm ci). Unset, the test
// skips, unless EOC_E2E=1 or CI=true; set and missing, it fails.
func TestNodeSDK(t *testing.T) {
	modules := os.Getenv("EOC_E2E_NODE_MODULES")
	if modules == "" {
		if os.Getenv("EOC_E2E") == "1" || os.Getenv("CI") == "true" {
			t.Fatal("EOC_E2E_NODE_MODULES is not set (scripts/test.sh sets it; run `npm ci --prefix e2e/node`)")
		}
		t.Skip("EOC_E2E_NODE_MODULES not set")
	}
	if _, err := os.Stat(filepath.Join(modules, "openai", "package.json")); err != nil {
		t.Fatalf("no openai SDK in EOC_E2E_NODE_MODULES=%s (run `npm ci --prefix e2e/node`): %v", modules, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not on PATH: %v", err)
	}
	_, p := ownPair(t, "node") // the scenario's client leaves mid-stream (see ownPair)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(env.root, "e2e", "node", "sdk.cjs"))
	cmd.Env = append(os.Environ(), "EOC_BASE_URL="+p.url+"/v1", "EOC_MODEL="+model, "EOC_E2E_NODE_MODULES="+modules)
	out, err := cmd.CombinedOutput()
	t.Logf("node %s:\n%s", filepath.Base(node), out)
	if err != nil {
		t.Fatalf("the Node SDK scenario failed: %v", err)
	}
	if n := strings.Count(string(out), "ok - "); n != 7 {
		t.Fatalf("%d of 7 checks passed", n)
	}
}
