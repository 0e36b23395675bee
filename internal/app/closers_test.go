package app

import (
	"context"
	"errors"
	"github.com/toolgate/toolgate/internal/brokertest"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/quota"
)

// The stack unwinds the last pushed first, runs each closing once, and
// hands on the errors, each naming what it closes.
func TestClosersUnwind(t *testing.T) {
	t.Parallel()
	var cl closers
	var order []string
	push := func(name string, err error) *closer {
		return cl.push(name, func(context.Context) error { order = append(order, name); return err })
	}
	push("first", nil)
	second := push("second", errors.New("boom"))
	push("third", nil)
	if err := second.run(t.Context()); err == nil || err.Error() != "second: boom" {
		t.Fatalf("run: %v, want the error named", err)
	}
	errs := cl.unwind(t.Context())
	if got := strings.Join(order, " "); got != "second third first" {
		t.Errorf("closed %q, want second (run before), then third and first", got)
	}
	if len(errs) != 0 {
		t.Errorf("unwind: %v, want none: second's error was its first run's", errs)
	}
	if errs := cl.unwind(t.Context()); len(errs) != 0 || len(order) != 3 {
		t.Errorf("a second unwind closed again: %v %v", order, errs)
	}
}

// A step of New that fails closes what the steps before it opened: the
// quotas' Redis client (opened first of all) is closed, and the
// listeners' ports are free again. Three steps fail: the registry (before
// the broker client and the listeners), the listeners (the HTTP port
// taken, after the gRPC one was opened) and the audit log (the last step).
func TestNewFailingClosesWhatItOpened(t *testing.T) {
	// Not parallel: it replaces openQuotaRedis.
	var opened []*quota.Redis
	openQuotaRedis = func(url string, timeout time.Duration) (*quota.Redis, error) {
		r, err := quota.NewRedis(url, timeout)
		if err == nil {
			opened = append(opened, r)
		}
		return r, err
	}
	t.Cleanup(func() { openQuotaRedis = quota.NewRedis })
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rules := write("quota.yaml", "rules:\n  - {name: r, users: [\"api-key:alice\"], tools: [echo], calls: 10, per: minute}\n")
	goodRegistry := write("good.yaml", "tool-service:\n  echo-service: {topic: echo}\ntool:\n  echo: {type: tool-service, service: echo-service}\n")
	badRegistry := write("bad.yaml", "tool:\n  echo: {type: tool-service, service: missing}\n")

	for _, c := range []struct {
		name, failing string
		args          func(grpcAddr, httpAddr string) []string
		// taken is a port kept busy for the step to fail
		taken bool
	}{
		{"registry", "registry", func(string, string) []string { return []string{"--registry", badRegistry} }, false},
		{"listeners", "HTTP listener", func(string, string) []string { return []string{"--registry", goodRegistry} }, true},
		{"audit log", "audit log", func(string, string) []string { return []string{"--registry", goodRegistry, "--audit", dir} }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			opened = nil
			grpcAddr, httpAddr, adminAddr := freeAddr(t), freeAddr(t), freeAddr(t)
			if c.taken {
				l, err := net.Listen("tcp", httpAddr)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
			}
			args := append([]string{"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--admin-addr", adminAddr,
				"--pulsar-url", "pulsar://127.0.0.1:1",
				"--allow-anonymous", "--quota-rules", rules, "--quota-redis-url", "redis://127.0.0.1:1"}, c.args(grpcAddr, httpAddr)...)
			cfg, err := config.Parse(args, func(string) string { return "" }, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			g, err := New(cfg, slog.New(slog.DiscardHandler))
			if err == nil {
				t.Fatalf("New succeeded: %v", g)
			}
			if !strings.Contains(err.Error(), c.failing) {
				t.Fatalf("New: %v, want the %s failing", err, c.failing)
			}
			if len(opened) != 1 {
				t.Fatalf("%d quota stores opened, want 1", len(opened))
			}
			// A closed client says so at once; an open one would dial
			// 127.0.0.1:1 and be refused.
			if err := opened[0].Ping(t.Context()); !errors.Is(err, redis.ErrClosed) {
				t.Errorf("the quotas' Redis client after New failed: %v, want it closed (%v)", err, redis.ErrClosed)
			}
			addrs := []string{grpcAddr, adminAddr}
			if !c.taken {
				addrs = append(addrs, httpAddr)
			}
			for _, a := range addrs {
				l, err := net.Listen("tcp", a)
				if err != nil {
					t.Errorf("port %s after New failed: %v, want it free", a, err)
					continue
				}
				_ = l.Close()
			}
		})
	}
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	return brokertest.FreeAddr(t)
}
