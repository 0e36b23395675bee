// Command image writes toolgate's container image — the gateway and the
// example tool services, static binaries on an empty base, run as a
// non-root user — as an OCI layout and a tarball, with no container engine
// and no base image to pull. make image runs it (deploy/image.sh).
//
// The same inputs give the same image, byte for byte: every file in the
// layers has the time of -created, and nothing else varies.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user: not root, and numeric so that Kubernetes can check
// runAsNonRoot without reading /etc/passwd.
const (
	uid      = 65532
	userName = "toolgate"
	binDir   = "/usr/local/bin"
)

// commands are the binaries the image holds; the first is its entrypoint.
var commands = []string{"gateway", "echo-service", "joke-service"}

type options struct {
	bin, out, repo    string
	arch              string
	version, revision string
	source, licenses  string
	caBundle          string
	created           int64
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "", "directory holding the static linux binaries "+strings.Join(commands, ", "))
	flag.StringVar(&o.out, "out", "", "directory to write the OCI layout (oci/) and the tarball (toolgate.tar) into")
	flag.StringVar(&o.repo, "repo", "toolgate", "repository name of the tarball's tag (<repo>:<version>)")
	flag.StringVar(&o.arch, "arch", "amd64", "GOARCH the binaries were built for")
	flag.StringVar(&o.version, "version", "", "version: label, annotation and tag")
	flag.StringVar(&o.revision, "revision", "", "VCS revision (label)")
	flag.StringVar(&o.source, "source", "", "URL of the source repository (label)")
	flag.StringVar(&o.licenses, "licenses", "NOASSERTION", "SPDX licence expression (label)")
	flag.StringVar(&o.caBundle, "ca-bundle", "", "PEM bundle of CA certificates, installed as /etc/ssl/certs/ca-certificates.crt")
	flag.Int64Var(&o.created, "created", 0, "creation time, Unix seconds (the last commit's, for a reproducible image)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.bin == "" || o.out == "" || o.version == "" || o.caBundle == "" {
		return errors.New("-bin, -out, -version and -ca-bundle are required")
	}
	img, err := build(o)
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	tag, err := name.NewTag(o.repo + ":" + tagSafe(o.version))
	if err != nil {
		return err
	}
	ociDir := filepath.Join(o.out, "oci")
	if err := os.RemoveAll(ociDir); err != nil {
		return err
	}
	p, err := layout.Write(ociDir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(),
	})); err != nil {
		return err
	}
	tarPath := filepath.Join(o.out, "toolgate.tar")
	if err := tarball.WriteToFile(tarPath, tag, img); err != nil {
		return err
	}
	fmt.Printf("image %s %s\n  OCI layout: %s\n  tarball:    %s (docker load / podman load)\n", tag, digest, ociDir, tarPath)
	return nil
}

// build assembles the image: a layer of the base files, one of the
// binaries, and the config.
func build(o options) (v1.Image, error) {
	created := time.Unix(o.created, 0).UTC()
	ca, err := os.ReadFile(o.caBundle)
	if err != nil {
		return nil, fmt.Errorf("-ca-bundle: %w", err)
	}
	base := []file{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, data: fmt.Appendf(nil,
			"root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/nonexistent:/sbin/nologin\n", userName, uid, uid, userName)},
		{name: "etc/group", mode: 0o644, data: fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\n", userName, uid)},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/local/", mode: 0o755, dir: true},
		{name: strings.TrimPrefix(binDir, "/") + "/", mode: 0o755, dir: true},
	}
	var bins []file
	for _, c := range commands {
		data, err := os.ReadFile(filepath.Join(o.bin, c))
		if err != nil {
			return nil, err
		}
		bins = append(bins, file{name: strings.TrimPrefix(binDir, "/") + "/" + c, mode: 0o755, data: data})
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for _, l := range []struct {
		files []file
		what  string
	}{{base, "base files: /etc/passwd and /etc/group (user " + userName + "), CA certificates, /tmp"},
		{bins, "static binaries: " + strings.Join(commands, ", ")}} {
		layer, err := tarLayer(l.files, created)
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
			History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "toolgate image: " + l.what}})
		if err != nil {
			return nil, err
		}
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "toolgate",
		"org.opencontainers.image.description": "gRPC, REST and MCP gateway in front of tool services on Apache Pulsar",
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.revision":    o.revision,
		"org.opencontainers.image.source":      o.source,
		"org.opencontainers.image.licenses":    o.licenses,
		"org.opencontainers.image.created":     created.Format(time.RFC3339),
	}
	for k, v := range labels {
		if v == "" {
			delete(labels, k)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", o.arch, v1.Time{Time: created}
	cf.Config = v1.Config{
		Entrypoint: []string{binDir + "/" + commands[0]},
		User:       fmt.Sprintf("%d:%d", uid, uid),
		WorkingDir: "/",
		// The gateway's listeners default to loopback; in a container they
		// must face the network.
		Env: []string{
			"PATH=" + binDir,
			"TOOLGATE_GRPC_ADDR=:9090",
			"TOOLGATE_HTTP_ADDR=:8081",
		},
		ExposedPorts: map[string]struct{}{"9090/tcp": {}, "8081/tcp": {}},
		Labels:       labels,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

// A file is one entry of a layer.
type file struct {
	name string
	mode int64
	dir  bool
	data []byte
}

// tarLayer is a gzipped layer of files, in name order, owned by root, all
// with the time t.
func tarLayer(files []file, t time.Time) (v1.Layer, error) {
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: t, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(f.data))}
		if f.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// tagSafe turns a version into a valid tag: letters, digits, _ . and -.
func tagSafe(v string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			return r
		}
		return '-'
	}, v)
}
