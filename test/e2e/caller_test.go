package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/golang-jwt/jwt/v5"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/callerassert"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// whoami answers with the caller its context carries, as
// "subject|source|roles|tool".
func whoami(ctx context.Context, _ *toolservice.Request) (any, error) {
	who, ok := toolservice.CallerFrom(ctx)
	if !ok {
		return nil, toolservice.Errorf("failed-precondition", "no caller")
	}
	return fmt.Sprintf("%s|%s|%s|%s", who.Subject, who.Source, strings.Join(who.Roles, ","), who.Tool), nil
}

// TestCallerAssertions: a gateway with --caller-key-file signs every
// call's caller assertion, and a Go SDK service that checks them against
// the gateway's JWK Set (read from its admin listener) takes calls through
// REST, gRPC and MCP, seeing the caller the gateway authenticated — an API
// key's, a JWT's. Requests published straight on its request topic are
// refused when their assertion is missing, forged, expired, for another
// service, for another request or replayed — one the gateway sent,
// published again — and taken when signed with the gateway's key; a
// service that expects another audience refuses the gateway's calls, which
// the gateway answers PERMISSION_DENIED.
func TestCallerAssertions(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, content []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := write("caller.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	topic, otherTopic := brokertest.UniqueTopic("whoami"), brokertest.UniqueTopic("whoami-other")
	reg := write("registry.yaml", fmt.Appendf(nil, `tool-service:
  whoami-service: {topic: %s}
  strict-service: {topic: %s}
tool:
  whoami: {type: tool-service, service: whoami-service}
  strict: {type: tool-service, service: strict-service}
`, topic, otherTopic))
	keys := write("keys.yaml", fmt.Appendf(nil, "keys:\n  - {hash: %q, user: alice, roles: [dev, ops]}\n", auth.HashKey(parityKey)))
	secret := []byte("caller-assertions-hs256-secret-0123456789")
	secretFile := write("hs256", secret)
	gw := apptest.Start(t, nil, append([]string{"--registry", reg, "--announcements=false", "--pulsar-admin-url", brokertest.AdminURL(),
		"--api-keys", keys, "--jwt-hs256-secret-file", secretFile, "--caller-key-file", keyFile, "--caller-issuer", "e2e"},
		brokertest.TestOperations(t).Flags()...)...)
	base := "http://" + gw.HTTPAddr()
	jwks := "http://" + gw.AdminAddr() + wire.CallerJWKSPath

	svc, err := toolservice.New(toolservice.Config{ID: "whoami-service", Topic: topic, PulsarURL: brokertest.PulsarURL()}, whoami,
		toolservice.WithCallerJWKS(jwks), toolservice.WithCallerIssuer("e2e"))
	if err != nil {
		t.Fatal(err)
	}
	brokertest.RunService(t, "whoami-service", svc, 30*time.Second)
	strict, err := toolservice.New(toolservice.Config{ID: "strict-service", Topic: otherTopic, PulsarURL: brokertest.PulsarURL()}, whoami,
		toolservice.WithCallerJWKS(jwks), toolservice.WithCallerAudience("another-service"))
	if err != nil {
		t.Fatal(err)
	}
	brokertest.RunService(t, "strict-service", strict, 30*time.Second)
	gw.WaitReady(t, 30*time.Second)

	// A sniffer reads the requests the gateway sends, to replay one.
	client := pulsarClient(t)
	requests := make(chan pulsar.ConsumerMessage, 16)
	sniffer, err := client.Subscribe(pulsar.ConsumerOptions{Topic: wire.RequestTopic(topic), SubscriptionName: "sniffer", Type: pulsar.Exclusive,
		MessageChannel: requests})
	if err != nil {
		t.Fatal(err)
	}
	defer sniffer.Close()

	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	grpcCli := toolgatev1.NewToolServiceClient(conn)
	bob, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	alice := parityCall{key: parityKey, tool: "whoami", args: "{}"}
	const aliceSees = "api-key:alice|api-key|dev,ops|whoami"
	for _, tc := range []struct {
		door string
		got  outcome
		want string
	}{
		{"rest", restParity(t, base, alice), aliceSees},
		{"grpc", grpcParity(t, grpcCli, alice), aliceSees},
		{"mcp", mcpParity(t, base, alice), aliceSees},
		{"grpc, a JWT", grpcParity(t, grpcCli, parityCall{headers: map[string]string{"authorization": "Bearer " + bob}, tool: "whoami", args: "{}"}), "jwt:bob|jwt||whoami"},
		{"rest, a JWT", restParity(t, base, parityCall{headers: map[string]string{"Authorization": "Bearer " + bob}, tool: "whoami", args: "{}"}), "jwt:bob|jwt||whoami"},
	} {
		if tc.got.code != codes.OK || tc.got.output != tc.want {
			t.Errorf("%s: %v, want the service to see %q", tc.door, tc.got, tc.want)
		}
	}
	// A durable operation's request carries one too, signed for the
	// operation's id.
	if out := operationOutput(t, base, parityKey, "whoami"); out != aliceSees {
		t.Errorf("a durable operation: the service saw %q, want %q", out, aliceSees)
	}
	// A service that expects another audience refuses the gateway's call.
	if got := restParity(t, base, parityCall{key: parityKey, tool: "strict", args: "{}"}); got.code != codes.PermissionDenied || got.reason != wire.ErrorTypeCallerRefused {
		t.Errorf("a service of another audience: %v, want PERMISSION_DENIED/%s", got, wire.ErrorTypeCallerRefused)
	}

	// A request the gateway sent, as the sniffer read it.
	var sent pulsar.Message
	select {
	case m := <-requests:
		sent = m.Message
	case <-time.After(10 * time.Second):
		t.Fatal("the sniffer read no request")
	}
	if wire.ExpandCall(sent.Properties())[wire.PropCaller] == "" {
		t.Fatalf("the gateway's request carries no caller assertion: %v", sent.Properties())
	}

	// Straight on the request topic, answers read on the response topic.
	replies := make(chan pulsar.ConsumerMessage, 16)
	replyReader, err := client.Subscribe(pulsar.ConsumerOptions{Topic: wire.ResponseTopic(topic), SubscriptionName: "caller-test", Type: pulsar.Exclusive,
		MessageChannel: replies})
	if err != nil {
		t.Fatal(err)
	}
	defer replyReader.Close()
	producer, err := client.CreateProducer(pulsar.ProducerOptions{Topic: wire.RequestTopic(topic)})
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	// ask publishes a request with id and properties, and returns the
	// service's answer to it.
	ask := func(id string, props map[string]string, payload []byte) wire.Response {
		t.Helper()
		p := map[string]string{wire.PropID: id}
		for k, v := range props {
			p[k] = v
		}
		if _, err := producer.Send(t.Context(), &pulsar.ProducerMessage{Payload: payload, Properties: p}); err != nil {
			t.Fatal(err)
		}
		deadline := time.After(15 * time.Second)
		for {
			select {
			case m := <-replies:
				if m.Properties()[wire.PropID] != id {
					continue
				}
				r, err := wire.DecodeResponse(m.Payload())
				if err != nil {
					t.Fatal(err)
				}
				return r
			case <-deadline:
				t.Fatalf("no answer to %s", id)
				return wire.Response{}
			}
		}
	}
	signer, err := callerassert.New("e2e", key)
	if err != nil {
		t.Fatal(err)
	}
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	forger, err := callerassert.New("e2e", otherKey)
	if err != nil {
		t.Fatal(err)
	}
	claims := func(id string) wire.CallerClaims {
		return wire.CallerClaims{Subject: "api-key:mallory", Source: "api-key", Audience: "whoami-service", Tool: "whoami", ID: id,
			Expires: time.Now().Add(time.Minute).Unix()}
	}
	assert := func(s *callerassert.Signer, c wire.CallerClaims) map[string]string {
		tok, err := s.Sign(c)
		if err != nil {
			t.Fatal(err)
		}
		return map[string]string{wire.PropCall: "caller=" + tok}
	}
	expired, otherAud := claims("expired"), claims("other-aud")
	expired.Expires = time.Now().Add(-time.Minute).Unix()
	otherAud.Audience = "another-service"
	req := wire.EncodeRequest(wire.Request{User: "mallory", Config: "{}", Arguments: "{}"})
	for _, tc := range []struct {
		name, id string
		props    map[string]string
		payload  []byte
		want     string // "" taken
	}{
		{"signed with the gateway's key", "genuine", assert(signer, claims("genuine")), req, ""},
		{"missing", "missing", nil, req, "carries no caller assertion"},
		{"forged", "forged", assert(forger, claims("forged")), req, "do not hold"},
		{"expired", "expired", assert(signer, expired), req, "expired"},
		{"for another service", "other-aud", assert(signer, otherAud), req, "another service"},
		{"for another request", "another-id", assert(signer, claims("genuine-2")), req, "another request"},
		// Its assertion alone: its reply-to would send the answer to
		// the gateway.
		{"replayed: the gateway's own, again", sent.Properties()[wire.PropID],
			map[string]string{wire.PropCall: "caller=" + wire.ExpandCall(sent.Properties())[wire.PropCaller]}, sent.Payload(), "used before"},
	} {
		r := ask(tc.id, tc.props, tc.payload)
		switch {
		case tc.want == "" && (r.Error != nil || r.Response != "api-key:mallory|api-key||whoami"):
			t.Errorf("%s: %+v %q, want it taken", tc.name, r.Error, r.Response)
		case tc.want != "" && (r.Error == nil || r.Error.Type != wire.ErrorTypeCallerRefused || !strings.Contains(r.Error.Message, tc.want)):
			t.Errorf("%s: %+v %q, want it refused (%s) saying %q", tc.name, r.Error, r.Response, wire.ErrorTypeCallerRefused, tc.want)
		}
	}
	if n := svc.Stats().CallersRefused; n != 6 {
		t.Errorf("%d calls refused, want 6", n)
	}
}

// operationOutput starts tool as a durable operation with the API key
// key and returns its output once done.
func operationOutput(t *testing.T, base, key, tool string) string {
	t.Helper()
	post := func(path, body string) []byte {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		return b
	}
	var op struct {
		Name     string `json:"name"`
		Done     bool   `json:"done"`
		Error    any    `json:"error"`
		Response struct {
			Output string `json:"output"`
		} `json:"response"`
	}
	if err := json.Unmarshal(post("/v1/tools/"+tool+":start", `{"arguments": {}}`), &op); err != nil || op.Name == "" {
		t.Fatalf("start: %+v %v", op, err)
	}
	name := op.Name
	eventually.True(t, 30*time.Second, "operation "+name+" done", func() bool {
		if err := json.Unmarshal(post("/v1/"+name+":wait", `{"timeout": "5s"}`), &op); err != nil {
			t.Fatal(err)
		}
		return op.Done
	})
	if op.Error != nil {
		t.Errorf("operation %s failed: %v", name, op.Error)
	}
	return op.Response.Output
}
