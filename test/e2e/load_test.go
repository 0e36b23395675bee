package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/toolservice"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestManyConcurrentCallsToReplicas: 2,000 concurrent calls with distinct
// arguments through the gateway to two echo-service replicas sharing the
// topic; every caller gets exactly its own reply.
func TestManyConcurrentCallsToReplicas(t *testing.T) {
	// A second replica of the echo service, on the same shared subscription.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	replica, err := toolservice.New(toolservice.Config{ID: "echo-service", Topic: env.echoTopic, PulsarURL: brokertest.PulsarURL(), MaxConcurrency: 512, Logger: log}, echo.Handle)
	if err != nil {
		t.Fatal(err)
	}
	brokertest.RunService(t, "echo replica", replica, 0)
	if err := waitConsumers("non-persistent://tg/request/"+env.echoTopic, 2, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	const n = 2000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := fmt.Sprintf("caller-%d-%x", i, i*7919)
			args, _ := structpb.NewStruct(map[string]any{"msg": want})
			cctx, ccancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer ccancel()
			r, err := env.grpc.InvokeTool(cctx, &toolgatev1.InvokeToolRequest{Name: "echo", Arguments: args})
			switch {
			case err != nil:
				errs <- fmt.Errorf("%s: %w", want, err)
			case r.GetOutput() != want:
				errs <- fmt.Errorf("got %q, want %q", r.GetOutput(), want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	var failed []string
	for err := range errs {
		failed = append(failed, err.Error())
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d calls failed, e.g. %s", len(failed), n, failed[0])
	}
}

// TestThousandChunkStream: a 1,000-chunk reply arrives complete and in
// order over gRPC and over REST.
func TestThousandChunkStream(t *testing.T) {
	t.Parallel()
	const n = 1000
	want := func(i int) string {
		if i == n-1 {
			return fmt.Sprint(i)
		}
		return fmt.Sprintf("%d,", i)
	}
	args, _ := structpb.NewStruct(map[string]any{"mode": "stream", "n": float64(n)})
	st, err := env.grpc.StreamTool(t.Context(), &toolgatev1.StreamToolRequest{Name: "echo", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			if i != n {
				t.Fatalf("gRPC stream ended after %d chunks, want %d", i, n)
			}
			break
		}
		if err != nil {
			t.Fatalf("gRPC chunk %d: %v", i, err)
		}
		if m.GetOutput() != want(i) || m.GetIndex() != int64(i) || m.GetLast() != (i == n-1) {
			t.Fatalf("gRPC chunk %d = %v, want %q", i, m, want(i))
		}
	}

	resp, err := http.Post(env.httpBase+"/v1/tools/echo:stream", "application/json", strings.NewReader(fmt.Sprintf(`{"arguments": {"mode": "stream", "n": %d}}`, n)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for i := 0; ; i++ {
		var line struct {
			Output *string `json:"output"`
			Index  string  `json:"index"`
			Last   bool    `json:"last"`
			Code   *int    `json:"code"`
		}
		if err := dec.Decode(&line); err == io.EOF {
			if i != n {
				t.Fatalf("REST stream ended after %d chunks, want %d", i, n)
			}
			break
		} else if err != nil {
			t.Fatalf("REST line %d: %v", i, err)
		}
		if line.Output == nil || *line.Output != want(i) || line.Index != fmt.Sprint(i) || line.Last != (i == n-1) || line.Code != nil {
			t.Fatalf("REST line %d = %+v, want chunk %q", i, line, want(i))
		}
	}
}

func waitConsumers(topic string, n int, d time.Duration) error {
	return eventually.Within(d, func() error {
		if got := brokertest.Subscriptions(topic); got < n {
			return fmt.Errorf("%d of %d consumers on %s", got, n, topic)
		}
		return nil
	})
}
