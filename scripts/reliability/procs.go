//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a server the benchmark started as its own process.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	log  string        // where its output goes, when a file
}

// children are the running servers; stopAll ends them, newest first.
var children struct {
	sync.Mutex
	list    []*proc
	stopped bool
}

// startProc starts cmd as a child that dies with the benchmark (SIGKILL on the parent's death,
// SIGTERM then SIGKILL from stopAll on any ordinary exit or signal).
func startProc(name string, cmd *exec.Cmd) (*proc, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	children.Lock()
	defer children.Unlock()
	if children.stopped {
		return nil, errors.New("stopping")
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	children.list = append(children.list, p)
	return p, nil
}

// stop ends p: SIGTERM, then SIGKILL after two seconds.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(2 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stopAll ends every child still running. final forbids new ones (on a signal or a failure).
func stopAll(final bool) {
	children.Lock()
	list := children.list
	children.list = nil
	if final {
		children.stopped = true
	}
	children.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		list[i].stop()
	}
}

var (
	failOnce sync.Once
	// scratch is the temporary directory removed on any exit, "" to keep it.
	scratch string
)

// fatalf stops every child, removes the scratch directory and exits with status 1. Safe from
// any goroutine.
func fatalf(format string, a ...any) {
	failOnce.Do(func() {
		fmt.Fprintf(os.Stderr, "reliability: FAIL: "+format+"\n", a...)
		stopAll(true)
		if scratch != "" {
			_ = os.RemoveAll(scratch)
		}
		os.Exit(1)
	})
	select {} // another goroutine is exiting
}

// onSignal stops the children and exits when the benchmark is interrupted.
func onSignal() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigs
		fatalf("interrupted by %v", s)
	}()
}

// startSelf re-executes this binary as one of its server roles and returns its address, which the
// child prints on its first line once it is listening.
func startSelf(role string, args ...string) (*proc, string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(exe, append([]string{role}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	cmd.Stderr = os.Stderr
	p, err := startProc(role, cmd)
	if err != nil {
		return nil, "", err
	}
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(out)
		line, _ := r.ReadString('\n')
		lines <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, r)
	}()
	select {
	case addr := <-lines:
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, "", fmt.Errorf("%s did not report its address (got %q)", role, addr)
		}
		return p, "http://" + addr, nil
	case <-time.After(10 * time.Second):
		return nil, "", fmt.Errorf("%s: no address within 10s", role)
	}
}

// freePort is a loopback port free a moment ago, for a server that takes its address from config.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// waitReady polls url until it answers 200, the process exits, or 30 s pass.
func waitReady(p *proc, url string) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("%s exited before it was ready%s", p.name, p.logTail())
		}
		resp, err := c.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready at %s within 30s (last: %s)%s", p.name, url, last, p.logTail())
}

// logTail is the end of p's log file, for error messages.
func (p *proc) logTail() string {
	if p.log == "" {
		return ""
	}
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\n--- " + p.log + " (tail) ---\n" + string(bytes.TrimSpace(b))
}

// buildEOC builds eoc-proxy from the module at root into dir.
func buildEOC(ctx context.Context, root, dir string) (string, error) {
	bin := dir + "/eoc-proxy"
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/eoc-proxy")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/eoc-proxy: %w", err)
	}
	return bin, nil
}

// serveChild is a child process's life: listen on a loopback port, tell the parent which on the
// first line of stdout, serve until SIGTERM or SIGINT. It returns the exit code.
func serveChild(h http.Handler) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "reliability child:", err)
		return 1
	}
	srv := &http.Server{Handler: h}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	fmt.Println(ln.Addr().String())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "reliability child:", err)
		return 1
	}
	return 0
}
