// Command gateway serves tool services over gRPC and REST. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolgate/toolgate/internal/app"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx))
}

func run(ctx context.Context) int {
	if len(os.Args) > 1 && os.Args[1] == "audit" {
		return runAudit(os.Args[2:], os.Stdin, os.Stdout, os.Stderr)
	}
	if version.Requested(os.Args[1:]) {
		fmt.Println(version.Line("gateway"))
		return 0
	}
	cfg, err := config.Parse(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		return 2
	}
	log := app.NewLogger(os.Stderr, cfg.Log.Format, cfg.Log.Level)
	g, err := app.New(cfg, log)
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	go reloadOnHUP(ctx, g)
	err = g.Run(ctx)
	switch {
	case errors.Is(err, app.ErrAbandoned):
		// Logged by the gateway, once, with what it left.
		return exitAbandoned
	case err != nil:
		log.Error("stopped with an error", "err", err)
		return 1
	}
	return 0
}

// The exit statuses: 0 stopped cleanly, 1 could not start or a server
// failed, 2 bad flags, exitAbandoned stopped at the end of its shutdown
// with closes still waiting for a broker that did not answer
// (app.ErrAbandoned).
const exitAbandoned = 3

// reloadOnHUP reloads the registry on every SIGHUP until ctx ends.
func reloadOnHUP(ctx context.Context, g *app.Gateway) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = g.ReloadRegistry() // logged and shown in /readyz by the gateway
		}
	}
}
