package auth

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestPolicyAllowed(t *testing.T) {
	t.Parallel()
	yamlPolicy, err := LoadPolicy("testdata/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	jsonPolicy, err := LoadPolicy("testdata/policy.json")
	if err != nil {
		t.Fatal(err)
	}
	var none *Policy
	admin := Identity{User: "alice", Roles: []string{"admin"}, Method: MethodAPIKey}
	svc := Identity{User: "svc-bob", Method: MethodJWT, Issuer: testIssuer}
	reader := Identity{User: "carol", Roles: []string{"reader"}, Method: MethodMTLS}
	nobody := Identity{User: "mallory", Roles: []string{"writer"}, Method: MethodJWT, Issuer: testIssuer}
	anon := Identity{User: "anonymous", Method: MethodAnonymous}
	tests := []struct {
		name   string
		p      *Policy
		id     Identity
		action string
		tool   string
		want   bool
	}{
		{"no policy allows invoke", none, nobody, ActionInvoke, "anything", true},
		{"no policy allows list", none, anon, ActionList, "", true},
		{"admin role, any tool", yamlPolicy, admin, ActionInvoke, "tell-joke", true},
		{"admin role, * action covers list", yamlPolicy, admin, ActionList, "", true},
		{"user glob and tool glob", yamlPolicy, svc, ActionInvoke, "query-orders", true},
		{"tool glob does not match", yamlPolicy, svc, ActionInvoke, "tell-joke", false},
		{"tool glob is whole-name", yamlPolicy, svc, ActionInvoke, "xquery-orders", false},
		{"listing some tool", yamlPolicy, svc, ActionList, "", true},
		{"reader lists one tool", yamlPolicy, reader, ActionList, "tell-joke", true},
		{"reader may not invoke", yamlPolicy, reader, ActionInvoke, "query-orders", false},
		{"no rule for the identity", yamlPolicy, nobody, ActionList, "", false},
		{"anonymous has no rule", yamlPolicy, anon, ActionInvoke, "query-x", false},
		{"action not granted", yamlPolicy, reader, "delete", "x", false},
		{"* is every action", yamlPolicy, admin, "delete", "x", true},
		{"users * includes anonymous", jsonPolicy, anon, ActionInvoke, "tell-joke", true},
		{"json tool glob", jsonPolicy, admin, ActionInvoke, "query-x", false},
		{"json action not granted", jsonPolicy, admin, ActionList, "tell-joke", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.p.Allowed(tc.id, tc.action, tc.tool); got != tc.want {
				t.Fatalf("Allowed(%+v, %s, %q) = %v, want %v", tc.id, tc.action, tc.tool, got, tc.want)
			}
		})
	}
}

func TestParsePolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		data    string
		wantErr []string
	}{
		{"valid", `rules: [{users: ["*"], tools: ["*"], actions: [list]}]`, nil},
		{"empty", ``, []string{"empty"}},
		{"no rules", `rules: []`, []string{"no rules"}},
		{"typo in a field", `rules: [{user: [a], tools: ["*"], actions: [list]}]`, []string{"field user not found"}},
		{"all problems at once", `rules: [{tools: ["*"], actions: [list]}, {users: [a], actions: [run]}, {roles: ["[x"], tools: ["q-["], actions: ["*"]}]`,
			[]string{"rules[0]: name users or roles", "rules[1]: tools is required", `rules[1]: action "run"`, "rules[2]: roles: pattern", "rules[2]: tools: pattern"}},
		{"missing actions", `rules: [{users: [a], tools: [b]}]`, []string{"rules[0]: actions is required"}},
		{"empty pattern", `rules: [{users: [""], tools: [b], actions: [list]}]`, []string{"empty pattern"}},
		{"qualified subjects", `rules: [{users: ["api-key:a", "jwt(https://idp.example/realms/x):svc-*", "jwt:b", "mtls:spiffe://example.org/x", "anonymous:guest"], roles: ["jwt(https://idp.example):admin"], tools: [b], actions: [list]}]`, nil},
		{"unknown source", `rules: [{users: ["spiffe://example.org/x"], tools: [b], actions: [list]}]`, []string{`rules[0]: users: "spiffe://example.org/x": unknown source "spiffe"`}},
		{"issuer of another source", `rules: [{roles: ["mtls(ca):x"], tools: [b], actions: [list]}]`, []string{"rules[0]: roles:", "only jwt subjects name an issuer"}},
		{"empty issuer", `rules: [{users: ["jwt():x"], tools: [b], actions: [list]}]`, []string{"empty issuer"}},
		{"no name", `rules: [{users: ["api-key:"], tools: [b], actions: [list]}]`, []string{"want a name"}},
		{"bad name pattern", `rules: [{users: ["api-key:[x"], tools: [b], actions: [list]}]`, []string{"rules[0]: users: pattern"}},
		{"identities", `{identities: [{subject: "api-key:a", aliases: ["jwt(https://idp):a", "mtls:a"]}, {subject: "api-key:b", aliases: ["jwt:b"]}], rules: [{users: ["*"], tools: [b], actions: [list]}]}`, nil},
		{"identities need rules", `{identities: [{subject: "api-key:a", aliases: ["jwt:a"]}]}`, []string{"no rules"}},
		{"identity problems at once", `{identities: [{subject: "a", aliases: ["jwt:*", "anonymous:guest"]}, {subject: "api-key:b"}, {subject: "api-key:c", aliases: ["api-key:c", "mtls:x"]}, {subject: "api-key:d", aliases: ["mtls:x", "api-key:b"]}], rules: [{users: ["*"], tools: [b], actions: [list]}]}`,
			[]string{`identities[0].subject: "a" names no source`, `identities[0].aliases[0]: "jwt:*": identities name exact subjects`, "identities[0].aliases[1]: \"anonymous:guest\": anonymous callers cannot act as another identity",
				"identities[1]: aliases is required", `identities[2].aliases[0]: "api-key:c" is the subject itself`, `identities[3].aliases[0]: "mtls:x" is already an alias in identities[2]`,
				`identities[3]: "api-key:b" is an alias and also the subject of identities[1]`}},
		{"typo in identities", `{identities: [{subject: "api-key:a", alias: ["jwt:a"]}], rules: [{users: ["*"], tools: [b], actions: [list]}]}`, []string{"field alias not found"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParsePolicy([]byte(tc.data))
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestUnqualifiedEntriesAreWarnedOf: a policy whose users or roles name no
// source is read as naming API-key users and roles, and the gateway says
// so at start when it takes other credentials too.
func TestUnqualifiedEntriesAreWarnedOf(t *testing.T) {
	t.Parallel()
	p, err := ParsePolicy([]byte(`rules:
  - {users: [alice, "api-key:bob", "*"], roles: [admin, "jwt:admin"], tools: ["*"], actions: ["*"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(p.Unqualified(), "; "), "rules[0].users: alice; rules[0].roles: admin"; got != want {
		t.Fatalf("Unqualified() = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		name string
		opts []Option
		warn bool
	}{
		{"API keys only: not ambiguous", []Option{WithAPIKeys(mustKeys(t))}, false},
		{"with JWT", []Option{WithAPIKeys(mustKeys(t)), WithJWT(mustJWT(t))}, true},
		{"with client certificates", []Option{WithAPIKeys(mustKeys(t)), WithClientCerts()}, true},
		{"with anonymous calls", []Option{WithAPIKeys(mustKeys(t)), WithAnonymous("guest")}, true},
	} {
		var buf bytes.Buffer
		if _, err := New(append(tc.opts, WithPolicy(p), WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))...); err != nil {
			t.Fatal(err)
		}
		log := buf.String()
		if warned := strings.Contains(log, "level=WARN") && strings.Contains(log, "rules[0].users: alice"); warned != tc.warn {
			t.Errorf("%s: warned %v, want %v:\n%s", tc.name, warned, tc.warn, log)
		}
	}
}

// TestPolicySubjectsWithSlashes: a user or role glob names every subject
// it reads as, whatever the name holds — a JWT's sub that is a URL, a
// client certificate's SPIFFE ID, a role that is a group path: a '*'
// matches '/' too.
func TestPolicySubjectsWithSlashes(t *testing.T) {
	t.Parallel()
	p, err := ParsePolicy([]byte(`rules:
  - {users: ["jwt:*"], tools: [every-token], actions: [invoke]}
  - {users: ["jwt(https://issuer.example):https://issuer.example/users/*"], tools: [issuer-users], actions: [invoke]}
  - {users: ["mtls:spiffe://example.org/ns/prod/*"], tools: [prod], actions: [invoke]}
  - {users: ["mtls:spiffe://example.org/ns/*/sa/agent"], tools: [agents], actions: [invoke]}
  - {roles: ["jwt(https://issuer.example):/org/*"], tools: [org], actions: [invoke]}
`))
	if err != nil {
		t.Fatal(err)
	}
	alice := Identity{User: "https://issuer.example/users/alice", Method: MethodJWT}
	bob := Identity{User: "https://issuer.example/users/team/bob", Method: MethodJWT, Issuer: "https://issuer.example", Roles: []string{"/org/admins"}}
	carol := Identity{User: "https://issuer.example/groups/carol", Method: MethodJWT, Issuer: "https://issuer.example", Roles: []string{"/other/admins"}}
	prod := Identity{User: "spiffe://example.org/ns/prod/sa/agent", Method: MethodMTLS}
	staging := Identity{User: "spiffe://example.org/ns/staging/sa/agent", Method: MethodMTLS}
	for _, tc := range []struct {
		id   Identity
		tool string
		want bool
	}{
		{alice, "every-token", true},
		{bob, "every-token", false}, // jwt:* is tokens without an issuer
		{bob, "issuer-users", true},
		{carol, "issuer-users", false},
		{alice, "issuer-users", false},
		{prod, "prod", true},
		{staging, "prod", false},
		{prod, "agents", true},
		{staging, "agents", true},
		{bob, "org", true},
		{carol, "org", false},
	} {
		if got := p.Allowed(tc.id, ActionInvoke, tc.tool); got != tc.want {
			t.Errorf("%s may invoke %s: %v, want %v", tc.id.Subject(), tc.tool, got, tc.want)
		}
	}
}
