package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/golang-jwt/jwt/v5"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/operations"
	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// authBroker is a standalone broker of a test's own with token
// authentication and authorization on (scripts/pulsar.sh, PULSAR_AUTH=token)
// and TLS on a port of its own (PULSAR_TLS_PORT), with a CA the test makes.
type authBroker struct {
	url, admin string
	tlsURL     string // pulsar+ssl://
	caFile     string // the CA that signed the broker's certificate
	dir        string // PULSAR_AUTH_DIR: secret.key, admin.token
	key        []byte // the broker's HS256 secret key
	adminToken string // the superuser's, made by the broker's token tool
}

// startAuthBroker starts the broker on free ports and stops it when the
// test ends.
func startAuthBroker(t *testing.T) *authBroker {
	t.Helper()
	ports := brokertest.FreePorts(t, 3)
	b := &authBroker{url: fmt.Sprintf("pulsar://127.0.0.1:%d", ports[0]), admin: fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		tlsURL: fmt.Sprintf("pulsar+ssl://127.0.0.1:%d", ports[2]), dir: t.TempDir()}
	certFile, keyFile := writeBrokerCert(t, b)
	script := func(verb string) {
		cmd := exec.Command("scripts/pulsar.sh", verb)
		cmd.Dir = filepath.Join("..", "..")
		cmd.Env = append(os.Environ(), "PULSAR_AUTH=token", "PULSAR_AUTH_DIR="+b.dir,
			"PULSAR_BROKER_PORT="+strconv.Itoa(ports[0]), "PULSAR_WEB_PORT="+strconv.Itoa(ports[1]),
			"PULSAR_TLS_PORT="+strconv.Itoa(ports[2]), "PULSAR_TLS_CERT="+certFile, "PULSAR_TLS_KEY="+keyFile)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("scripts/pulsar.sh %s (PULSAR_AUTH=token): %v\n%s", verb, err, out)
		}
	}
	t.Cleanup(func() { script("down") })
	script("up")
	if t.Failed() {
		t.FailNow()
	}
	var err error
	if b.key, err = os.ReadFile(filepath.Join(b.dir, "secret.key")); err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(b.dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	b.adminToken = strings.TrimSpace(string(tok))
	return b
}

// writeBrokerCert makes a CA (b.caFile) and a certificate for the broker
// on 127.0.0.1 signed by it, with its key in PKCS#8 as the broker reads it.
func writeBrokerCert(t *testing.T, b *authBroker) (certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := newCA(t)
	certPEM, keyPEM := newLeaf(t, ca, caKey, "pulsar-broker", true)
	blk, _ := pem.Decode(keyPEM)
	key, err := x509.ParseECPrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pk8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	b.caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "broker.pem"), filepath.Join(dir, "broker.key")
	for path, data := range map[string][]byte{
		b.caFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}),
		certFile: certPEM,
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk8}),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
}

// token is a token for role, signed with key (the broker's when nil).
func (b *authBroker) token(t *testing.T, role string, key []byte) string {
	t.Helper()
	if key == nil {
		key = b.key
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": role}).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tokenFile writes role's token to a file of its own.
func (b *authBroker) tokenFile(t *testing.T, role string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), role+".token")
	if err := os.WriteFile(path, []byte(b.token(t, role, nil)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// adminDo sends an admin API request as the superuser; it returns the
// status code and body.
func (b *authBroker) adminDo(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, b.admin+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+b.adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(msg)
}

// createTopic creates a persistent topic (topic permissions need one).
func (b *authBroker) createTopic(t *testing.T, topic string) {
	t.Helper()
	_, rest, _ := strings.Cut(topic, "://")
	if code, msg := b.adminDo(t, http.MethodPut, "/admin/v2/persistent/"+rest, ""); code/100 != 2 && code != http.StatusConflict {
		t.Fatalf("creating %s: %d %s", topic, code, msg)
	}
}

// grant gives role actions on a namespace ("tg/request") or a topic (a
// full name), as `pulsar-admin namespaces|topics grant-permission` does.
// The broker grants on a topic only while it exists: a non-persistent one
// is held open by a superuser's consumer meanwhile (the grant outlives it).
func (b *authBroker) grant(t *testing.T, on, role string, actions ...string) {
	t.Helper()
	if strings.HasPrefix(on, "non-persistent://") {
		c, err := b.client(t, b.adminToken).Subscribe(pulsar.ConsumerOptions{Topic: on, SubscriptionName: "admin-grant"})
		if err != nil {
			t.Fatalf("holding %s open to grant on it: %v", on, err)
		}
		defer c.Close()
	}
	path := "/admin/v2/namespaces/" + on
	if scheme, rest, ok := strings.Cut(on, "://"); ok {
		path = "/admin/v2/" + scheme + "/" + rest
	}
	if code, msg := b.adminDo(t, http.MethodPost, path+"/permissions/"+role, `["`+strings.Join(actions, `","`)+`"]`); code/100 != 2 {
		t.Fatalf("granting %s %v on %s: %d %s", role, actions, on, code, msg)
	}
}

// syncBuffer collects a client's log, to see what the broker answered.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// client is a Pulsar client authenticating with token ("" = none).
func (b *authBroker) client(t *testing.T, token string) pulsar.Client {
	t.Helper()
	return b.clientLogging(t, token, io.Discard)
}

// clientLogging is client with its log (warnings up) going to w.
func (b *authBroker) clientLogging(t *testing.T, token string, w io.Writer) pulsar.Client {
	t.Helper()
	opts := pulsar.ClientOptions{URL: b.url, OperationTimeout: 5 * time.Second, ConnectionTimeout: 5 * time.Second,
		Logger: plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})))}
	if token != "" {
		opts.Authentication = pulsar.NewAuthenticationToken(token)
	}
	c, err := pulsar.NewClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// produce tries to publish one message on topic: nil when the broker
// accepted it.
func produce(c pulsar.Client, topic string) error {
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		return err
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = p.Send(ctx, &pulsar.ProducerMessage{Key: "k", Payload: []byte("{}")})
	return err
}

// TestBrokerTokenAuth runs the gateway and a Go tool service against a
// broker with token authentication and authorization, each with its own
// role and the least permissions it needs (docs/security.md, "From the bus"),
// and checks that the broker itself refuses what a role may not do.
func TestBrokerTokenAuth(t *testing.T) {
	t.Parallel()
	b := startAuthBroker(t)
	const gwRole, svcRole, otherRole = "toolgate-gateway", "svc-echo", "svc-other"
	announce := "persistent://tg/config/tool-descriptors"
	instance := brokertest.UniqueTopic("authgw")
	svcTopic, otherTopic := brokertest.UniqueTopic("auth-echo"), brokertest.UniqueTopic("auth-other")

	b.createTopic(t, announce)
	// The gateway: publish requests, read replies and announcements;
	// durable operations: write and read their state and chunk topics
	// (tg/operations, no other party's), read their replies.
	b.grant(t, "tg/request", gwRole, "produce")
	b.grant(t, "tg/response", gwRole, "consume")
	b.grant(t, announce, gwRole, "consume")
	b.grant(t, "tg/operations", gwRole, "produce", "consume")
	// A service: its request topic to consume, its response topic and
	// the announcements topic to produce on (it announces itself), and the
	// reply topic of the gateway instance (reply-to).
	b.grant(t, wire.RequestTopic(svcTopic), svcRole, "consume")
	b.grant(t, wire.ResponseTopic(svcTopic), svcRole, "produce")
	b.grant(t, announce, svcRole, "produce")
	b.grant(t, wire.ReplyTopic(instance), svcRole, "produce")
	// and the reply topic of durable operations: the one of the key the
	// gateway writes with.
	opsKeyText := []byte(brokertest.UniqueTopic("key") + brokertest.UniqueTopic("of-this-test"))
	opsKeys, err := operations.NewKeys(opsKeyText)
	if err != nil {
		t.Fatal(err)
	}
	opsReplies := operations.ReplyTopicOf(wire.OperationsTopic, opsKeys.ID())
	b.createTopic(t, opsReplies)
	b.grant(t, opsReplies, svcRole, "produce")
	// Another service, with the same on its own topics only.
	b.grant(t, wire.RequestTopic(otherTopic), otherRole, "consume")
	b.grant(t, wire.ResponseTopic(otherTopic), otherRole, "produce")

	// The service and the gateway reach the broker over TLS.
	newService := func(auth toolservice.Option, log io.Writer) *toolservice.Service {
		t.Helper()
		svc, err := toolservice.New(toolservice.Config{ID: "echo-" + svcTopic, Topic: svcTopic, PulsarURL: b.tlsURL,
			Logger:   slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn})),
			Announce: &toolservice.Announcement{Topic: announce, Tools: []toolservice.Tool{{Name: "auth-echo", Description: "echo behind an authenticating broker"}}}},
			echo.Handle, auth, toolservice.WithTLSTrustCerts(b.caFile))
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}

	t.Run("a service with a token of another key cannot subscribe", func(t *testing.T) {
		otherKey := make([]byte, 32)
		_, _ = rand.Read(otherKey)
		wrongToken := b.token(t, svcRole, otherKey)
		wrongFile := filepath.Join(t.TempDir(), "wrong.token")
		if err := os.WriteFile(wrongFile, []byte(wrongToken), 0o600); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for name, opt := range map[string]toolservice.Option{"WithTokenFile": toolservice.WithTokenFile(wrongFile), "WithToken": toolservice.WithToken(wrongToken)} {
			var log syncBuffer
			svc := newService(opt, &log)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
				defer cancel()
				err := svc.Run(ctx)
				if err == nil || ctx.Err() != nil || !strings.Contains(log.String(), "Failed to authenticate") {
					t.Errorf("%s: Run with a wrong token: %v (ctx %v); want the broker's refusal to authenticate in its log:\n%s", name, err, ctx.Err(), log.String())
					return
				}
				t.Logf("%s: refused: %v", name, err)
			}()
		}
		wg.Wait()
	})

	t.Run("a service with a valid token given as a string subscribes", func(t *testing.T) {
		svc, err := toolservice.New(toolservice.Config{ID: "other-" + otherTopic, Topic: otherTopic, PulsarURL: b.tlsURL},
			echo.Handle, toolservice.WithToken(b.token(t, otherRole, nil)), toolservice.WithTLSTrustCerts(b.caFile))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		select {
		case <-svc.Ready():
		case err := <-done:
			t.Errorf("WithToken: %v", err)
		case <-time.After(60 * time.Second):
			t.Error("WithToken: not subscribed after 60s")
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WithToken: %v", err)
		}
	})

	// With valid tokens, end to end: the service announces itself, the
	// gateway serves its tool.
	svc := newService(toolservice.WithTokenFile(b.tokenFile(t, svcRole)), os.Stderr)
	brokertest.RunService(t, "with a valid token", svc, 60*time.Second)
	// A tool whose service never runs: the gateway's liveness check asks
	// the admin API, with the gateway's token too.
	reg := filepath.Join(t.TempDir(), "registry.yaml")
	nobody := brokertest.UniqueTopic("auth-nobody")
	if err := os.WriteFile(reg, []byte("tool-service:\n  nobody: {topic: "+nobody+"}\ntool:\n  nobody-home: {type: tool-service, service: nobody}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Durable operations on the default topics of the broker's own.
	opsKey := filepath.Join(t.TempDir(), "operations.key")
	if err := os.WriteFile(opsKey, opsKeyText, 0o600); err != nil {
		t.Fatal(err)
	}
	gw := runGateway(t, nil, "--pulsar-url", b.tlsURL, "--pulsar-tls-ca", b.caFile, "--pulsar-admin-url", b.admin, "--pulsar-token-file", b.tokenFile(t, gwRole),
		"--registry", reg, "--announce-topic", announce, "--instance-id", instance, "--allow-anonymous", "--default-timeout", "10s",
		"--operations", "--operations-key-file", opsKey)
	if err := waitReady("http://"+gw.HTTPAddr(), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := toolgatev1.NewToolServiceClient(conn)
	args, _ := structpb.NewStruct(map[string]any{"msg": "through the authenticated bus"})
	err = eventually.Within(20*time.Second, func() error {
		r, err := client.InvokeTool(t.Context(), &toolgatev1.InvokeToolRequest{Name: "auth-echo", Arguments: args})
		if err == nil && r.GetOutput() != "through the authenticated bus" {
			err = fmt.Errorf("answered %q", r.GetOutput())
		}
		return err
	})
	if err != nil {
		t.Fatalf("a call through the gateway and the service, both with valid tokens: %v", err)
	}
	// A durable operation: recorded on tg/operations, answered by the
	// service on the operations' reply topic, read back done.
	op, err := client.StartTool(t.Context(), &toolgatev1.StartToolRequest{Name: "auth-echo", Arguments: args})
	if err == nil {
		err = waitOperation(t, "http://"+gw.HTTPAddr(), op.GetName(), "through the authenticated bus")
	}
	if err != nil {
		t.Fatalf("a durable operation through the authenticated bus: %v", err)
	}
	nctx, ncancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer ncancel()
	if _, err := client.InvokeTool(nctx, &toolgatev1.InvokeToolRequest{Name: "nobody-home"}); status.Code(err) != codes.Unavailable {
		t.Errorf("a tool nobody serves: %v; want UNAVAILABLE from the liveness check (the admin API read with the gateway's token)", err)
	}

	// The broker refuses, by itself:
	refused := func(what string, err error, want string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: the broker allowed it", what)
		} else if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want the broker's %s", what, err, want)
		} else {
			t.Logf("%s: refused (%v)", what, err)
		}
	}
	// a client without a token, or with one of another key, at all (the
	// client only says its operation timed out; its log has the broker's
	// answer);
	otherKey := bytes.Repeat([]byte{7}, 32)
	for what, token := range map[string]string{"no token": "", "a token of another key": b.token(t, gwRole, otherKey)} {
		var log syncBuffer
		err := produce(b.clientLogging(t, token, &log), wire.RequestTopic(svcTopic))
		if err == nil || !strings.Contains(log.String(), "Failed to authenticate") {
			t.Errorf("%s: %v; want the broker's refusal to authenticate in the client's log:\n%s", what, err, log.String())
		}
	}
	// a client over TLS that trusts another CA (the broker's certificate
	// is what it refuses, before any token is sent);
	otherCA, _ := newCA(t)
	otherCAFile := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(otherCAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: otherCA.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	var tlsLog syncBuffer
	tc, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.tlsURL, TLSTrustCertsFilePath: otherCAFile, OperationTimeout: 5 * time.Second,
		Authentication: pulsar.NewAuthenticationToken(b.token(t, gwRole, nil)),
		Logger:         plog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(&tlsLog, &slog.HandlerOptions{Level: slog.LevelWarn})))})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if err := produce(tc, wire.RequestTopic(svcTopic)); err == nil || !strings.Contains(tlsLog.String(), "certificate signed by unknown authority") {
		t.Errorf("a client trusting another CA: %v; want the broker's certificate refused:\n%s", err, tlsLog.String())
	}
	// a service answering for another (its response topic, or the
	// gateway's reply topic), reading another's requests, or announcing;
	other := b.client(t, b.token(t, otherRole, nil))
	if err := produce(other, wire.ResponseTopic(otherTopic)); err != nil {
		t.Fatalf("svc-other on its own response topic: %v", err)
	}
	refused("a service producing on another service's response topic", produce(other, wire.ResponseTopic(svcTopic)), "Authoriz")
	refused("a service producing on a gateway's reply topic it was not granted", produce(other, wire.ReplyTopic(instance)), "Authoriz")
	_, err = other.Subscribe(pulsar.ConsumerOptions{Topic: wire.RequestTopic(svcTopic), SubscriptionName: "steal", Type: pulsar.Shared})
	refused("a service reading another service's requests", err, "Authoriz")
	refused("a service that is not an announcer producing on the announcements topic", produce(other, announce), "Authoriz")
	// a service (even one granted the operations' reply topic) writing
	// or reading the operations' state or chunks;
	svcc := b.client(t, b.token(t, svcRole, nil))
	for _, topic := range []string{operations.DefaultStateTopic, operations.DefaultChunkTopic} {
		refused("a service producing on "+topic, produce(svcc, topic), "Authoriz")
		_, err = svcc.CreateReader(pulsar.ReaderOptions{Topic: topic, StartMessageID: pulsar.EarliestMessageID()})
		refused("a service reading "+topic, err, "Authoriz")
	}
	// the gateway announcing, or answering in a service's stead.
	gwc := b.client(t, b.token(t, gwRole, nil))
	refused("the gateway producing on the announcements topic", produce(gwc, announce), "Authoriz")
	refused("the gateway producing on a service's response topic", produce(gwc, wire.ResponseTopic(svcTopic)), "Authoriz")
}

// waitOperation waits until the operation name (operations/{id}) is done
// on the gateway at base, with output want.
func waitOperation(t *testing.T, base, name, want string) error {
	t.Helper()
	var last string
	for range 100 {
		resp, err := http.Post(base+"/v1/"+name+":wait", "application/json", strings.NewReader(`{"timeout": "5s"}`))
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = string(b)
		var op struct {
			Done     bool `json:"done"`
			Response struct {
				Output string `json:"output"`
			} `json:"response"`
		}
		if err := json.Unmarshal(b, &op); err != nil || resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %d %s", name, resp.StatusCode, b)
		}
		if op.Done {
			if op.Response.Output != want {
				return fmt.Errorf("%s done with %s, want the output %q", name, b, want)
			}
			return nil
		}
	}
	return fmt.Errorf("%s not done: %s", name, last)
}
