package config

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/callerassert"
)

// TestCallerFlags: the caller assertions' flags, their defaults, what
// needs --caller-key-file, and the key file checked as a secret.
func TestCallerFlags(t *testing.T) {
	reg := filepath.Join(t.TempDir(), "r.yaml")
	if err := os.WriteFile(reg, []byte("tool: {}"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TOOLGATE_REGISTRY": reg, "TOOLGATE_ALLOW_ANONYMOUS": "true"}
	getenv := func(k string) string { return env[k] }
	c, err := Parse(nil, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Callers != (Callers{Issuer: callerassert.DefaultIssuer}) {
		t.Errorf("by default %+v: want no key and issuer %q", c.Callers, callerassert.DefaultIssuer)
	}
	dir := t.TempDir()
	key := filepath.Join(dir, "caller.pem")
	if err := os.WriteFile(key, []byte("-----BEGIN PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = Parse([]string{"--caller-key-file", key, "--caller-previous-key-file", key, "--caller-issuer", "prod", "--caller-jwks-public"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Callers != (Callers{KeyFile: key, PreviousKeyFile: key, Issuer: "prod", JWKSPublic: true}) {
		t.Errorf("%+v", c.Callers)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--caller-previous-key-file", key}, "need --caller-key-file"},
		{[]string{"--caller-jwks-public"}, "need --caller-key-file"},
		{[]string{"--caller-key-file", key, "--caller-issuer", ""}, "--caller-issuer must not be empty"},
	} {
		if _, err := Parse(tc.args, getenv, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse([]string{"--caller-key-file", key}, getenv, io.Discard); err == nil || !strings.Contains(err.Error(), "--caller-key-file") {
		t.Errorf("a key any user may read: %v, want it refused", err)
	}
}
