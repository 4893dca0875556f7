//go:build e2e && linux

// Package e2e runs the real eoc-proxy binary against a real Ollama serving
// the tiny test model (internal/testenv/tinymodel).
//
// TestMain builds cmd/eoc-proxy into a temp dir, starts its own Ollama from
// bin/ollama (scripts/build-ollama.sh) on a free loopback port with a temp
// OLLAMA_MODELS, creates eoc-tiny and eoc-tiny-embed in it, and starts the
// proxy in front of it. Tests that kill Ollama start a pair of their own.
//
//	go test -race -tags e2e -count=1 -v ./e2e/...
//
// Without bin/ollama the suite skips, unless EOC_E2E=1 or CI=true: then it
// fails. EOC_E2E_RACE=0 builds the proxy without the race detector (the
// figures it logs are then the plain binary's); EOC_E2E_KEEP=1 keeps the
// temp dir with the logs.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ollama/ollama/api"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	goopenai "github.com/sashabaranov/go-openai"

	"github.com/eoc-proxy/eoc-proxy/internal/testenv/tinymodel"
)

const model = tinymodel.ChatName

// env is the shared Ollama and proxy pair.
var env struct {
	root       string
	tmp        string
	ollamaBin  string
	proxyBin   string
	race       bool
	models     string // OLLAMA_MODELS, shared by every Ollama the suite starts
	chatDigest string // hex of the chat model's blob, to find its runner
	ollama     *ollamaProc
	proxy      *proxyProc
}

// figures are the measurements the suite logs at the end.
var figures struct {
	sync.Mutex
	lines []string
}

func figure(format string, a ...any) {
	figures.Lock()
	defer figures.Unlock()
	figures.lines = append(figures.lines, fmt.Sprintf(format, a...))
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	required := os.Getenv("EOC_E2E") == "1" || os.Getenv("CI") == "true"
	unavailable := func(format string, a ...any) int {
		msg := fmt.Sprintf(format, a...)
		if required {
			fmt.Fprintf(os.Stderr, "e2e: FAIL (EOC_E2E=1 or CI=true, so no skipping): %s\n", msg)
			return 1
		}
		fmt.Printf("e2e: SKIP: %s\n", msg)
		return 0
	}

	root, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	env.root = root
	env.ollamaBin = os.Getenv("EOC_OLLAMA_BIN")
	if env.ollamaBin == "" {
		env.ollamaBin = filepath.Join(root, "bin", "ollama")
	}
	if _, err := os.Stat(env.ollamaBin); err != nil {
		return unavailable("no Ollama at %s (run scripts/build-ollama.sh): %v", env.ollamaBin, err)
	}

	env.tmp, err = os.MkdirTemp("", "eoc-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer func() {
		if code != 0 || os.Getenv("EOC_E2E_KEEP") == "1" {
			fmt.Printf("e2e: logs kept in %s\n", env.tmp)
			return
		}
		_ = os.RemoveAll(env.tmp)
	}()

	env.race = os.Getenv("EOC_E2E_RACE") != "0"
	env.proxyBin = filepath.Join(env.tmp, "eoc-proxy")
	t0 := time.Now()
	args := []string{"build", "-o", env.proxyBin}
	if env.race {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "./cmd/eoc-proxy")...)
	build.Dir = root
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: building cmd/eoc-proxy: %v\n", err)
		return 1
	}
	fmt.Printf("e2e: built eoc-proxy (race=%v) in %s\n", env.race, time.Since(t0).Round(time.Millisecond))

	gguf, err := tinymodel.GGUF(false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	env.chatDigest = strings.TrimPrefix(tinymodel.Digest(gguf), "sha256:")
	env.models = filepath.Join(env.tmp, "models")

	t0 = time.Now()
	env.ollama, err = startOllama("main")
	if err != nil {
		return unavailable("starting Ollama: %v", err)
	}
	defer env.ollama.stop()
	fmt.Printf("e2e: Ollama %s ready in %s\n", env.ollama.url, time.Since(t0).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 = time.Now()
	if err := tinymodel.CreateAll(ctx, env.ollama.client()); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		env.ollama.tail(os.Stderr)
		return 1
	}
	figure("create eoc-tiny + eoc-tiny-embed: %s", time.Since(t0).Round(time.Millisecond))
	if d, err := loadModel(ctx, env.ollama); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: loading eoc-tiny:", err)
		env.ollama.tail(os.Stderr)
		return 1
	} else {
		figure("eoc-tiny cold load (POST /api/generate, no prompt): %s", d.Round(time.Millisecond))
	}

	env.proxy, err = startProxy("main", env.ollama.url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: starting eoc-proxy:", err)
		return 1
	}
	defer env.proxy.stop()

	code = m.Run()

	if code != 0 {
		env.proxy.tail(os.Stderr)
		env.ollama.tail(os.Stderr)
	}
	figures.Lock()
	fmt.Printf("e2e figures (proxy race=%v, %s):\n", env.race, cpuModel())
	for _, l := range figures.lines {
		fmt.Println("  " + l)
	}
	figures.Unlock()
	return code
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the module")
	}
	return filepath.Dir(mod), nil
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for l := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return fmt.Sprintf("%d CPUs, %s", countCPUs(b), strings.TrimSpace(v))
		}
	}
	return "unknown CPU"
}

func countCPUs(cpuinfo []byte) int { return bytes.Count(cpuinfo, []byte("\nprocessor")) + 1 }

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

// ---- Ollama -------------------------------------------------------------

type ollamaProc struct {
	name string
	host string // 127.0.0.1:port
	url  string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func startOllama(name string) (*ollamaProc, error) {
	host, err := freeAddr()
	if err != nil {
		return nil, err
	}
	o := &ollamaProc{name: name, host: host, url: "http://" + host, log: filepath.Join(env.tmp, "ollama-"+name+".log"), done: make(chan struct{})}
	lf, err := os.Create(o.log)
	if err != nil {
		return nil, err
	}
	o.cmd = exec.Command(env.ollamaBin, "serve")
	o.cmd.Env = append(os.Environ(),
		"OLLAMA_HOST="+host,
		"OLLAMA_MODELS="+env.models,
		"OLLAMA_KEEP_ALIVE=30m",
		"OLLAMA_NOPRUNE=1",
	)
	o.cmd.Stdout, o.cmd.Stderr = lf, lf
	// Its own process group, so kill reaches the runners; Pdeathsig, so a
	// crashed test binary does not leave the server behind.
	o.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := o.cmd.Start(); err != nil {
		_ = lf.Close()
		return nil, err
	}
	go func() {
		_ = o.cmd.Wait()
		_ = lf.Close()
		close(o.done)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		hctx, hcancel := context.WithTimeout(ctx, 2*time.Second)
		err := o.client().Heartbeat(hctx)
		hcancel()
		if err == nil {
			return o, nil
		}
		select {
		case <-o.done:
			var b bytes.Buffer
			o.tail(&b)
			return nil, fmt.Errorf("ollama serve exited: %v\n%s", o.cmd.ProcessState, b.String())
		case <-ctx.Done():
			o.kill()
			return nil, fmt.Errorf("ollama serve did not answer at %s in 60s: %w", o.url, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (o *ollamaProc) client() *api.Client {
	u, _ := url.Parse(o.url)
	return api.NewClient(u, http.DefaultClient)
}

// stop ends the server and its runners: SIGTERM, then SIGKILL after 10s.
func (o *ollamaProc) stop() {
	select {
	case <-o.done:
		return
	default:
	}
	_ = syscall.Kill(-o.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-o.done:
	case <-time.After(10 * time.Second):
		o.kill()
	}
	// Runners left in the group.
	_ = syscall.Kill(-o.cmd.Process.Pid, syscall.SIGKILL)
}

// kill SIGKILLs the server and its runners at once.
func (o *ollamaProc) kill() {
	_ = syscall.Kill(-o.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-o.done:
	case <-time.After(10 * time.Second):
	}
}

func (o *ollamaProc) tail(w io.Writer) { tailFile(w, "ollama "+o.name, o.log, 40) }

// runnerPID returns the pid of the runner serving the chat model, waiting up
// to 10s for it to appear.
func (o *ollamaProc) runnerPID(t *testing.T) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, pid := range children(o.cmd.Process.Pid) {
			cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if bytes.Contains(cl, []byte("runner")) && bytes.Contains(cl, []byte(env.chatDigest)) {
				return pid
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no runner for %s under ollama serve (pid %d)", model, o.cmd.Process.Pid)
	return 0
}

// loadModel loads the chat model (a generate request with no prompt) and
// returns how long that took.
func loadModel(ctx context.Context, o *ollamaProc) (time.Duration, error) {
	stream := false
	t0 := time.Now()
	err := o.client().Generate(ctx, &api.GenerateRequest{Model: model, Stream: &stream}, func(api.GenerateResponse) error { return nil })
	return time.Since(t0), err
}

// ---- /proc --------------------------------------------------------------

// stat returns the fields of /proc/pid/stat after the command name: index 0
// is field 3 (state).
func stat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("odd /proc/%d/stat", pid)
	}
	return strings.Fields(string(b[i+1:])), nil
}

func children(ppid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := stat(pid)
		if err != nil || len(f) < 2 {
			continue
		}
		if p, _ := strconv.Atoi(f[1]); p == ppid {
			out = append(out, pid)
		}
	}
	return out
}

// cpuTicks is the process's user+system CPU time in clock ticks (1/100 s).
func cpuTicks(pid int) (int64, error) {
	f, err := stat(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s, nil
}

// ---- eoc-proxy ------------------------------------------------------------

type proxyProc struct {
	name string
	url  string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
}

const proxyConfig = `listen: %s
log_level: info
limits: {max_body_bytes: 10485760, request_timeout: 300s}
cascade:
  stages: [cache, kv, graph, neural]
  cache: {max_entries: 10000, ttl: 1h}
backends:
  - name: local
    type: ollama
    url: %s
    models: ["*"]
    timeout: 120s
`

func startProxy(name, ollamaURL string) (*proxyProc, error) {
	return startProxyWith(name, func(addr, _ string) string { return fmt.Sprintf(proxyConfig, addr, ollamaURL) }, nil)
}

// startProxyWith starts eoc-proxy with the config that config writes for its listen address and
// its own directory; before, when set, runs first with the config file's path.
func startProxyWith(name string, config func(addr, dir string) string, before func(cfg string) error) (*proxyProc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(env.tmp, "proxy-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "eoc.yaml")
	if err := os.WriteFile(cfg, []byte(config(addr, dir)), 0o644); err != nil {
		return nil, err
	}
	if before != nil {
		if err := before(cfg); err != nil {
			return nil, err
		}
	}
	p := &proxyProc{name: name, url: "http://" + addr, log: filepath.Join(dir, "proxy.log"), done: make(chan struct{})}
	lf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(env.proxyBin, "serve", "-config", cfg)
	p.cmd.Dir = dir // anything it writes stays in the temp dir
	p.cmd.Stdout, p.cmd.Stderr = lf, lf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		_ = lf.Close()
		return nil, err
	}
	go func() {
		_ = p.cmd.Wait()
		_ = lf.Close()
		close(p.done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.url + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		select {
		case <-p.done:
			var b bytes.Buffer
			p.tail(&b)
			return nil, fmt.Errorf("eoc-proxy exited: %v\n%s", p.cmd.ProcessState, b.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("eoc-proxy /healthz not 200 in 30s (last: %w)", err)
		}
	}
}

func (p *proxyProc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proxyProc) tail(w io.Writer) { tailFile(w, "eoc-proxy "+p.name, p.log, 40) }

func tailFile(w io.Writer, what, path string, n int) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	_, _ = fmt.Fprintf(w, "---- last %d lines of %s log (%s)\n%s\n----\n", len(lines), what, path, strings.Join(lines, "\n"))
}

// ---- requests -------------------------------------------------------------

// prompt returns words of random letters: no two tests share a cache key,
// and no two prompts look alike to the kv stage.
func prompt() string {
	var b strings.Builder
	for i := range 8 {
		if i > 0 {
			b.WriteByte(' ')
		}
		for range 3 + rand.IntN(6) {
			b.WriteByte(byte('a' + rand.IntN(26)))
		}
	}
	return b.String()
}

func chatBody(content string, maxTokens int, stream bool) map[string]any {
	b := map[string]any{
		"model":    model,
		"messages": []map[string]any{{"role": "user", "content": content}},
	}
	if maxTokens > 0 {
		b["max_tokens"] = maxTokens
	}
	if stream {
		b["stream"] = true
		b["stream_options"] = map[string]any{"include_usage": true}
	}
	return b
}

type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	EOC   map[string]any `json:"eoc"`
	Error *apiError      `json:"error"`
}

type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func post(ctx context.Context, base string, body any) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

// chat posts a non-streaming request and decodes the answer.
func chat(t *testing.T, base string, body any) (*http.Response, completion) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := post(ctx, base, body)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var c completion
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatalf("status %d, body %q: %v", resp.StatusCode, raw, err)
	}
	return resp, c
}

// sse reads a server-sent event stream.
type sse struct {
	resp *http.Response
	sc   *bufio.Scanner
}

func openStream(ctx context.Context, base string, body any) (*sse, error) {
	resp, err := post(ctx, base, body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	return &sse{resp: resp, sc: sc}, nil
}

var errDone = errors.New("[DONE]")

// next returns the next event's data; errDone after "data: [DONE]", io.EOF
// when the body ends without it, or the read error.
func (s *sse) next() ([]byte, error) {
	for s.sc.Scan() {
		line := s.sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // blank separators, comments, event: lines
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			return nil, errDone
		}
		return data, nil
	}
	if err := s.sc.Err(); err != nil {
		return nil, err
	}
	return nil, io.EOF
}

func (s *sse) close() { _ = s.resp.Body.Close() }

// streamed is a whole stream, read to its end.
type streamed struct {
	resp    *http.Response
	chunks  []completion
	content string
	done    bool  // saw [DONE]
	err     error // how the body ended, if not with [DONE] then EOF
	ttft    time.Duration
	total   time.Duration
}

func readStream(t *testing.T, base string, body any) streamed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	s, err := openStream(ctx, base, body)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	out := streamed{resp: s.resp}
	for {
		data, err := s.next()
		if errors.Is(err, errDone) {
			out.done = true
			// The body must end right after [DONE]; reading to EOF fills the trailers.
			if rest, err := s.next(); !errors.Is(err, io.EOF) {
				t.Errorf("after [DONE]: %q, %v", rest, err)
			}
			break
		}
		if err != nil {
			out.err = err
			break
		}
		var c completion
		if err := json.Unmarshal(data, &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		out.chunks = append(out.chunks, c)
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" && out.ttft == 0 {
				out.ttft = time.Since(t0)
			}
			out.content += ch.Delta.Content
		}
	}
	out.total = time.Since(t0)
	return out
}

// usage returns the stream's usage chunk.
func (s streamed) usage(t *testing.T) (prompt, completion int) {
	t.Helper()
	for _, c := range s.chunks {
		if c.Usage != nil && len(c.Choices) == 0 {
			return c.Usage.PromptTokens, c.Usage.CompletionTokens
		}
	}
	t.Fatalf("no usage chunk in %d chunks", len(s.chunks))
	return 0, 0
}

// ---- X-EOC ------------------------------------------------------------------

var (
	reJoules  = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)
	reReceipt = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// checkEOC checks the X-EOC fields, read through get (headers or trailers).
func checkEOC(t *testing.T, where string, get func(string) string, wantStage string) {
	t.Helper()
	if j := get("X-EOC-Joules"); !reJoules.MatchString(j) {
		t.Errorf("%s X-EOC-Joules = %q, want a non-negative decimal", where, j)
	}
	if s := get("X-EOC-Stage"); s == "" || (wantStage != "" && s != wantStage) {
		t.Errorf("%s X-EOC-Stage = %q, want %q", where, s, wantStage)
	}
	switch e := get("X-EOC-Energy"); e {
	case "measured":
	case "estimated":
		if get("X-EOC-Energy-Reason") == "" {
			t.Errorf("%s X-EOC-Energy is estimated but X-EOC-Energy-Reason is empty", where)
		}
	default:
		t.Errorf("%s X-EOC-Energy = %q, want measured or estimated", where, e)
	}
	if r := get("X-EOC-Receipt"); !reReceipt.MatchString(r) {
		t.Errorf("%s X-EOC-Receipt = %q, want 64 hex digits", where, r)
	}
}

// checkStreamEnd checks a completed stream: [DONE], the eoc chunk just
// before it, the usage chunk, and the trailers matching the eoc chunk.
func checkStreamEnd(t *testing.T, s streamed, wantStage string) {
	t.Helper()
	if !s.done {
		t.Fatalf("stream ended without [DONE]: %v", s.err)
	}
	if ct := s.resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("Content-Type = %q", ct)
	}
	if st := s.resp.Header.Get("X-EOC-Stage"); wantStage != "" && st != wantStage {
		t.Errorf("stream header X-EOC-Stage = %q, want %q", st, wantStage)
	}
	for _, k := range []string{"X-EOC-Joules", "X-EOC-Stage", "X-EOC-Energy", "X-EOC-Receipt"} {
		if _, announced := s.resp.Trailer[http.CanonicalHeaderKey(k)]; !announced {
			t.Errorf("trailer %s not announced (Trailer: %v)", k, s.resp.Trailer)
		}
	}
	checkEOC(t, "trailer", s.resp.Trailer.Get, wantStage)
	if len(s.chunks) == 0 {
		t.Fatal("no chunks")
	}
	last := s.chunks[len(s.chunks)-1]
	if last.EOC == nil {
		t.Fatalf("last chunk before [DONE] has no eoc object: %+v", last)
	}
	if len(last.Choices) != 0 {
		t.Errorf("eoc chunk has %d choices", len(last.Choices))
	}
	str := func(k string) string {
		switch v := last.EOC[k].(type) {
		case string:
			return v
		case float64:
			return strconv.FormatFloat(v, 'f', -1, 64)
		case nil:
			return ""
		}
		return fmt.Sprint(last.EOC[k])
	}
	for k, h := range map[string]string{"stage": "X-EOC-Stage", "energy": "X-EOC-Energy", "receipt": "X-EOC-Receipt"} {
		if got, want := str(k), s.resp.Trailer.Get(h); got != want {
			t.Errorf("eoc.%s = %q, trailer %s = %q", k, got, h, want)
		}
	}
	j, _ := strconv.ParseFloat(s.resp.Trailer.Get("X-EOC-Joules"), 64)
	if ej, ok := last.EOC["joules"].(float64); !ok || (j-ej > 1e-6*max(1, j) || ej-j > 1e-6*max(1, j)) {
		t.Errorf("eoc.joules = %v, trailer X-EOC-Joules = %v", last.EOC["joules"], j)
	}
	// The usage chunk comes before the eoc chunk.
	if len(s.chunks) < 2 || s.chunks[len(s.chunks)-2].Usage == nil {
		t.Errorf("the chunk before the eoc chunk is not the usage chunk")
	}
}

// ---- clients ----------------------------------------------------------------

func goOpenAI(base string) *goopenai.Client {
	cfg := goopenai.DefaultConfig("unused")
	cfg.BaseURL = base + "/v1"
	return goopenai.NewClientWithConfig(cfg)
}

func openaiGo(base string) oai.Client {
	return oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
}

// ---- tests ------------------------------------------------------------------

func TestModels(t *testing.T) {
	ctx := context.Background()
	want := func(ids []string) {
		t.Helper()
		if !slices.Contains(ids, model) && !slices.Contains(ids, model+":latest") {
			t.Errorf("/v1/models = %v, want %s in it", ids, model)
		}
	}
	list, err := goOpenAI(env.proxy.url).ListModels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list.Models {
		ids = append(ids, m.ID)
	}
	want(ids)

	oc := openaiGo(env.proxy.url)
	page, err := oc.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids = ids[:0]
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	want(ids)
}

func TestChatGoOpenAI(t *testing.T) {
	resp, err := goOpenAI(env.proxy.url).CreateChatCompletion(context.Background(), goopenai.ChatCompletionRequest{
		Model:     model,
		Messages:  []goopenai.ChatCompletionMessage{{Role: goopenai.ChatMessageRoleUser, Content: prompt()}},
		MaxTokens: 12, //nolint:staticcheck // SA1019: max_tokens is what most clients still send
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" || resp.Choices[0].Message.Role != "assistant" {
		t.Fatalf("choices = %+v", resp.Choices)
	}
	if !strings.HasPrefix(resp.Model, model) {
		t.Errorf("model = %q", resp.Model)
	}
	u := resp.Usage
	if u.PromptTokens <= 0 || u.CompletionTokens <= 0 || u.CompletionTokens > 12 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("usage = %+v", u)
	}
	checkEOC(t, "header", resp.Header().Get, "neural")
}

func TestChatOpenAIGo(t *testing.T) {
	var raw *http.Response
	c := openaiGo(env.proxy.url)
	resp, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []oai.ChatCompletionMessageParamUnion{oai.UserMessage(prompt())},
		MaxTokens: oai.Int(12),
	}, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" {
		t.Fatalf("choices = %+v", resp.Choices)
	}
	if u := resp.Usage; u.CompletionTokens <= 0 || u.CompletionTokens > 12 || u.PromptTokens <= 0 {
		t.Errorf("usage = %+v", u)
	}
	checkEOC(t, "header", raw.Header.Get, "neural")
}

func TestStreamRaw(t *testing.T) {
	s := readStream(t, env.proxy.url, chatBody(prompt(), 16, true))
	checkStreamEnd(t, s, "neural")
	if s.content == "" {
		t.Error("no content")
	}
	if _, n := s.usage(t); n <= 0 || n > 16 {
		t.Errorf("completion_tokens = %d, want 1..16", n)
	}
	// Every chunk but the last (eoc) is a chat.completion.chunk with one id.
	for i, c := range s.chunks {
		if c.Object != "chat.completion.chunk" || c.ID != s.chunks[0].ID {
			t.Errorf("chunk %d: object %q id %q (first id %q)", i, c.Object, c.ID, s.chunks[0].ID)
		}
	}
}

func TestStreamGoOpenAI(t *testing.T) {
	st, err := goOpenAI(env.proxy.url).CreateChatCompletionStream(context.Background(), goopenai.ChatCompletionRequest{
		Model:         model,
		Messages:      []goopenai.ChatCompletionMessage{{Role: goopenai.ChatMessageRoleUser, Content: prompt()}},
		MaxTokens:     10, //nolint:staticcheck // SA1019: max_tokens is what most clients still send
		Stream:        true,
		StreamOptions: &goopenai.StreamOptions{IncludeUsage: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	if got := st.Header().Get("X-EOC-Stage"); got != "neural" {
		t.Errorf("X-EOC-Stage = %q", got)
	}
	var content string
	var usage *goopenai.Usage
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Choices {
			content += c.Delta.Content
		}
		if r.Usage != nil {
			usage = r.Usage
		}
	}
	if content == "" {
		t.Error("no content")
	}
	if usage == nil || usage.CompletionTokens <= 0 || usage.CompletionTokens > 10 {
		t.Errorf("usage = %+v", usage)
	}
}

func TestStreamOpenAIGo(t *testing.T) {
	c := openaiGo(env.proxy.url)
	st := c.Chat.Completions.NewStreaming(context.Background(), oai.ChatCompletionNewParams{
		Model:         model,
		Messages:      []oai.ChatCompletionMessageParamUnion{oai.UserMessage(prompt())},
		MaxTokens:     oai.Int(10),
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)},
	})
	defer func() { _ = st.Close() }()
	var acc oai.ChatCompletionAccumulator
	n := 0
	for st.Next() {
		if !acc.AddChunk(st.Current()) {
			t.Errorf("accumulator refused chunk %d: %s", n, st.Current().RawJSON())
		}
		n++
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].Message.Content == "" {
		t.Errorf("accumulated choices = %+v", acc.Choices)
	}
	if u := acc.Usage; u.CompletionTokens <= 0 || u.CompletionTokens > 10 {
		t.Errorf("usage = %+v", u)
	}
}

func TestCacheHit(t *testing.T) {
	p := prompt()
	r1, c1 := chat(t, env.proxy.url, chatBody(p, 12, false)) //nolint:bodyclose // chat closed it
	if r1.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %+v", r1.StatusCode, c1.Error)
	}
	checkEOC(t, "first", r1.Header.Get, "neural")

	r2, c2 := chat(t, env.proxy.url, chatBody(p, 12, false)) //nolint:bodyclose // chat closed it
	checkEOC(t, "repeat", r2.Header.Get, "cache")
	if got, want := c2.Choices[0].Message.Content, c1.Choices[0].Message.Content; got != want {
		t.Errorf("cached content %q, first %q", got, want)
	}
	if r1.Header.Get("X-EOC-Receipt") == r2.Header.Get("X-EOC-Receipt") {
		t.Error("the hit has the miss's receipt")
	}

	// The same request as a stream is a hit too, replayed as a stream.
	s := readStream(t, env.proxy.url, chatBody(p, 12, true))
	checkStreamEnd(t, s, "cache")
	if s.content != c1.Choices[0].Message.Content {
		t.Errorf("replayed stream content %q, first %q", s.content, c1.Choices[0].Message.Content)
	}

	// A completed stream is stored as well.
	q := prompt()
	s1 := readStream(t, env.proxy.url, chatBody(q, 12, true))
	checkStreamEnd(t, s1, "neural")
	r3, c3 := chat(t, env.proxy.url, chatBody(q, 12, false)) //nolint:bodyclose // chat closed it
	checkEOC(t, "repeat of a stream", r3.Header.Get, "cache")
	if len(c3.Choices) == 0 || c3.Choices[0].Message.Content != s1.content {
		t.Errorf("cached content %+v, streamed %q", c3.Choices, s1.content)
	}
}

func TestMaxTokens(t *testing.T) {
	for _, n := range []int{1, 5, 40} {
		resp, c := chat(t, env.proxy.url, chatBody(prompt(), n, false)) //nolint:bodyclose // chat closed it
		if resp.StatusCode != http.StatusOK || c.Usage == nil || len(c.Choices) == 0 {
			t.Fatalf("max_tokens %d: status %d, %+v", n, resp.StatusCode, c)
		}
		if got := c.Usage.CompletionTokens; got < 1 || got > n {
			t.Errorf("max_tokens %d: completion_tokens %d", n, got)
		}
		// eoc-tiny never stops on its own, so the limit is what ends it.
		if fr := c.Choices[0].FinishReason; fr == nil || *fr != "length" {
			t.Errorf("max_tokens %d: finish_reason %v, want length", n, fr)
		}
	}
	s := readStream(t, env.proxy.url, chatBody(prompt(), 7, true))
	checkStreamEnd(t, s, "neural")
	if _, got := s.usage(t); got < 1 || got > 7 {
		t.Errorf("stream max_tokens 7: completion_tokens %d", got)
	}

	// max_completion_tokens, the newer name, through the official client.
	var raw *http.Response
	c := openaiGo(env.proxy.url)
	resp, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{
		Model:               model,
		Messages:            []oai.ChatCompletionMessageParamUnion{oai.UserMessage(prompt())},
		MaxCompletionTokens: oai.Int(3),
	}, option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Usage.CompletionTokens; got < 1 || got > 3 {
		t.Errorf("max_completion_tokens 3: completion_tokens %d", got)
	}
}

// TestDisconnectStopsGeneration: a client that leaves mid-stream must stop
// the generation in Ollama, seen as the runner's threads no longer wanting a
// core. The evidence is the CPU its threads want (ran or waited on a run queue
// for), not only what they got: on a loaded machine a generating runner may
// get a few ticks a second, as little as an idle one, but it still wants its
// cores; a stopped one wants none.
func TestDisconnectStopsGeneration(t *testing.T) {
	const (
		maxTokens = 100000 // minutes of generation at this model's speed
		// stopWithin bounds the wait for the runner to go quiet: it only turns
		// a runner that never stops into a failure, so it is generous for a
		// loaded machine (the figure logged is the time it took).
		stopWithin = 30 * time.Second
		window     = 500 * time.Millisecond
		quiet      = 3 // windows in a row the stopped runner must stay quiet
	)
	o, p := ownPair(t, "disconnect") // its client leaves mid-stream (see ownPair)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := openStream(ctx, p.url, chatBody(prompt(), maxTokens, true))
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	for range 20 {
		if _, err := s.next(); err != nil {
			t.Fatalf("stream ended early: %v", err)
		}
	}
	pid := o.runnerPID(t)

	// Keep reading while measuring, so the generation is not held up by us.
	var mu sync.Mutex
	read := 0
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			if _, err := s.next(); err != nil {
				return
			}
			mu.Lock()
			read++
			mu.Unlock()
		}
	}()
	t0 := time.Now()
	busy := cpuUseOver(t, pid, time.Second)
	mu.Lock()
	rate := float64(read) / time.Since(t0).Seconds()
	mu.Unlock()
	t.Logf("while streaming: runner %d %v in 1s; ~%.0f chunks/s", pid, busy, rate)
	// A generating runner wants most of a core at least, however loaded the
	// machine: its compute threads are running or ready to run.
	if busy.wanted < 0.5 || rate == 0 {
		t.Fatalf("the runner is not generating (%v in 1s, %.0f chunks/s); the test cannot tell a stop", busy, rate)
	}
	if rate*stopWithin.Seconds() > maxTokens {
		t.Fatalf("generation would end by itself within %v (%.0f chunks/s); raise maxTokens", stopWithin, rate)
	}

	cancel() // the client goes away
	<-readerDone
	left := time.Now()
	deadline := left.Add(stopWithin)
	// Stopped: the runner wants under a tenth of what it wanted while
	// generating, and gets at most 2 ticks, in quiet windows in a row.
	calm := 0
	var calmAt time.Time // the end of the first of the quiet windows in a row
	for {
		idle := cpuUseOver(t, pid, window)
		if idle.wanted <= busy.wanted/10 && idle.ticks <= 2 {
			if calm == 0 {
				calmAt = time.Now()
			}
			calm++
		} else {
			calm = 0
		}
		if calm == quiet {
			took := calmAt.Sub(left)
			t.Logf("runner quiet %s after the disconnect (%d windows of %v in a row; the last: %v)", took.Round(10*time.Millisecond), quiet, window, idle)
			figure("disconnect to quiet runner: within %s (sampled in %v windows, %d in a row)", took.Round(10*time.Millisecond), window, quiet)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the runner still %v per %v, %v after the client left", idle, window, stopWithin)
		}
	}
}

// ownPair starts an Ollama and an eoc-proxy in front of it for one test, both stopped when the
// test ends (their logs' tails go to stderr when it failed). Tests that kill Ollama, or whose
// client leaves mid-stream, run on a pair of their own. A client that leaves at the wrong moment
// can leak the model's only slot in Ollama 0.17.4: its streaming handlers send on a channel that
// nobody reads once the client is gone (ollama/ollama#17131), so every later call to that model
// on that server waits forever, failing the tests that follow on the shared one.
func ownPair(t *testing.T, name string) (*ollamaProc, *proxyProc) {
	t.Helper()
	o, err := startOllama(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.stop)
	p, err := startProxy(name, o.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	t.Cleanup(func() {
		if t.Failed() {
			p.tail(os.Stderr)
			o.tail(os.Stderr)
		}
	})
	return o, p
}

// TestBackendFailures runs on a pair of its own: it kills the runner, then
// all of Ollama, mid-stream.
func TestBackendFailures(t *testing.T) {
	o, p := ownPair(t, "failures")

	// midStream opens a long stream, reads a few chunks, calls kill, and reads
	// on to the end; the client must see the stream cut, without [DONE].
	midStream := func(t *testing.T, url string, body map[string]any, kill func()) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := openStream(ctx, url, body)
		if err != nil {
			t.Fatal(err)
		}
		defer s.close()
		for range 10 {
			if _, err := s.next(); err != nil {
				t.Fatalf("stream ended before the kill: %v", err)
			}
		}
		kill()
		var end error
		n := 0
		for {
			data, err := s.next()
			if err != nil {
				end = err
				break
			}
			var c completion
			if json.Unmarshal(data, &c) == nil && c.EOC != nil {
				t.Errorf("an eoc chunk after the backend died: %s", data)
			}
			n++
		}
		if errors.Is(end, errDone) {
			t.Fatalf("the stream ended with [DONE] after the backend died (%d chunks after the kill)", n)
		}
		if ctx.Err() != nil {
			t.Fatalf("the stream did not end within a minute of the kill")
		}
		t.Logf("stream cut %d chunks after the kill: %v", n, end)
		if s.resp.Trailer.Get("X-EOC-Receipt") != "" {
			t.Errorf("a cut stream carries a receipt trailer: %v", s.resp.Trailer)
		}
	}

	t.Run("runner killed", func(t *testing.T) {
		body := chatBody(prompt(), 50000, true)
		midStream(t, p.url, body, func() {
			pid := o.runnerPID(t)
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		})
		// The repeat is not a cache hit; the stage header comes with the
		// first chunk, which is all we need.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := openStream(ctx, p.url, body)
		if err != nil {
			t.Fatalf("repeat after the runner died: %v", err)
		}
		defer s.close()
		if st := s.resp.Header.Get("X-EOC-Stage"); st == "cache" || st == "" {
			t.Errorf("repeat of a cut stream: X-EOC-Stage = %q", st)
		}
		if _, err := s.next(); err != nil {
			t.Errorf("repeat after the runner died: %v", err)
		}
	})

	// The repeat above leaves its stream after one chunk, which can leave that Ollama with no slot
	// for the model (see ownPair): killing Ollama mid-stream, and calls with it down, run on a
	// second pair.
	o, p = ownPair(t, "failures-down")
	var killedBody map[string]any
	t.Run("ollama killed", func(t *testing.T) {
		killedBody = chatBody(prompt(), 50000, true)
		midStream(t, p.url, killedBody, o.kill)
	})

	t.Run("ollama down", func(t *testing.T) {
		o.kill() // in case the subtest above stopped early
		check := func(t *testing.T, resp *http.Response) {
			t.Helper()
			defer resp.Body.Close() //nolint:errcheck // read-only: a close error loses nothing
			raw, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("status %d, want 502: %s", resp.StatusCode, raw)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type = %q", ct)
			}
			var body map[string]map[string]any
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatalf("not JSON: %s", raw)
			}
			e, ok := body["error"]
			if !ok {
				t.Fatalf("no error object: %s", raw)
			}
			msg, _ := e["message"].(string)
			if !strings.Contains(msg, "local") {
				t.Errorf("error.message %q does not name the backend \"local\"", msg)
			}
			if typ, _ := e["type"].(string); typ == "" {
				t.Errorf("error.type is empty: %s", raw)
			}
			for _, k := range []string{"param", "code"} {
				if _, ok := e[k]; !ok {
					t.Errorf("error has no %q key: %s", k, raw)
				}
			}
		}
		ctx := context.Background()
		// The request cut above must not have been cached: now it is a 502.
		resp, err := post(ctx, p.url, killedBody)
		if err != nil {
			t.Fatal(err)
		}
		check(t, resp)
		resp, err = post(ctx, p.url, chatBody(prompt(), 8, false))
		if err != nil {
			t.Fatal(err)
		}
		check(t, resp)

		_, err = goOpenAI(p.url).CreateChatCompletion(ctx, goopenai.ChatCompletionRequest{
			Model: model, Messages: []goopenai.ChatCompletionMessage{{Role: "user", Content: prompt()}}, MaxTokens: 4, //nolint:staticcheck // SA1019: max_tokens is what most clients still send
		})
		var ge *goopenai.APIError
		if !errors.As(err, &ge) || ge.HTTPStatusCode != http.StatusBadGateway || !strings.Contains(ge.Message, "local") {
			t.Errorf("go-openai error = %#v", err)
		}
		c := openaiGo(p.url)
		_, err = c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
			Model: model, Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(prompt())}, MaxTokens: oai.Int(4),
		})
		var oe *oai.Error
		if !errors.As(err, &oe) || oe.StatusCode != http.StatusBadGateway || !strings.Contains(oe.Message, "local") {
			t.Errorf("openai-go error = %v", err)
		}
	})
}

// TestThroughput logs tokens per second directly against Ollama and through
// the proxy, in the same run, and the proxy's added time to first token. It
// asserts nothing about speed.
func TestThroughput(t *testing.T) {
	const (
		rounds    = 8
		maxTokens = 128
	)
	type side struct {
		ttft   []time.Duration
		tokens int
		wall   time.Duration
	}
	var direct, proxied side
	one := func(sd *side, base string) {
		s := readStream(t, base, chatBody(prompt(), maxTokens, true))
		if !s.done {
			t.Fatalf("%s: stream ended without [DONE]: %v", base, s.err)
		}
		_, n := s.usage(t)
		sd.ttft = append(sd.ttft, s.ttft)
		sd.tokens += n
		sd.wall += s.total
	}
	// Warm both paths, then alternate so noise hits both alike.
	one(&side{}, env.ollama.url)
	one(&side{}, env.proxy.url)
	for range rounds {
		one(&direct, env.ollama.url)
		one(&proxied, env.proxy.url)
	}
	median := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	rate := func(sd side) float64 { return float64(sd.tokens) / sd.wall.Seconds() }
	md, mp := median(direct.ttft), median(proxied.ttft)
	figure("streaming, %d calls x max_tokens %d: direct %.0f tok/s, through proxy %.0f tok/s (wall, incl. prompt)", rounds, maxTokens, rate(direct), rate(proxied))
	figure("time to first token (median): direct %s, through proxy %s, added %s",
		md.Round(10*time.Microsecond), mp.Round(10*time.Microsecond), (mp - md).Round(10*time.Microsecond))

	// Ollama's own eval rate, from /api/chat.
	stream := false
	var evalCount int
	var evalDur time.Duration
	t0 := time.Now()
	const native = 20
	for range native {
		err := env.ollama.client().Chat(context.Background(), &api.ChatRequest{
			Model:    model,
			Messages: []api.Message{{Role: "user", Content: prompt()}},
			Stream:   &stream,
			Options:  map[string]any{"num_predict": maxTokens},
		}, func(r api.ChatResponse) error {
			evalCount += r.EvalCount
			evalDur += r.EvalDuration
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wall := time.Since(t0)
	figure("/api/chat, %d calls x num_predict %d: eval %.0f tok/s (eval_count/eval_duration), %.0f tok/s wall, %s per call",
		native, maxTokens, float64(evalCount)/evalDur.Seconds(), float64(evalCount)/wall.Seconds(), (wall / native).Round(100*time.Microsecond))
	figures.Lock()
	for _, l := range figures.lines {
		t.Log(l)
	}
	figures.Unlock()
}

// TestDevOllama checks the dev Ollama that scripts/dev-ollama.sh started,
// when EOC_OLLAMA_HOST names one: both models there, and /api/embed working.
func TestDevOllama(t *testing.T) {
	host := os.Getenv("EOC_OLLAMA_HOST")
	if host == "" {
		t.Skip("EOC_OLLAMA_HOST not set")
	}
	if !strings.Contains(host, "://") {
		host = "http://" + host
	}
	u, err := url.Parse(host)
	if err != nil {
		t.Fatal(err)
	}
	c := api.NewClient(u, http.DefaultClient)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := c.List(ctx)
	if err != nil {
		t.Fatalf("dev Ollama at %s: %v", host, err)
	}
	var names []string
	for _, m := range list.Models {
		names = append(names, m.Name)
	}
	for _, want := range []string{tinymodel.ChatName + ":latest", tinymodel.EmbedName + ":latest"} {
		if !slices.Contains(names, want) {
			t.Errorf("dev Ollama has %v, want %s", names, want)
		}
	}
	emb, err := c.Embed(ctx, &api.EmbedRequest{Model: tinymodel.EmbedName, Input: []string{"hello", "world"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(emb.Embeddings) != 2 || len(emb.Embeddings[0]) != tinymodel.Width {
		t.Fatalf("embeddings: %d vectors of %d", len(emb.Embeddings), len(emb.Embeddings[0]))
	}
	if slices.Equal(emb.Embeddings[0], emb.Embeddings[1]) {
		t.Error("two inputs embed the same")
	}
}
