package deploy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
)

// testVersion is stamped into the image the test builds.
const testVersion = "v0.0.0-imagetest"

// imageCommands are the binaries the image holds, its entrypoint first.
var imageCommands = []string{"gateway", "echo-service", "joke-service"}

// TestImage builds the image with make image, unpacks it as a container
// runtime would, and runs what it holds: every command's --version, then
// echo-service and the entrypoint with the image's user, environment and
// filesystem (chroot into the unpacked layers when the test runs as root)
// against the test broker, a call through the gateway to the service, and
// a SIGTERM each must survive cleanly.
// Packing the same binaries again must give the same digest.
func TestImage(t *testing.T) {
	t.Parallel()
	brokertest.RequirePulsar(t)
	cache := t.TempDir()
	out := makeImage(t, cache)
	img := readLayout(t, filepath.Join(out, "oci"))

	cfg := img.config.Config
	if cfg.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (non-root, numeric for runAsNonRoot)", cfg.User)
	}
	if want := []string{"/usr/local/bin/gateway"}; !slices.Equal(cfg.Entrypoint, want) {
		t.Errorf("entrypoint %q, want %q", cfg.Entrypoint, want)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.source":   "https://",
		"org.opencontainers.image.licenses": "",
		"org.opencontainers.image.revision": "",
	} {
		if v, ok := cfg.Labels[k]; !ok || v == "" || !strings.HasPrefix(v, want) {
			t.Errorf("label %s = %q, want a value starting %q", k, v, want)
		}
	}
	if img.config.OS != "linux" || len(img.layers) != 2 {
		t.Errorf("os %q with %d layers, want linux with 2 (base files, binaries)", img.config.OS, len(img.layers))
	}

	root := filepath.Join(t.TempDir(), "rootfs")
	for _, l := range img.layers {
		unpack(t, root, l)
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil || !strings.Contains(string(passwd), "\ntoolgate:x:65532:65532:") {
		t.Errorf("/etc/passwd lacks the user 65532 (%v):\n%s", err, passwd)
	}
	if ca, err := os.ReadFile(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt")); err != nil || !bytes.Contains(ca, []byte("BEGIN CERTIFICATE")) {
		t.Errorf("no CA certificates in the image: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(root, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("/tmp: %v %v, want a world-writable sticky directory", fi, err)
	}
	for _, c := range imageCommands {
		bin := filepath.Join(root, "usr/local/bin", c)
		checkStatic(t, bin)
		got, err := exec.Command(bin, "--version").CombinedOutput()
		if want := c + " " + testVersion + " ("; err != nil || !strings.HasPrefix(string(got), want) {
			t.Errorf("%s --version = %q (%v), want it to start %q", c, got, err, want)
		}
	}
	if t.Failed() {
		return
	}
	startGateway(t, root, cfg)

	// The same binaries give the same image. (The binaries themselves are
	// reproducible by Go's own rules, -trimpath given: building them again
	// here would also see edits made to the work tree meanwhile.)
	again := readLayout(t, filepath.Join(makeImage(t, t.TempDir(), "IMAGE_BIN="+filepath.Join(out, "bin")), "oci"))
	if again.digest != img.digest {
		t.Errorf("packing the same binaries again gave %s, the first time %s: the image is not reproducible", again.digest, img.digest)
	}
}

// makeImage runs make image, with env added to the environment, its output
// under cache, and returns the image's directory.
func makeImage(t *testing.T, cache string, env ...string) string {
	t.Helper()
	cmd := exec.Command("make", "-s", "image")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "TOOLGATE_CACHE="+cache, "IMAGE_VERSION="+testVersion,
		// fixed, so that a commit made meanwhile cannot change the image
		"IMAGE_REVISION=0123456789abcdef0123456789abcdef01234567", "SOURCE_DATE_EPOCH=1767225600")
	cmd.Env = append(cmd.Env, env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	return filepath.Join(cache, "image")
}

// startGateway runs the image's echo-service and its entrypoint, the
// gateway, each with the image's user and environment, against the test
// broker (on an announcement topic and a request topic of their own, so
// that other tests' gateways see neither); waits for /readyz, calls the
// echo tool the service announced through the gateway's REST API, and
// stops both with SIGTERM, which must end them with status 0.
func startGateway(t *testing.T, root string, cfg imageConfig) {
	t.Helper()
	id := brokertest.UniqueTopic("imagetest")
	announce := "persistent://tg/config/" + id
	echo := startInImage(t, root, cfg, []string{"/usr/local/bin/echo-service",
		"--id", id, "--topic", id, "--announce-topic", announce}, "TOOLGATE_PULSAR_URL="+brokertest.PulsarURL())
	httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
	gw := startInImage(t, root, cfg, cfg.Entrypoint,
		"TOOLGATE_PULSAR_URL="+brokertest.PulsarURL(),
		"TOOLGATE_PULSAR_ADMIN_URL="+brokertest.AdminURL(),
		"TOOLGATE_HTTP_ADDR="+httpAddr,
		"TOOLGATE_GRPC_ADDR="+grpcAddr,
		"TOOLGATE_ADMIN_ADDR=127.0.0.1:0",
		"TOOLGATE_ALLOW_ANONYMOUS=true",
		"TOOLGATE_ANNOUNCE_TOPIC="+announce,
		"TOOLGATE_INSTANCE_ID="+id,
	)

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	base := "http://" + httpAddr
	gw.await(t, "/readyz to answer 200", func() error {
		_, err := get(client, base+"/readyz")
		return err
	})
	gw.await(t, "the announced echo tool to be listed", func() error {
		body, err := get(client, base+"/v1/tools")
		if err == nil && !strings.Contains(body, `"echo"`) {
			err = fmt.Errorf("not listed yet: %s", body)
		}
		return err
	})
	resp, err := client.Post(base+"/v1/tools/echo:invoke", "application/json", strings.NewReader(`{"arguments": {"msg": "hello from the image"}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"hello from the image"`) {
		t.Errorf("POST /v1/tools/echo:invoke: %s %s", resp.Status, body)
	}
	gw.stop(t)
	echo.stop(t)
}

// A process runs a command of the unpacked image.
type process struct {
	name    string
	cmd     *exec.Cmd
	exited  chan error
	running bool
	logs    bytes.Buffer
}

// startInImage runs argv from the image at root with the image's
// environment plus env. As root it runs as a container runtime would: in
// a chroot of the image's files, as the image's user. The process is
// killed when the test ends, and its output logged if the test failed.
func startInImage(t *testing.T, root string, cfg imageConfig, argv []string, env ...string) *process {
	t.Helper()
	p := &process{name: filepath.Base(argv[0]), exited: make(chan error, 1)}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = append(slices.Clone(cfg.Env), env...)
	if os.Geteuid() == 0 {
		uid, gid := parseUser(t, cfg.User)
		p.cmd.Dir = cfg.WorkingDir
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	} else {
		t.Logf("not root: running %s from the unpacked image without chroot or its user", argv[0])
		p.cmd.Path = filepath.Join(root, argv[0])
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.logs, &p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", argv[0], err)
	}
	p.running = true
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.running {
			_ = p.cmd.Process.Kill()
			t.Logf("%s killed: %v", p.name, <-p.exited)
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", p.name, p.logs.String())
		}
	})
	if p.cmd.SysProcAttr != nil {
		// It runs in the image's files, as the image's user.
		uid, _ := parseUser(t, cfg.User)
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
		if err != nil || !regexp.MustCompile(fmt.Sprintf(`(?m)^Uid:\t%d\t`, uid)).Match(status) {
			t.Errorf("%s does not run as uid %d (%v):\n%s", p.name, uid, err, status)
		}
		if got, err := os.Readlink(fmt.Sprintf("/proc/%d/root", p.cmd.Process.Pid)); err != nil || got != root {
			t.Errorf("%s's root is %q (%v), want the unpacked image %s", p.name, got, err, root)
		}
	}
	return p
}

// await polls check until it returns nil, for at most 60 s; it fails the
// test if the process ends first.
func (p *process) await(t *testing.T, what string, check func() error) {
	t.Helper()
	eventually.Succeeds(t, 60*time.Second, what, func() error {
		select {
		case err := <-p.exited:
			p.running = false
			t.Fatalf("%s exited while the test waited for %s: %v", p.name, what, err)
		default:
		}
		return check()
	})
}

// stop sends SIGTERM and wants status 0 within 30 s.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		p.running = false
		if err != nil {
			t.Errorf("%s ended with %v after SIGTERM, want status 0", p.name, err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s still runs 30 s after SIGTERM", p.name)
	}
}

// get returns the body of a 200 answer to GET url.
func get(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, body)
	}
	return string(body), err
}

func parseUser(t *testing.T, user string) (uint32, uint32) {
	t.Helper()
	u, g, ok := strings.Cut(user, ":")
	uid, err1 := strconv.ParseUint(u, 10, 32)
	gid, err2 := strconv.ParseUint(g, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		t.Fatalf("user %q: want uid:gid", user)
	}
	return uint32(uid), uint32(gid)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return brokertest.FreeAddr(t)
}

// checkStatic fails unless path is an ELF executable without an
// interpreter or shared libraries: it must run on an empty base.
func checkStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s asks for a dynamic loader: not static", path)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v: not static", path, libs)
	}
}

// The parts of an OCI image the test reads.
type (
	descriptor struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
	}
	imageConfig struct {
		Entrypoint []string          `json:"Entrypoint"`
		User       string            `json:"User"`
		Env        []string          `json:"Env"`
		WorkingDir string            `json:"WorkingDir"`
		Labels     map[string]string `json:"Labels"`
	}
	configFile struct {
		OS     string      `json:"os"`
		Config imageConfig `json:"config"`
	}
	image struct {
		digest string
		config configFile
		layers []string // blob paths, base first
	}
)

// readLayout reads the one image of the OCI layout at dir.
func readLayout(t *testing.T, dir string) image {
	t.Helper()
	blob := func(digest string) string {
		alg, hex, _ := strings.Cut(digest, ":")
		return filepath.Join(dir, "blobs", alg, hex)
	}
	read := func(path string, v any) {
		b, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(b, v)
		}
		if err != nil {
			t.Fatalf("OCI layout: %v", err)
		}
	}
	var layoutFile struct {
		Version string `json:"imageLayoutVersion"`
	}
	read(filepath.Join(dir, "oci-layout"), &layoutFile)
	var index struct{ Manifests []descriptor }
	read(filepath.Join(dir, "index.json"), &index)
	if layoutFile.Version != "1.0.0" || len(index.Manifests) != 1 {
		t.Fatalf("OCI layout version %q with %d manifests, want 1.0.0 with 1", layoutFile.Version, len(index.Manifests))
	}
	var manifest struct {
		Config descriptor
		Layers []descriptor
	}
	read(blob(index.Manifests[0].Digest), &manifest)
	img := image{digest: index.Manifests[0].Digest}
	read(blob(manifest.Config.Digest), &img.config)
	for _, l := range manifest.Layers {
		if l.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Fatalf("layer media type %q", l.MediaType)
		}
		img.layers = append(img.layers, blob(l.Digest))
	}
	return img
}

// unpack extracts the gzipped layer at path into root: directories and
// regular files only, none outside root.
func unpack(t *testing.T, root, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Clean(h.Name)
		if !filepath.IsLocal(name) {
			t.Fatalf("layer entry %q leaves the root", h.Name)
		}
		dst := filepath.Join(root, name)
		mode := os.FileMode(h.Mode).Perm() | modeBits(h.Mode)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			w, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err == nil {
				_, err = io.Copy(w, tr)
				err = errors.Join(err, w.Close())
			}
			if err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("layer entry %q has type %q; the image holds only directories and files", h.Name, h.Typeflag)
		}
		if err := os.Chmod(dst, mode); err != nil { // after creation: the umask must not narrow it
			t.Fatal(err)
		}
	}
}

// modeBits turns the sticky, setuid and setgid bits of a tar mode into
// Go's.
func modeBits(m int64) os.FileMode {
	var fm os.FileMode
	for _, b := range []struct {
		tar int64
		fm  os.FileMode
	}{{0o1000, os.ModeSticky}, {0o2000, os.ModeSetgid}, {0o4000, os.ModeSetuid}} {
		if m&b.tar != 0 {
			fm |= b.fm
		}
	}
	return fm
}
