// Command wordcount is a tool service built in a module of its own,
// against nothing but the public API of the toolservice SDK (and the Pulsar
// client's, for -own-client). The test in the directory above builds and
// runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/toolservice"
)

func main() {
	url := flag.String("pulsar-url", "", "broker URL")
	topic := flag.String("topic", "", "short topic name")
	tokenFile := flag.String("token-file", "", "file holding the Pulsar token")
	ownClient := flag.Bool("own-client", false, "make the Pulsar client here and pass it in")
	flag.Parse()

	// A handler can be run on a Request built by hand: Send reports that
	// there is no caller rather than panicking.
	if err := (&toolservice.Request{}).Send("x"); !errors.Is(err, toolservice.ErrNoCall) {
		fmt.Fprintln(os.Stderr, "Send on a bare Request:", err)
		os.Exit(1)
	}

	var opts []toolservice.Option
	if *ownClient {
		client, err := pulsar.NewClient(pulsar.ClientOptions{
			URL:            *url,
			Authentication: pulsar.NewAuthenticationTokenFromFile(*tokenFile),
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer client.Close()
		opts = append(opts, toolservice.WithPulsarClient(client))
	} else {
		opts = append(opts, toolservice.WithTokenFile(*tokenFile))
	}
	svc, err := toolservice.New(toolservice.Config{
		ID: "wordcount", Topic: *topic, PulsarURL: *url,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}, count, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-svc.Ready()
		fmt.Println("ready")
	}()
	if err := svc.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("stopped")
}

// count answers {"words": n} for the argument "text"; with "stream": true
// it first sends each word as a chunk of its own.
func count(ctx context.Context, req *toolservice.Request) (any, error) {
	text, _ := req.Arguments["text"].(string)
	words := strings.Fields(text)
	if len(words) == 0 {
		return nil, toolservice.Errorf("invalid-argument", "text has no words")
	}
	if stream, _ := req.Arguments["stream"].(bool); stream {
		for _, w := range words {
			if err := req.Send(w + "\n"); err != nil {
				return nil, err
			}
		}
	}
	return map[string]any{"words": len(words), "user": req.User}, nil
}
