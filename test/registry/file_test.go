package registry

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
)

const goodRegistry = `tool-service:
  s: {request-queue: "non-persistent://tg/request/file-s", response-queue: "non-persistent://tg/response/file-s"}
tool:
  file-tool: {type: tool-service, service: s}
`

// What is not a regular file, or is too large, in the registry file's place
// is refused on reload with a clear error, memory stays bounded, the last
// good registry keeps serving, and the gateway still reloads and stops.
func TestRegistryFileRefusals(t *testing.T) {
	brokertest.RequirePulsar(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "registry.yaml")
	if err := os.WriteFile(path, []byte(goodRegistry), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGatewayWith(t, "--registry", path, "--announcements=false")
	g.waitReady(t, 60*time.Second)
	replace := func(make func() error) {
		t.Helper()
		if err := os.RemoveAll(path); err != nil {
			t.Fatal(err)
		}
		if err := make(); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name, want string
		make       func() error
	}{
		{"symlink to /dev/zero", "not a regular file", func() error { return os.Symlink("/dev/zero", path) }},
		{"named pipe", "not a regular file", func() error { return syscall.Mkfifo(path, 0o600) }},
		{"1 GB file", "file too large", func() error {
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			return errors.Join(f.Truncate(1<<30), f.Close())
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			replace(c.make)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			err := g.gw.ReloadRegistry()
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("reload: %v, want an error saying %q", err, c.want)
			}
			t.Logf("refused in %v, %d bytes allocated: %v", took, after.TotalAlloc-before.TotalAlloc, err)
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
				t.Errorf("the refused reload allocated %d bytes", grew)
			}
			code, d := g.ready(t)
			if code != http.StatusOK || g.tools(t) != 1 || !strings.Contains(fmt.Sprint(d["registry_last_error"]), c.want) {
				t.Fatalf("/readyz %d, tools %d, last error %v; want 200, the last good registry, the error", code, g.tools(t), d["registry_last_error"])
			}
		})
	}
	// A large good file is taken, by the watcher, as a config manager
	// writes it (a new file renamed into place).
	big := bigRegistry(100000)
	tmp := filepath.Join(dir, "registry.yaml.new")
	if err := os.WriteFile(tmp, big, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	took := eventually.True(t, 5*time.Minute, "100,000 tools served", func() bool { return g.tools(t) == 100000 })
	t.Logf("100,000 tools (%.1f MB of YAML) served %v after the file was renamed into place", float64(len(big))/1e6, took)
	start := time.Now()
	if err := g.gw.ReloadRegistry(); err != nil { // SIGHUP: the same file again
		t.Fatal(err)
	}
	t.Logf("reloaded unchanged in %v", time.Since(start))
	// The watcher met the pipe and the rest, and the gateway still stops.
	if _, d := g.ready(t); fmt.Sprint(d["registry_last_error"]) != "" {
		t.Fatalf("registry_last_error %v after a good load, want none", d["registry_last_error"])
	}
	replace(func() error { return syscall.Mkfifo(path, 0o600) })
	eventually.True(t, 30*time.Second, "the watcher refused the pipe", func() bool {
		_, d := g.ready(t)
		return strings.Contains(fmt.Sprint(d["registry_last_error"]), "not a regular file")
	})
	stopped := make(chan error, 1)
	go func() { stopped <- g.stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the gateway did not stop with a named pipe as its registry file")
	}
}

// bigRegistry is a registry file of n tools over n/100+1 services.
func bigRegistry(n int) []byte {
	var sb strings.Builder
	svcs := n/100 + 1
	sb.WriteString("tool-service:\n")
	for i := range svcs {
		fmt.Fprintf(&sb, "  big-%d:\n    request-queue: non-persistent://tg/request/big-%d\n    response-queue: non-persistent://tg/response/big-%d\n    config-params: [{name: collection}]\n", i, i, i)
	}
	sb.WriteString("tool:\n")
	for i := range n {
		fmt.Fprintf(&sb, "  tool-%d:\n    type: tool-service\n    description: Tool number %d\n    service: big-%d\n    collection: c%d\n    arguments:\n      - {name: question, type: string, description: The question}\n", i, i, i%svcs, i)
	}
	return []byte(sb.String())
}
