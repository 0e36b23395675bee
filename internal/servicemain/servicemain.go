// Package servicemain is the shared main of the example tool services:
// flags and environment, logging, and running a toolservice until a signal.
package servicemain

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/toolservice"
)

// Run parses args (without the program name) on top of defaults, runs the
// service with h until ctx ends, and returns the process exit code: 0, 1
// (could not run), 2 (bad flags) or ExitAbandoned.
func Run(ctx context.Context, name string, args []string, defaults toolservice.Config, h toolservice.Handler) int {
	cfg := defaults
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.StringVar(&cfg.PulsarURL, "pulsar-url", envOr("TOOLGATE_PULSAR_URL", transport.DefaultPulsarURL), "Pulsar broker URL (env TOOLGATE_PULSAR_URL)")
	tokenFile := fs.String("pulsar-token-file", os.Getenv("TOOLGATE_PULSAR_TOKEN_FILE"),
		"file holding a Pulsar authentication token, re-read on every connection (env TOOLGATE_PULSAR_TOKEN_FILE)")
	tlsCA := fs.String("pulsar-tls-ca", os.Getenv("TOOLGATE_PULSAR_TLS_CA"), "CA to trust for pulsar+ssl:// URLs (env TOOLGATE_PULSAR_TLS_CA)")
	fs.StringVar(&cfg.ID, "id", defaults.ID, "service id; the request subscription is <id>-request")
	fs.StringVar(&cfg.Topic, "topic", defaults.Topic, "short topic name: non-persistent://tg/request/<topic>")
	fs.IntVar(&cfg.MaxConcurrency, "concurrency", max(defaults.MaxConcurrency, toolservice.DefaultMaxConcurrency), "calls handled at once")
	fs.DurationVar(&cfg.StopGrace, "stop-grace", cmp.Or(defaults.StopGrace, toolservice.DefaultStopGrace),
		"on SIGTERM, how long calls in flight may finish before they are cancelled; the process exits at most 2 s later (toolservice.StopMargin), whatever the broker does")
	announce := fs.Bool("announce", envBool("TOOLGATE_ANNOUNCE", defaults.Announce != nil),
		"announce the service and its tools to gateways on start, withdraw them on stop (env TOOLGATE_ANNOUNCE)")
	announceTopic := fs.String("announce-topic", envOr("TOOLGATE_ANNOUNCE_TOPIC", toolservice.DefaultAnnounceTopic),
		"topic to announce on (env TOOLGATE_ANNOUNCE_TOPIC)")
	announceLease := fs.Duration("announce-lease", toolservice.DefaultLease,
		"how long gateways hold this replica's announcement without a renewal; it renews every third of it, and after a crash its tools are listed at most this long")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	switch {
	case !*announce:
		cfg.Announce = nil
	case cfg.Announce == nil:
		fmt.Fprintf(os.Stderr, "%s: -announce: this service has no tools to announce\n", name)
		return 2
	default:
		a := *cfg.Announce
		a.Topic = *announceTopic
		a.Lease = *announceLease
		cfg.Announce = &a
	}
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
	err = svc.Run(ctx)
	switch {
	case errors.Is(err, toolservice.ErrAbandoned):
		// Logged by the service, once, with what it left.
		return ExitAbandoned
	case err != nil:
		cfg.Logger.Error(name+" failed", "err", err)
		return 1
	}
	return 0
}

// ExitAbandoned is the exit status of a service that stopped at the end
// of its stop grace with closes still waiting for a broker that did not
// answer (toolservice.ErrAbandoned); 1 is a service that could not run, 2
// bad flags.
const ExitAbandoned = 3

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envBool(k string, def bool) bool {
	switch strings.ToLower(os.Getenv(k)) {
	case "1", "true", "yes", "on":
		return true
	case "0", "false", "no", "off":
		return false
	}
	return def
}
