// Package redistest gives tests real Redis servers: the one `make test`
// starts (scripts/redis.sh), and servers of a test's own, started from
// the same binary and stopped when the test wants — to see what a gateway
// does while its store is gone. Neither is ever skipped for: a test that
// needs Redis and cannot have it fails.
package redistest

import (
	"context"
	"fmt"
	"github.com/toolgate/toolgate/internal/brokertest"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/toolgate/toolgate/internal/eventually"
)

// URL is the shared server's URL: TOOLGATE_REDIS_URL, which make test
// sets, else redis://127.0.0.1:6379 (scripts/redis.sh up's default).
func URL() string {
	if u := os.Getenv("TOOLGATE_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379"
}

// Require fails the test when the shared server does not answer, and
// returns its URL.
func Require(tb testing.TB) string {
	tb.Helper()
	u := URL()
	if err := ping(tb.Context(), u); err != nil {
		tb.Fatalf("Redis is required and does not answer at %s: %v (start it with `scripts/redis.sh up`, or run `make test`)", u, err)
	}
	return u
}

func ping(ctx context.Context, url string) error {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// Server is a Redis server of one test's own.
type Server struct {
	URL  string
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// binary is redis-server: TOOLGATE_REDIS_SERVER (make test sets it from
// scripts/redis.sh path), else the one on PATH.
func binary(tb testing.TB) string {
	tb.Helper()
	if b := os.Getenv("TOOLGATE_REDIS_SERVER"); b != "" {
		return b
	}
	b, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redis-server is required: set TOOLGATE_REDIS_SERVER or install it (scripts/redis.sh path): %v", err)
	}
	return b
}

// Start runs a redis-server of the test's own on a free port of
// 127.0.0.1, keeping nothing on disk, and waits until it answers. The
// test's cleanup stops it.
func Start(tb testing.TB) *Server {
	tb.Helper()
	port := freePort(tb)
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), done: make(chan struct{})}
	s.URL = "redis://" + s.Addr
	s.cmd = exec.Command(binary(tb), "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--dir", tb.TempDir())
	if err := s.cmd.Start(); err != nil {
		tb.Fatalf("starting redis-server: %v", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	tb.Cleanup(s.Stop)
	eventually.True(tb, 30*time.Second, "redis-server answers on "+s.Addr, func() bool {
		select {
		case <-s.done:
			tb.Fatalf("redis-server on %s exited during start-up", s.Addr)
		default:
		}
		return ping(context.Background(), s.URL) == nil
	})
	return s
}

// Stop kills the server and waits until it has exited.
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Pause stops the server's process (SIGSTOP) until Resume: it keeps its
// port and its connections, takes new ones into the kernel's backlog and
// answers nothing — a Redis stalled by its machine, a fork or a swap
// storm. What clients write meanwhile waits in the sockets and runs when
// the server resumes.
func (s *Server) Pause(tb testing.TB) {
	tb.Helper()
	s.signal(tb, syscall.SIGSTOP)
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume(tb testing.TB) {
	tb.Helper()
	s.signal(tb, syscall.SIGCONT)
}

func (s *Server) signal(tb testing.TB, sig syscall.Signal) {
	tb.Helper()
	select {
	case <-s.done:
		tb.Fatalf("%s has exited: cannot send it %v", s, sig)
	default:
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		tb.Fatalf("%s: sending %v: %v", s, sig, err)
	}
}

// Refused is the URL of a Redis nobody serves: a port of 127.0.0.1 that
// was free a moment ago, so that dialing it is refused at once.
func Refused(tb testing.TB) string {
	tb.Helper()
	return "redis://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(tb)))
}

func freePort(tb testing.TB) int {
	tb.Helper()
	return brokertest.FreePorts(tb, 1)[0]
}

// String is the server's address.
func (s *Server) String() string { return fmt.Sprintf("redis-server %s", s.Addr) }
