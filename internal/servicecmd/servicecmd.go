// Package servicecmd is the shared main of the example tool services:
// flags and environment, logging, and running a toolservice until a signal.
package servicecmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/toolgate/toolgate/toolservice"
)

// Run parses args (without the program name) on top of defaults, runs the
// service with h until ctx ends, and returns the process exit code.
func Run(ctx context.Context, name string, args []string, defaults toolservice.Config, h toolservice.Handler) int {
	cfg := defaults
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	def := "pulsar://127.0.0.1:6650"
	if v := os.Getenv("TOOLGATE_PULSAR_URL"); v != "" {
		def = v
	}
	fs.StringVar(&cfg.PulsarURL, "pulsar-url", def, "Pulsar broker URL (env TOOLGATE_PULSAR_URL)")
	tokenFile := fs.String("pulsar-token-file", os.Getenv("TOOLGATE_PULSAR_TOKEN_FILE"),
		"file holding a Pulsar authentication token, re-read on every connection (env TOOLGATE_PULSAR_TOKEN_FILE)")
	tlsCA := fs.String("pulsar-tls-ca", os.Getenv("TOOLGATE_PULSAR_TLS_CA"), "CA to trust for pulsar+ssl:// URLs (env TOOLGATE_PULSAR_TLS_CA)")
	fs.StringVar(&cfg.ID, "id", defaults.ID, "service id; the request subscription is <id>-request")
	fs.StringVar(&cfg.Topic, "topic", defaults.Topic, "short topic name: non-persistent://tg/request/<topic>")
	fs.IntVar(&cfg.MaxConcurrency, "concurrency", max(defaults.MaxConcurrency, 64), "calls handled at once")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	var opts []toolservice.Option
	if *tokenFile != "" {
		opts = append(opts, toolservice.WithTokenFile(*tokenFile))
	}
	if *tlsCA != "" {
		opts = append(opts, toolservice.WithTLSTrustCerts(*tlsCA))
	}
	svc, err := toolservice.New(cfg, h, opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 2
	}
	if err := svc.Run(ctx); err != nil {
		cfg.Logger.Error(name+" failed", "err", err)
		return 1
	}
	return 0
}
