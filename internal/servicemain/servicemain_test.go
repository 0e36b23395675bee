package servicemain

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/toolgate/toolgate/toolservice"
)

func handler(context.Context, *toolservice.Request) (any, error) { return "ok", nil }

// Bad connection settings stop the service before it dials, with exit
// code 2; -help is not a failure.
func TestRunFlags(t *testing.T) {
	dir := t.TempDir()
	defaults := toolservice.Config{ID: "svc", Topic: "svc"}
	missing := filepath.Join(dir, "nope")
	cases := []struct {
		args []string
		want int
	}{
		{[]string{"-help"}, 0},
		{[]string{"-no-such-flag"}, 2},
		{[]string{"-pulsar-token-file", missing}, 2},
		{[]string{"-pulsar-tls-ca", missing}, 2},
		{[]string{"-pulsar-url", ""}, 2},
		{[]string{"-announce"}, 2}, // nothing to announce
		{[]string{"-announce-lease", "soon"}, 2},
	}
	for _, c := range cases {
		if got := Run(t.Context(), "svc", c.args, defaults, handler); got != c.want {
			t.Errorf("Run %q = %d, want %d", c.args, got, c.want)
		}
	}
	t.Setenv("TOOLGATE_PULSAR_TOKEN_FILE", missing)
	if got := Run(t.Context(), "svc", nil, defaults, handler); got != 2 {
		t.Errorf("Run with TOOLGATE_PULSAR_TOKEN_FILE of a missing file = %d, want 2", got)
	}
}
