package config

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestInstanceIDAndReplyTo(t *testing.T) {
	t.Parallel()
	reg := filepath.Join(t.TempDir(), "r.yaml")
	if err := os.WriteFile(reg, []byte("tool: {}"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TOOLGATE_REGISTRY": reg, "TOOLGATE_ALLOW_ANONYMOUS": "true"}
	getenv := func(k string) string { return env[k] }

	a, err := Parse(nil, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse(nil, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Bridge.ReplyTo {
		t.Fatal("--reply-to defaults to false, want true")
	}
	if !regexp.MustCompile(`^[A-Za-z0-9_\-]+-[0-9a-f]{6}$`).MatchString(a.InstanceID) || a.InstanceID == b.InstanceID {
		t.Fatalf("default instance ids %q and %q: want host name and a random suffix, different each time", a.InstanceID, b.InstanceID)
	}

	env["TOOLGATE_INSTANCE_ID"] = "gw-from-env"
	env["TOOLGATE_REPLY_TO"] = "false"
	c, err := Parse(nil, getenv, io.Discard)
	if err != nil || c.InstanceID != "gw-from-env" || c.Bridge.ReplyTo {
		t.Fatalf("from env: %q, reply-to %v, %v; want gw-from-env, false", c.InstanceID, c.Bridge.ReplyTo, err)
	}
	if c, err := Parse([]string{"--instance-id", "gw-1", "--reply-to=true"}, getenv, io.Discard); err != nil || c.InstanceID != "gw-1" || !c.Bridge.ReplyTo {
		t.Fatalf("flags: %q, reply-to %v, %v; want gw-1, true", c.InstanceID, c.Bridge.ReplyTo, err)
	}
	for _, bad := range []string{"gw/1", "gw 1", "gw:1", strings.Repeat("x", 201)} {
		_, err := Parse([]string{"--instance-id", bad}, getenv, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--instance-id") {
			t.Errorf("--instance-id %q: %v, want an error naming the flag", bad, err)
		}
	}
	env["TOOLGATE_REPLY_TO"] = "maybe"
	if _, err := Parse(nil, getenv, io.Discard); err == nil || !strings.Contains(err.Error(), "TOOLGATE_REPLY_TO") {
		t.Fatalf("TOOLGATE_REPLY_TO=maybe: %v, want an error naming it", err)
	}
}
