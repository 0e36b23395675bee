package registry

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
)

// python returns the Python of the project's virtualenv: TOOLGATE_VENV,
// else what scripts/pyenv.sh prints (it installs the venv on first use).
func python(t *testing.T) string {
	t.Helper()
	venv := os.Getenv("TOOLGATE_VENV")
	if venv == "" {
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "pyenv.sh"))
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("scripts/pyenv.sh: %v\n%s", err, stderr.String())
		}
		venv = strings.TrimSpace(string(out))
	}
	return filepath.Join(venv, "bin", "python")
}

// tombstonePy sends Pulsar's standard tombstone — a message with a key and
// a null value — as any Python service or operator would.
const tombstonePy = `
import sys, pulsar
c = pulsar.Client(sys.argv[1], operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
p = c.create_producer(sys.argv[2], batching_enabled=False)
p.send(None, partition_key=sys.argv[3])
p.flush()
c.close()
`

// A null-value tombstone sent by the Python client withdraws the announced
// service it is keyed by.
func TestPythonTombstoneWithdraws(t *testing.T) {
	topic := "persistent://tg/config/" + brokertest.UniqueTopic("ann")
	_, p := producer(t, topic)
	py := python(t)
	id := brokertest.UniqueTopic("tomb")
	if _, err := p.Send(t.Context(), &pulsar.ProducerMessage{Key: id, Payload: announcement(id, "non-persistent://tg/response/"+id)}); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, topic)
	g.waitReady(t, 60*time.Second)
	eventually.True(t, 30*time.Second, "the announced tool served", func() bool { return g.tools(t) == 1 })

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", tombstonePy, brokertest.PulsarURL(), topic, id)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	sent := time.Now()
	eventually.True(t, 30*time.Second, "the service withdrawn by the tombstone", func() bool { return g.tools(t) == 0 })
	t.Logf("withdrawn %v after the Python client's tombstone was sent", time.Since(sent))
}
