// Package redistest starts a real redis-server for tests, on a free loopback port.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server process.
type Server struct {
	URL  string
	Addr string
	cmd  *exec.Cmd
	port int
	t    testing.TB
}

// Start runs redis-server (Debian's /usr/bin/redis-server, or the one on PATH) until the test
// ends. Without the binary it skips the test, unless CI=true, where it fails.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed (apt-get install redis-server); CI needs it")
		}
		t.Skip("redis-server is not installed: skipping the tests against a real Redis (apt-get install redis-server)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), port: port, t: t}
	s.URL = "redis://" + s.Addr + "/0"
	s.start(bin)
	t.Cleanup(s.Kill)
	return s
}

func (s *Server) start(bin string) {
	s.t.Helper()
	s.cmd = exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(s.port), "--save", "", "--appendonly", "no",
		"--dir", s.t.TempDir(), "--loglevel", "warning")
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if s.ping() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Kill()
	s.t.Fatalf("redis-server did not answer on %s", s.Addr)
}

// ping sends PING over a raw connection.
func (s *Server) ping() bool {
	c, err := net.DialTimeout("tcp", s.Addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := fmt.Fprint(c, "PING\r\n"); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

// Kill stops the server (SIGKILL) and waits for it; it is safe to call more than once.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Hang stops the server (SIGSTOP) without closing its connections: it reads nothing and
// answers nothing until Resume. The test's cleanup resumes it before killing it.
func (s *Server) Hang() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(s.Resume)
}

// Resume lets a hung server go on (SIGCONT); it is safe to call more than once.
func (s *Server) Resume() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Restart starts a fresh, empty server on the same port after Kill.
func (s *Server) Restart() {
	s.t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		s.t.Fatal(err)
	}
	s.start(bin)
}
