// Command echo-service is a tool service for tests and benchmarks, built on
// the toolservice SDK. See internal/echo for what it answers.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/toolservice"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx))
}

func run(ctx context.Context) int {
	fs := flag.NewFlagSet("echo-service", flag.ContinueOnError)
	pulsarURL := fs.String("pulsar-url", envOr("TOOLGATE_PULSAR_URL", "pulsar://127.0.0.1:6650"), "Pulsar broker URL")
	id := fs.String("id", "echo-service", "service id; the request subscription is <id>-request")
	topic := fs.String("topic", "echo", "short topic name: non-persistent://tg/request/<topic>")
	conc := fs.Int("concurrency", 256, "calls handled at once")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	svc, err := toolservice.New(toolservice.Config{ID: *id, Topic: *topic, PulsarURL: *pulsarURL, MaxConcurrency: *conc, Logger: log}, echo.Handle)
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo-service:", err)
		return 2
	}
	if err := svc.Run(ctx); err != nil {
		log.Error("echo-service failed", "err", err)
		return 1
	}
	return 0
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
