package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/fakes"
)

// buildProxy builds cmd/eoc-proxy into a temp dir: the real binary, as an operator runs it.
func buildProxy(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "eoc-proxy")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// runBin runs bin with args and stdin, and returns its stdout, stderr and exit code.
func runBin(t *testing.T, bin, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return out.String(), errb.String(), code
}

// queryJSON runs `query -json` and decodes what it printed.
func queryJSON(t *testing.T, bin, stdin string, args ...string) (queryResult, string, int) {
	t.Helper()
	out, stderr, code := runBin(t, bin, stdin, append([]string{"query", "-json"}, args...)...)
	var r queryResult
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("query -json %v printed %q (stderr %q): %v", args, out, stderr, err)
	}
	return r, stderr, code
}

// checkFigure checks a printed figure: estimated (no counters in this test), with a reason,
// Low ≤ J ≤ High, and a receipt with its time.
func checkFigure(t *testing.T, r queryResult, stage string) {
	t.Helper()
	if r.Stage != stage || r.Status != http.StatusOK || r.Error != nil {
		t.Fatalf("stage %q status %d error %+v, want %s: %+v", r.Stage, r.Status, r.Error, stage, r)
	}
	if r.Grade != string(energy.Estimated) || r.Reason == "" || r.Method == "" || r.Coverage == "" {
		t.Errorf("figure %+v: want an estimate with its method, reason and coverage", r)
	}
	if !(0 <= r.JoulesLow && r.JoulesLow <= r.Joules && r.Joules <= r.JoulesHigh && r.Joules > 0) {
		t.Errorf("bounds: %v ≤ %v ≤ %v", r.JoulesLow, r.Joules, r.JoulesHigh)
	}
	if !hex64.MatchString(r.Receipt) {
		t.Errorf("receipt %q", r.Receipt)
	}
	if _, err := time.Parse(time.RFC3339Nano, r.ReceiptTime); err != nil {
		t.Errorf("receipt time %q: %v", r.ReceiptTime, err)
	}
}

// TestQueryCommand is issue 31's first done-when, on the real binary: a kv seed, a graph fact and
// a neural call on a fake Ollama each answered with its stage, its estimate and a receipt; the
// ledger holds those receipts and `receipts verify` accepts it; -json decodes; "-" reads stdin;
// and a call no stage answers exits non-zero with the words the HTTP API sends for it.
func TestQueryCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildProxy(t)
	fake := fakes.NewOllama(t, fakes.Config{Reply: "a story of four words"})
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("faq.jsonl", `{"question": "What is 2+2?", "answer": "4"}`+"\n")
	write("facts.tsv", "Night Ferry\tdirector\tTomas Vell\n")
	// A config beside its files, named relative to it, as an operator writes one.
	conf := func(stages string) string {
		return fmt.Sprintf(`log_level: info
cascade:
  stages: [%s]
  kv: {seed_files: [faq.jsonl]}
  graph: {files: [facts.tsv]}
backends: [{name: up, type: ollama, url: %q, models: ["fake-*"], timeout: 5s}]
meter: {rapl: {enabled: "off"}, nvml: {enabled: "off"}}
ledger: {path: receipts.jsonl}
`, stages, fake.BaseURL())
	}
	cfg := write("eoc.yaml", conf("cache, kv, graph, neural"))

	// The text form, a kv seed asked with other case and spacing than the seed's.
	out, stderr, code := runBin(t, bin, "", "query", "-config", cfg, "-model", "fake-model", "what is 2+2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			t.Fatalf("line %q has no label", l)
		}
		lines[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if lines["stage"] != "kv" || lines["answer"] != "4" || !strings.Contains(lines["joules"], "J estimated, coverage whole") ||
		!strings.HasPrefix(lines["saved"], "10 J") || !hex64.MatchString(lines["receipt"]) {
		t.Fatalf("the text form:\n%s", out)
	}

	kvr, _, _ := queryJSON(t, bin, "", "-config", cfg, "-model", "fake-model", "What is 2+2?")
	checkFigure(t, kvr, "kv")
	if kvr.Answer != "4" || kvr.JoulesSaved <= 0 || kvr.JoulesSavedGrade != "estimated" || !strings.Contains(kvr.Reason, "in-process-stage") {
		t.Errorf("kv: %+v", kvr)
	}
	graph, _, _ := queryJSON(t, bin, "", "-config", cfg, "-model", "fake-model", "Who directed Night Ferry?")
	checkFigure(t, graph, "graph")
	if !strings.Contains(graph.Answer, "Tomas Vell") || graph.JoulesSaved <= 0 {
		t.Errorf("graph: %+v", graph)
	}
	// The neural stage, the question on stdin.
	neural, _, _ := queryJSON(t, bin, "Tell me a story.\n", "-config", cfg, "-model", "fake-model", "-")
	checkFigure(t, neural, "neural")
	if neural.Answer != "a story of four words" || neural.Backend != "up" || neural.Attempts != 1 || fake.Requests() != 1 {
		t.Errorf("neural: %+v, the fake saw %d calls", neural, fake.Requests())
	}
	if last := fake.LastRequest(); !bytes.Contains(last.Body, []byte("Tell me a story.")) || bytes.Contains(last.Body, []byte(`story.\n`)) {
		t.Errorf("the upstream got %s", last.Body)
	}

	// The ledger: one record a call, with the receipts printed, and a chain verify accepts. Each
	// printed receipt is the hash of the printed figure and time with the record's key.
	ledgerPath := filepath.Join(dir, "receipts.jsonl")
	recs := readRecords(t, ledgerPath)
	printed := []queryResult{kvr, graph, neural}
	if len(recs) != 4 {
		t.Fatalf("%d ledger records, want 4 (the text query and three -json)", len(recs))
	}
	for i, r := range printed {
		rec := recs[i+1]
		tm, _ := time.Parse(time.RFC3339Nano, r.ReceiptTime)
		want := energy.Receipt{Key: rec.Key, Stage: r.Stage, Model: r.Model, Joules: r.Joules, Grade: energy.Grade(r.Grade), Time: tm}.Hash()
		if rec.Receipt != r.Receipt || rec.Stage != r.Stage || r.Receipt != want {
			t.Errorf("record %d: stage %s receipt %s; printed %s %s; rehashed %s", i+1, rec.Stage, rec.Receipt, r.Stage, r.Receipt, want)
		}
	}
	out, stderr, code = runBin(t, bin, "", "receipts", "verify", ledgerPath)
	if code != 0 || !strings.HasPrefix(out, "ok: 4 records") {
		t.Fatalf("receipts verify: exit %d: %s%s", code, out, stderr)
	}

	// No stage can answer: the exit and the words are the HTTP API's.
	cheap := write("cheap.yaml", conf("cache, kv, graph"))
	miss, stderr, code := queryJSON(t, bin, "", "-config", cheap, "-model", "fake-model", "Who painted Night Ferry?")
	// The same call over HTTP, on serve's wiring of the same config (its files rebased here as
	// loadConfig does, and its ledger elsewhere).
	apiCfg, err := loadConfig(cheap)
	if err != nil {
		t.Fatal(err)
	}
	apiCfg.Ledger.Path = filepath.Join(t.TempDir(), "api.jsonl")
	a, err := build(apiCfg, filesFor(cheap), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.handler)
	defer func() { srv.Close(); a.close() }()
	status, msg, errCode := errorOf(t, srv.URL, `{"model":"fake-model","messages":[{"role":"user","content":"Who painted Night Ferry?"}]}`, nil)
	if code == 0 || miss.Error == nil || miss.Status != status || miss.Error.Message != msg || miss.Error.Code != errCode ||
		errCode != "no_stage_answered" || !strings.Contains(stderr, msg) || !hex64.MatchString(miss.Receipt) {
		t.Fatalf("exit %d, %+v, stderr %q; the API says %d %s %q", code, miss, stderr, status, errCode, msg)
	}
	if n := len(readRecords(t, filepath.Join(dir, "receipts.jsonl"))); n != 5 {
		t.Errorf("the failed call left %d records in all, want 5", n)
	}
	// With auth.keys, the key comes from the variable -key-env names (never the command line),
	// and the call is the key's tenant's.
	keyed := write("keyed.yaml", conf("cache, kv, graph, neural")+"auth: {keys: [{id: team-q, key: query-secret}]}\n")
	if _, stderr, code := runBin(t, bin, "", "query", "-config", keyed, "-model", "fake-model", "What is 2+2?"); code == 0 ||
		!strings.Contains(stderr, "HTTP 401, invalid_request_error, missing_api_key") {
		t.Errorf("no key: exit %d, %q", code, stderr)
	}
	out, stderr, code = runBin(t, bin, "", "query", "-config", keyed, "-key-env", "EOC_QUERY_UNSET_KEY", "What is 2+2?")
	if code == 0 || !strings.Contains(stderr, "EOC_QUERY_UNSET_KEY is empty or unset") {
		t.Errorf("an unset -key-env: exit %d, %q %q", code, out, stderr)
	}
	t.Setenv("EOC_QUERY_KEY", "query-secret")
	keyedRes, stderr, code := queryJSON(t, bin, "", "-config", keyed, "-key-env", "EOC_QUERY_KEY", "-model", "fake-model", "What is 2+2?")
	if code != 0 || keyedRes.Answer != "4" {
		t.Errorf("with -key-env: exit %d, %+v, %q", code, keyedRes, stderr)
	}
	if recs := readRecords(t, ledgerPath); recs[len(recs)-1].KeyID != "team-q" || recs[len(recs)-1].Receipt != keyedRes.Receipt {
		t.Errorf("the keyed call's record: %+v", recs[len(recs)-1])
	}

	// Usage errors exit non-zero without a call.
	if _, stderr, code := runBin(t, bin, "", "query", "-config", cfg); code == 0 || !strings.Contains(stderr, "usage") {
		t.Errorf("no question: exit %d, %q", code, stderr)
	}
	if _, stderr, code := runBin(t, bin, "  \n", "query", "-config", cfg, "-"); code == 0 || !strings.Contains(stderr, "empty") {
		t.Errorf("an empty stdin: exit %d, %q", code, stderr)
	}
}

func TestDefaultQueryModel(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{nil, "default"},
		{[]string{"*"}, "default"},
		{[]string{"llama3*", "eoc-tiny", "x"}, "eoc-tiny"},
		{[]string{"gpt-[45]", "qwen?"}, "default"},
	} {
		if got := defaultQueryModel(c.in); got != c.want {
			t.Errorf("defaultQueryModel(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
