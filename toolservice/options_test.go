package toolservice_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/toolservice"
)

func echoArg(_ context.Context, req *toolservice.Request) (any, error) {
	return req.Arguments["msg"], nil
}

// A Request a test builds itself has no caller: Send says so instead of
// panicking, and a handler under test can be run on it.
func TestSendWithoutService(t *testing.T) {
	if err := (&toolservice.Request{}).Send("x"); !errors.Is(err, toolservice.ErrNoCall) {
		t.Fatalf("Send on a bare Request = %v, want ErrNoCall", err)
	}
	var nilReq *toolservice.Request
	if err := nilReq.Send("x"); !errors.Is(err, toolservice.ErrNoCall) {
		t.Fatalf("Send on a nil Request = %v, want ErrNoCall", err)
	}
	streaming := func(ctx context.Context, req *toolservice.Request) (any, error) {
		if err := req.Send("chunk"); err != nil {
			return nil, err
		}
		return "last", nil
	}
	if _, err := streaming(t.Context(), &toolservice.Request{}); !errors.Is(err, toolservice.ErrNoCall) {
		t.Fatalf("handler = %v, want ErrNoCall", err)
	}
}

// Options that cannot work are refused by New with a message naming them.
func TestOptionErrors(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(token, []byte("eyJhbGciOi.x.y\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: "pulsar://127.0.0.1:1"}) // does not dial yet
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	cfg := toolservice.Config{ID: "opts", Topic: "opts", PulsarURL: "pulsar://127.0.0.1:1"}
	cases := []struct {
		name string
		cfg  toolservice.Config
		opts []toolservice.Option
		want string // in the error; "" = no error
	}{
		{"token file", cfg, []toolservice.Option{toolservice.WithTokenFile(token)}, ""},
		{"token", cfg, []toolservice.Option{toolservice.WithToken("abc")}, ""},
		{"trust certs", cfg, []toolservice.Option{toolservice.WithTLSTrustCerts(token)}, ""},
		{"client, no URL", toolservice.Config{ID: "opts", Topic: "opts"}, []toolservice.Option{toolservice.WithPulsarClient(client)}, ""},
		{"authentication", cfg, []toolservice.Option{toolservice.WithAuthentication(pulsar.NewAuthenticationToken("abc"))}, ""},
		{"no URL", toolservice.Config{ID: "opts", Topic: "opts"}, nil, "empty PulsarURL"},
		{"missing token file", cfg, []toolservice.Option{toolservice.WithTokenFile(filepath.Join(dir, "nope"))}, "WithTokenFile: open"},
		{"empty token file", cfg, []toolservice.Option{toolservice.WithTokenFile(empty)}, "is empty"},
		{"empty token", cfg, []toolservice.Option{toolservice.WithToken(" ")}, "WithToken: empty token"},
		{"missing CA", cfg, []toolservice.Option{toolservice.WithTLSTrustCerts(filepath.Join(dir, "ca.pem"))}, "WithTLSTrustCerts: open"},
		{"nil client", cfg, []toolservice.Option{toolservice.WithPulsarClient(nil)}, "nil client"},
		{"nil authentication", cfg, []toolservice.Option{toolservice.WithAuthentication(nil)}, "nil authentication"},
		{"two authentications", cfg, []toolservice.Option{toolservice.WithToken("a"), toolservice.WithTokenFile(token)},
			"WithToken and WithTokenFile: give one way to authenticate"},
		{"client and token", cfg, []toolservice.Option{toolservice.WithPulsarClient(client), toolservice.WithToken("a")},
			"WithPulsarClient cannot be combined with WithToken"},
		{"client and CA", cfg, []toolservice.Option{toolservice.WithTLSTrustCerts(token), toolservice.WithPulsarClient(client)},
			"WithPulsarClient cannot be combined with WithTLSTrustCerts"},
	}
	for _, c := range cases {
		svc, err := toolservice.New(c.cfg, echoArg, c.opts...)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
		if c.want == "" && svc == nil {
			t.Errorf("%s: no service and no error", c.name)
		}
	}
}

// The token file option reaches the client: the file is read when the
// client connects, so a token file gone by then makes Run fail, naming it.
func TestTokenFileReadOnConnect(t *testing.T) {
	brokertest.RequirePulsar(t)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("some-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	svc, err := toolservice.New(toolservice.Config{ID: "tok", Topic: brokertest.UniqueTopic("tok"), PulsarURL: brokertest.PulsarURL(), Logger: quiet},
		echoArg, toolservice.WithTokenFile(token))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(token); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = svc.Run(ctx)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("Run with the token file gone = %v (ctx %v), want a connection error", err, ctx.Err())
	}
	t.Logf("Run: %v", err)
	select {
	case <-svc.Ready():
		t.Fatal("Ready closed although Run failed to subscribe")
	default:
	}
}

// With a token (ignored by a broker without authentication) the service
// connects and answers; Ready closes only once it is subscribed.
func TestTokenFileConnects(t *testing.T) {
	brokertest.RequirePulsar(t)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("some-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	svc, err := toolservice.New(toolservice.Config{ID: "tok", Topic: brokertest.UniqueTopic("tok"), PulsarURL: brokertest.PulsarURL(), Logger: quiet},
		echoArg, toolservice.WithTokenFile(token))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-svc.Ready():
		t.Fatal("Ready closed before Run")
	default:
	}
	stop := serve(svc)
	defer stop()
	if n := brokertest.Subscriptions(svc.RequestTopic()); n != 1 {
		t.Fatalf("%d consumers on %s once Ready, want 1", n, svc.RequestTopic())
	}
}

// A client passed in stays open after Run returns: the program can go on
// using it.
func TestPulsarClientLeftOpen(t *testing.T) {
	brokertest.RequirePulsar(t)
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	svc, err := toolservice.New(toolservice.Config{ID: "shared", Topic: brokertest.UniqueTopic("shared"), Logger: quiet},
		echoArg, toolservice.WithPulsarClient(client))
	if err != nil {
		t.Fatal(err)
	}
	serve(svc)()
	if n := brokertest.Subscriptions(svc.RequestTopic()); n != 0 {
		t.Errorf("%d consumers left on %s after Run returned", n, svc.RequestTopic())
	}
	p, err := client.CreateProducer(pulsar.ProducerOptions{Topic: svc.RequestTopic()})
	if err != nil {
		t.Fatalf("the client passed in was closed by the service: %v", err)
	}
	p.Close()
}
