package auth

import (
	"context"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/config"
)

func TestFromConfig(t *testing.T) {
	t.Parallel()
	bad := []struct {
		name string
		c    config.Auth
		want string
	}{
		{"nothing", config.Auth{}, "nothing to authenticate with"},
		{"missing key file", config.Auth{APIKeys: "testdata/nope.yaml"}, "nope.yaml"},
		{"missing secret", config.Auth{JWTSecretFile: "testdata/nope"}, "--jwt-hs256-secret-file"},
		{"missing JWKS", config.Auth{JWTJWKSFile: "testdata/nope"}, "--jwt-jwks-file"},
		{"missing policy", config.Auth{AllowAnonymous: true, DefaultUser: "u", Policy: "testdata/nope.yaml"}, "nope.yaml"},
		{"anonymous without a user", config.Auth{AllowAnonymous: true}, "anonymous calls need a user name"},
	}
	for _, tc := range bad {
		if _, err := FromConfig(tc.c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
	a, err := FromConfig(config.Auth{APIKeys: "testdata/apikeys.yaml", Policy: "testdata/policy.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.bearer(aliceKey, apiKeyMD)
	if err != nil || id.User != "alice" {
		t.Fatalf("alice's key: %v, %v", id, err)
	}
	ctx := newContext(context.Background(), Identity{User: "svc-x"})
	if !a.Allowed(ctx, "invoke", "query-a") || a.Allowed(ctx, "invoke", "other") || a.Allowed(context.Background(), "list", "query-a") {
		t.Error("the policy from the file is not the one applied")
	}
	open, err := FromConfig(config.Auth{AllowAnonymous: true, DefaultUser: "anon"})
	if err != nil || !open.Allowed(context.Background(), "invoke", "anything") {
		t.Fatalf("no policy must allow everything: %v", err)
	}
}
