//go:build linux

// Package procs runs the measuring commands' servers as child processes that die with them.
//
// The commands (scripts/benchout, scripts/reliability) start, stop and wait for them until
// ready, re-execute themselves as one of their server roles, and exit on a failure or a signal
// with every child stopped.
package procs

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

// Proc is a server the command started as its own process.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Log  string        // where its output goes, when a file (for LogTail)
	done chan struct{} // closed when the process has exited
}

// children are the running servers; StopAll ends them, newest first.
var children struct {
	sync.Mutex
	list    []*Proc
	stopped bool
}

// Start starts cmd as a child that dies with the command (SIGKILL on the parent's death,
// SIGTERM then SIGKILL from StopAll on any ordinary exit or signal).
func Start(name string, cmd *exec.Cmd) (*Proc, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	children.Lock()
	defer children.Unlock()
	if children.stopped {
		return nil, errors.New("stopping")
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	children.list = append(children.list, p)
	return p, nil
}

// Stop ends p: SIGTERM, then SIGKILL after two seconds.
func (p *Proc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(2 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// Done is closed when p has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether p has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// StopAll ends every child still running. final forbids new ones (on a signal or a failure).
func StopAll(final bool) {
	children.Lock()
	list := children.list
	children.list = nil
	if final {
		children.stopped = true
	}
	children.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		list[i].Stop()
	}
}

var (
	failOnce sync.Once
	// prefix starts the lines Fatalf and ServeChild write: the command's name.
	prefix = "procs"
	// scratch is the temporary directory removed on any exit, "" to keep it.
	scratch string
)

// Init names the command in the lines Fatalf and ServeChild write (name: "benchout",
// "reliability") and makes an interrupt (SIGINT, SIGTERM, SIGHUP) stop every child and exit.
func Init(name string) {
	prefix = name
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigs
		Fatalf("interrupted by %v", s)
	}()
}

// RemoveOnExit makes Fatalf remove dir (the command's scratch directory); "" keeps it.
func RemoveOnExit(dir string) { scratch = dir }

// Fatalf stops every child, removes the scratch directory and exits with status 1. Safe from
// any goroutine.
func Fatalf(format string, a ...any) {
	failOnce.Do(func() {
		fmt.Fprintf(os.Stderr, prefix+": FAIL: "+format+"\n", a...)
		StopAll(true)
		if scratch != "" {
			_ = os.RemoveAll(scratch)
		}
		os.Exit(1)
	})
	select {} // another goroutine is exiting
}

// StartSelf re-executes this binary as one of its server roles and returns its address, which the
// child prints on its first line once it is listening.
func StartSelf(role string, args ...string) (*Proc, string, error) {
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
	p, err := Start(role, cmd)
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

// FreePort is a loopback port free a moment ago, for a server that takes its address from config.
func FreePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// WaitReady polls url until it answers 200, the process exits, or 30 s pass.
func WaitReady(p *Proc, url string) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		if p.Exited() {
			return fmt.Errorf("%s exited before it was ready%s", p.Name, p.LogTail())
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
	return fmt.Errorf("%s not ready at %s within 30s (last: %s)%s", p.Name, url, last, p.LogTail())
}

// LogTail is the end of p's log file, for error messages.
func (p *Proc) LogTail() string {
	if p.Log == "" {
		return ""
	}
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\n--- " + p.Log + " (tail) ---\n" + string(bytes.TrimSpace(b))
}

// BuildEOC builds eoc-proxy from the module at root into dir.
func BuildEOC(ctx context.Context, root, dir string) (string, error) {
	bin := dir + "/eoc-proxy"
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/eoc-proxy")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/eoc-proxy: %w", err)
	}
	return bin, nil
}

// ServeChild is a child process's life: listen on a loopback port, tell the parent which on the
// first line of stdout, serve until SIGTERM or SIGINT. It returns the exit code.
func ServeChild(h http.Handler) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, prefix+" child:", err)
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
		fmt.Fprintln(os.Stderr, prefix+" child:", err)
		return 1
	}
	return 0
}
