// Command joke-service is an example tool service built on the toolservice
// SDK. It answers like TrustGraph's Python joke service: the joke's style
// comes from the tool's config ("style"), its subject from the call's
// arguments ("topic").
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolgate/toolgate/internal/jokes"
	"github.com/toolgate/toolgate/internal/servicemain"
	"github.com/toolgate/toolgate/internal/version"
	"github.com/toolgate/toolgate/toolservice"
)

func main() {
	if version.Requested(os.Args[1:]) {
		fmt.Println(version.Line("joke-service"))
		os.Exit(0)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := servicemain.Run(ctx, "joke-service", os.Args[1:], toolservice.Config{ID: "joke-service", Topic: "joke", Announce: jokes.Announcement()}, jokes.Handle)
	stop()
	os.Exit(code)
}
