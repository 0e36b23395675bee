// Command joke-service is an example tool service built on the toolservice
// SDK. It answers like TrustGraph's Python joke service: the joke's style
// comes from the tool's config ("style"), its subject from the call's
// arguments ("topic").
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolgate/toolgate/internal/jokes"
	"github.com/toolgate/toolgate/toolservice"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx))
}

func run(ctx context.Context) int {
	fs := flag.NewFlagSet("joke-service", flag.ContinueOnError)
	pulsarURL := fs.String("pulsar-url", envOr("TOOLGATE_PULSAR_URL", "pulsar://127.0.0.1:6650"), "Pulsar broker URL")
	id := fs.String("id", "joke-service", "service id; the request subscription is <id>-request")
	topic := fs.String("topic", "joke", "short topic name: non-persistent://tg/request/<topic>")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	svc, err := toolservice.New(toolservice.Config{ID: *id, Topic: *topic, PulsarURL: *pulsarURL, Logger: log}, jokes.Handle)
	if err != nil {
		fmt.Fprintln(os.Stderr, "joke-service:", err)
		return 2
	}
	if err := svc.Run(ctx); err != nil {
		log.Error("joke-service failed", "err", err)
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
