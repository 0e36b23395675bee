package auth

import (
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
	svc := Identity{User: "svc-bob", Method: MethodJWT}
	reader := Identity{User: "carol", Roles: []string{"reader"}, Method: MethodMTLS}
	nobody := Identity{User: "mallory", Roles: []string{"writer"}, Method: MethodJWT}
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
