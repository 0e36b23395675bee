// Command gatewayprof is cmd/gateway with net/http/pprof on a separate
// listener, for the benchmark's profiling step (bench/run.sh):
//
//	gatewayprof --pprof-addr 127.0.0.1:16060 [gateway flags...]
//
// Everything but --pprof-addr and --mutex-fraction goes to the gateway's own
// flag parser, so it runs exactly the production composition root
// (internal/app).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof/ on http.DefaultServeMux
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/internal/app"
	"github.com/toolgate/toolgate/internal/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

func run(ctx context.Context, args []string) int {
	pprofAddr := "127.0.0.1:6060"
	mutexFraction := 0
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || (name != "pprof-addr" && name != "mutex-fraction") {
			rest = append(rest, a)
			continue
		}
		if !hasVal {
			if i+1 >= len(args) {
				fmt.Fprintf(os.Stderr, "gatewayprof: %s needs a value\n", a)
				return 2
			}
			i++
			val = args[i]
		}
		switch name {
		case "pprof-addr":
			pprofAddr = val
		case "mutex-fraction":
			n, err := strconv.Atoi(val)
			if err != nil {
				fmt.Fprintf(os.Stderr, "gatewayprof: --mutex-fraction %q: want an integer\n", val)
				return 2
			}
			mutexFraction = n
		}
	}
	cfg, err := config.Parse(rest, os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gatewayprof:", err)
		return 2
	}
	if mutexFraction > 0 {
		runtime.SetMutexProfileFraction(mutexFraction)
	}
	log := app.NewLogger(os.Stderr, cfg.Log.Format, cfg.Log.Level)
	lis, err := net.Listen("tcp", pprofAddr)
	if err != nil {
		log.Error("pprof listener", "err", err)
		return 1
	}
	ps := &http.Server{Handler: http.DefaultServeMux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = ps.Serve(lis) }()
	defer ps.Close()
	log.Info("pprof serving", "addr", lis.Addr().String())

	g, err := app.New(cfg, log)
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	if err := g.Run(ctx); err != nil {
		log.Error("stopped with an error", "err", err)
		return 1
	}
	return 0
}
