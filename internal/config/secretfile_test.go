package config

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// secret writes a file of mode perm in dir.
func secret(t *testing.T, dir, name string, perm fs.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("0123456789abcdef0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil { // WriteFile's mode passes the umask
		t.Fatal(err)
	}
	return p
}

// TestCheckSecretFile: a secret file others may read or change is
// refused, naming the flag, the file, its mode and the fix; so is one
// its group may when the gateway's user owns it. A file another user
// owns may be read by its group (a Kubernetes Secret volume: root's,
// group the pod's fsGroup, 0440), not changed.
func TestCheckSecretFile(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	dir := t.TempDir()
	own := os.Getuid()
	other := own + 1 // the file is another user's, as the process sees it
	for _, tc := range []struct {
		perm fs.FileMode
		uid  int
		want string // "" for accepted
	}{
		{0o600, own, ""},
		{0o400, own, ""},
		{0o700, own, ""},
		{0o644, own, "permissions 0644 are too open for a file that holds a secret: any user of this machine may read it"},
		{0o604, own, "any user of this machine may read it"},
		{0o602, own, "any user of this machine may change it"},
		{0o666, own, "any user of this machine may read and change it"},
		{0o640, own, "permissions 0640 are too open for a file that holds a secret: the members of its group may read it"},
		{0o440, own, "the members of its group may read it"},
		{0o620, own, "the members of its group may change it"},
		{0o640, other, ""},
		{0o440, other, ""},
		{0o400, other, ""},
		{0o660, other, "the members of its group may change it"},
		{0o644, other, "any user of this machine may read it"},
		{0o444, other, "any user of this machine may read it"},
	} {
		p := secret(t, dir, "key", tc.perm)
		err := checkSecretFile("operations-key-file", p, tc.uid)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%04o, owner's uid %v: %v; want it accepted", tc.perm, tc.uid == own, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) ||
			!strings.HasPrefix(err.Error(), "--operations-key-file "+p+": ") || !strings.HasSuffix(err.Error(), "chmod 600 "+p)):
			t.Errorf("%04o, the gateway's own %v: %v; want an error naming the flag, the file, %q and chmod 600", tc.perm, tc.uid == own, err, tc.want)
		}
	}
	// A link is judged by the file it leads to, as Kubernetes mounts
	// Secrets (key → ..data/key).
	open, closed := secret(t, dir, "open", 0o644), secret(t, dir, "closed", 0o600)
	for target, refused := range map[string]bool{open: true, closed: false} {
		link := filepath.Join(dir, "link-"+filepath.Base(target))
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if err := checkSecretFile("tls-key", link, own); (err != nil) != refused {
			t.Errorf("a link to %s: %v; want refused %v", filepath.Base(target), err, refused)
		}
	}
	// What cannot be read is for its reader to report.
	if err := checkSecretFile("tls-key", filepath.Join(dir, "missing"), own); err != nil {
		t.Errorf("a missing file: %v", err)
	}
}

// TestParseRefusesOpenSecretFiles: the gateway does not start with a
// secret file others may read — the operations' keys, the JWT secret,
// the broker's token, the TLS key — and says which, all at once; files
// of mode 0600 pass, and so do the operations' keys while --operations is
// off (they are not read).
func TestParseRefusesOpenSecretFiles(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	dir := t.TempDir()
	parse := func(args ...string) error {
		_, err := Parse(append([]string{"--allow-anonymous"}, args...), func(string) string { return "" }, io.Discard)
		return err
	}
	flags := []string{"operations-key-file", "operations-previous-key-file", "jwt-hs256-secret-file", "pulsar-token-file", "tls-key"}
	args := func(perm fs.FileMode) []string {
		out := []string{"--operations", "--tls-cert", filepath.Join(dir, "cert.pem")}
		for _, f := range flags {
			out = append(out, "--"+f, secret(t, dir, f+perm.String(), perm))
		}
		return out
	}
	err := parse(args(0o644)...)
	for _, f := range flags {
		if err == nil || !strings.Contains(err.Error(), "--"+f+" ") || !strings.Contains(err.Error(), "permissions 0644 are too open") {
			t.Errorf("--%s of mode 0644: %v; want it refused", f, err)
		}
	}
	if err := parse(args(0o600)...); err != nil {
		t.Errorf("every secret file of mode 0600: %v", err)
	}
	if err := parse("--operations-key-file", secret(t, dir, "unused", 0o644)); err != nil {
		t.Errorf("an operations key without --operations: %v; want it left alone (not read)", err)
	}
}
