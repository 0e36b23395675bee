package operations_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"github.com/golang-jwt/jwt/v5"
	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

const testIssuer = "https://issuer.test"

// twoAlices is a gateway that takes alice's API key and JWTs of
// testIssuer signed with a secret of the test's own, so that a token can
// name the API key's user.
type twoAlices struct {
	gw     *apptest.Gateway
	base   string
	name   string // the user both name, fresh each time
	secret []byte
}

// startTwoAlices starts it with the flags of setup, the policy when one is
// given (%[1]s in it is the user's name), and extra flags.
func startTwoAlices(t *testing.T, policy string, extra ...string) *twoAlices {
	t.Helper()
	flags := setup(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	x := &twoAlices{name: brokertest.UniqueTopic("alice"), secret: make([]byte, 32)}
	_, _ = rand.Read(x.secret)
	x.secret = []byte(hex.EncodeToString(x.secret)) // printable: the gateway trims the file's white space
	keys := write("alice-keys.yaml", fmt.Sprintf("keys:\n  - {hash: %q, user: %s, roles: [user]}\n", auth.HashKey(aliceKey), x.name))
	// Later flags win: alice's keys replace setup's.
	flags = append(flags, "--api-keys", keys, "--jwt-hs256-secret-file", write("jwt.secret", string(x.secret)), "--jwt-issuer", testIssuer)
	if policy != "" {
		flags = append(flags, "--policy", write("policy.yaml", fmt.Sprintf(policy, x.name)))
	}
	x.gw = apptest.Start(t, nil, append(flags, extra...)...)
	x.gw.WaitReady(t, 60*time.Second)
	x.base = "http://" + x.gw.HTTPAddr()
	return x
}

// token is a JWT of testIssuer naming sub.
func (x *twoAlices) token(t *testing.T, sub string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": sub, "iss": testIssuer, "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Add(-time.Minute).Unix(),
	}).SignedString(x.secret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// credential is how a request authenticates: a header and its value.
type credential struct{ header, value string }

func apiKey(key string) credential { return credential{"X-Api-Key", key} }
func bearer(tok string) credential { return credential{"Authorization", "Bearer " + tok} }
func (c credential) grpc(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, strings.ToLower(c.header), c.value)
}

// doAs sends a request with cred; it returns the status and the body.
func doAs(t *testing.T, method, url string, cred credential, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(cred.header, cred.value)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// startSleep starts a minute-long echo as cred and returns its id.
func (x *twoAlices) startSleep(t *testing.T, cred credential) string {
	t.Helper()
	code, body := doAs(t, http.MethodPost, x.base+"/v1/tools/echo:start", cred, `{"arguments": {"mode": "sleep", "ms": 60000, "msg": "m"}, "timeout": "90s"}`)
	var op struct {
		Name string `json:"name"`
		Done bool   `json:"done"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &op) != nil || op.Done {
		t.Fatalf("start: %d %s", code, body)
	}
	id, ok := strings.CutPrefix(op.Name, "operations/")
	if !ok || id == "" {
		t.Fatalf("start answered %s", body)
	}
	return id
}

// listed are the ids of cred's operations, over REST.
func (x *twoAlices) listed(t *testing.T, cred credential) []string {
	t.Helper()
	code, body := doAs(t, http.MethodGet, x.base+"/v1/operations", cred, "")
	var list struct {
		Operations []struct {
			Name string `json:"name"`
		} `json:"operations"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &list) != nil {
		t.Fatalf("list: %d %s", code, body)
	}
	var ids []string
	for _, op := range list.Operations {
		ids = append(ids, strings.TrimPrefix(op.Name, "operations/"))
	}
	return ids
}

// TestOperationsOfOneNameFromTwoSources: a JWT whose sub is the name of
// the API-key user alice is another caller: it can get, list, stream,
// wait for, cancel or delete none of her operations, over REST, gRPC or
// MCP's tasks, and she none of its; her operation runs on untouched.
// (Reads first, then cancels, then deletes, each check reporting on its
// own, so that one does not hide the next.)
func TestOperationsOfOneNameFromTwoSources(t *testing.T) {
	x := startTwoAlices(t, "")
	alice, jwtAlice := apiKey(aliceKey), bearer(x.token(t, x.name))
	id := x.startSleep(t, alice)
	mine := x.startSleep(t, jwtAlice)
	ops := x.base + "/v1/operations/" + id
	g := dialGRPC(t, x.gw)
	ctx := jwtAlice.grpc(t.Context())
	name := "operations/" + id
	rest := func(method, url, body string) {
		t.Helper()
		if code, got := doAs(t, method, url, jwtAlice, body); code != http.StatusNotFound {
			t.Errorf("the JWT alice's %s %s: %d %s, want 404", method, url, code, got)
		}
	}
	notFound := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.NotFound {
			t.Errorf("the JWT alice's %s: %v, want NOT_FOUND", what, err)
		}
	}
	taskNotFound := func(method string) {
		t.Helper()
		a := mcpRequest(t, x.base, jwtAlice.value, method, map[string]any{"taskId": id}, true)
		if a.Error == nil || a.Error.Code != -32602 || a.Error.Message != "task "+id+" not found" {
			t.Errorf("the JWT alice's %s: %d %+v %v, want -32602 task not found", method, a.status, a.Error, a.Result)
		}
	}

	// Reads.
	rest(http.MethodGet, ops, "")
	rest(http.MethodGet, ops+":stream", "")
	rest(http.MethodPost, ops+":wait", `{"timeout": "1s"}`)
	if ids := x.listed(t, jwtAlice); !slices.Equal(ids, []string{mine}) {
		t.Errorf("the JWT alice's list: %v, want only her own %s", ids, mine)
	}
	if ids := x.listed(t, alice); !slices.Equal(ids, []string{id}) {
		t.Errorf("the API key's alice's list: %v, want only her own %s", ids, id)
	}
	if code, body := doAs(t, http.MethodGet, x.base+"/v1/operations/"+mine, alice, ""); code != http.StatusNotFound {
		t.Errorf("the API key's alice's GET of the JWT alice's operation: %d %s, want 404", code, body)
	}
	_, err := g.ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: name})
	notFound("GetOperation", err)
	_, err = g.ops.WaitOperation(ctx, &longrunningpb.WaitOperationRequest{Name: name, Timeout: durationpb.New(time.Second)})
	notFound("WaitOperation", err)
	list, err := g.ops.ListOperations(ctx, &longrunningpb.ListOperationsRequest{})
	if err != nil || len(list.GetOperations()) != 1 || list.GetOperations()[0].GetName() != "operations/"+mine {
		t.Errorf("the JWT alice's list over gRPC: %v, %v; want only her own", list, err)
	}
	// MCP's tasks are the same operations.
	taskNotFound("tasks/get")

	// Cancels.
	rest(http.MethodPost, ops+":cancel", "{}")
	_, err = g.ops.CancelOperation(ctx, &longrunningpb.CancelOperationRequest{Name: name})
	notFound("CancelOperation", err)
	taskNotFound("tasks/cancel")
	code, body := doAs(t, http.MethodGet, ops, alice, "")
	if code != http.StatusOK || !strings.Contains(body, `"done":false`) {
		t.Errorf("alice's operation after the JWT alice's cancels: %d %s, want it running", code, body)
	}

	// Deletes.
	_, err = g.ops.DeleteOperation(ctx, &longrunningpb.DeleteOperationRequest{Name: name})
	notFound("DeleteOperation", err)
	rest(http.MethodDelete, ops, "")
	if code, body := doAs(t, http.MethodGet, ops, alice, ""); code != http.StatusOK {
		t.Errorf("alice's operation after the JWT alice's deletes: %d %s, want it kept", code, body)
	}
	if got := mcpRequest(t, x.base, aliceKey, "tasks/get", map[string]any{"taskId": id}, true); got.Result["taskId"] != id {
		t.Errorf("alice's own tasks/get: %+v %v", got.Error, got.Result)
	}

	for _, c := range []struct {
		cred credential
		id   string
	}{{alice, id}, {jwtAlice, mine}} {
		if code, body := doAs(t, http.MethodPost, x.base+"/v1/operations/"+c.id+":cancel", c.cred, "{}"); code != http.StatusOK {
			t.Errorf("cancel of %s by its owner: %d %s", c.id, code, body)
		}
	}
}

// TestIdentitiesJoinOperations: the policy's identities join the JWT's
// alice to the API key's on purpose: each then sees, waits for and
// cancels the other's operations; another token's user does not.
func TestIdentitiesJoinOperations(t *testing.T) {
	x := startTwoAlices(t, `identities:
  - subject: "api-key:%[1]s"
    aliases: ["jwt(`+testIssuer+`):%[1]s"]
rules:
  - {users: ["*"], tools: ["*"], actions: ["*"]}
`)
	alice, jwtAlice, other := apiKey(aliceKey), bearer(x.token(t, x.name)), bearer(x.token(t, x.name+"-other"))
	id := x.startSleep(t, alice)
	mine := x.startSleep(t, jwtAlice)
	for _, c := range []credential{alice, jwtAlice} {
		eventually.True(t, 5*time.Second, "both operations listed to both", func() bool {
			ids := x.listed(t, c)
			return slices.Contains(ids, id) && slices.Contains(ids, mine) && len(ids) == 2
		})
	}
	if code, body := doAs(t, http.MethodGet, x.base+"/v1/operations/"+id, jwtAlice, ""); code != http.StatusOK {
		t.Errorf("the joined JWT alice's GET: %d %s", code, body)
	}
	if code, body := doAs(t, http.MethodGet, x.base+"/v1/operations/"+id, other, ""); code != http.StatusNotFound {
		t.Errorf("another token's GET: %d %s, want 404", code, body)
	}
	_, err := dialGRPC(t, x.gw).ops.GetOperation(jwtAlice.grpc(t.Context()), &longrunningpb.GetOperationRequest{Name: "operations/" + id})
	if err != nil {
		t.Errorf("the joined JWT alice's GetOperation: %v", err)
	}
	// Each cancels the other's.
	for _, c := range []struct {
		cred credential
		id   string
	}{{jwtAlice, id}, {alice, mine}} {
		if code, body := doAs(t, http.MethodPost, x.base+"/v1/operations/"+c.id+":cancel", c.cred, "{}"); code != http.StatusOK {
			t.Errorf("cancel of %s: %d %s", c.id, code, body)
		}
	}
}

// TestRateLimitBucketPerSource: the API key's alice emptying her bucket
// leaves the JWT alice hers.
func TestRateLimitBucketPerSource(t *testing.T) {
	// One token every 1000 s: none comes back during the test.
	x := startTwoAlices(t, "", "--rate-limit", "0.001", "--rate-burst", "2")
	alice, jwtAlice := apiKey(aliceKey), bearer(x.token(t, x.name))
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		if code, body := doAs(t, http.MethodGet, x.base+"/v1/tools", alice, ""); code != want {
			t.Fatalf("alice's call %d: %d %s, want %d", i, code, body, want)
		}
	}
	if code, body := doAs(t, http.MethodGet, x.base+"/v1/tools", jwtAlice, ""); code != http.StatusOK {
		t.Fatalf("the JWT alice's first call: %d %s, want 200 from a bucket of her own", code, body)
	}
}

// TestPolicyOfTheAPIKeyUser: a rule naming alice without a source grants
// the API key's alice, not a JWT naming her; a qualified rule grants the
// JWT's alice what it names.
func TestPolicyOfTheAPIKeyUser(t *testing.T) {
	x := startTwoAlices(t, `rules:
  - {users: ["%[1]s"], tools: ["echo"], actions: [list, invoke]}
  - {users: ["jwt(`+testIssuer+`):%[1]s"], tools: ["echo-task"], actions: [invoke]}
`)
	alice, jwtAlice := apiKey(aliceKey), bearer(x.token(t, x.name))
	for _, c := range []struct {
		who  string
		cred credential
		tool string
		want int
	}{
		{"the API key's alice", alice, "echo", http.StatusOK},
		{"the JWT alice", jwtAlice, "echo", http.StatusForbidden},
		{"the JWT alice", jwtAlice, "echo-task", http.StatusOK},
		{"the API key's alice", alice, "echo-task", http.StatusForbidden},
	} {
		code, body := doAs(t, http.MethodPost, x.base+"/v1/tools/"+c.tool+":invoke", c.cred, `{"arguments": {"mode": "user"}}`)
		if code != c.want {
			t.Errorf("%s invoking %s: %d %s, want %d", c.who, c.tool, code, body, c.want)
		}
	}
}
