// Command echo-service is a tool service for tests and benchmarks, built on
// the toolservice SDK. See internal/echo for what it answers.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/servicemain"
	"github.com/toolgate/toolgate/internal/version"
	"github.com/toolgate/toolgate/toolservice"
)

func main() {
	if version.Requested(os.Args[1:]) {
		fmt.Println(version.Line("echo-service"))
		os.Exit(0)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := servicemain.Run(ctx, "echo-service", os.Args[1:], toolservice.Config{ID: "echo-service", Topic: "echo", MaxConcurrency: 256, Announce: echo.Announcement()}, echo.Handle)
	stop()
	os.Exit(code)
}
