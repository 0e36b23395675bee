package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// secretFile is a flag naming a file that holds a secret: whoever reads
// it can act as the gateway — sign the tokens it accepts, read and forge
// durable operations' records, authenticate to the broker as it, serve
// TLS as it.
type secretFile struct{ flag, path string }

// secretFiles are the secret files this configuration reads.
func (c Config) secretFiles() []secretFile {
	var out []secretFile
	add := func(flag, path string) {
		if path != "" {
			out = append(out, secretFile{flag, path})
		}
	}
	add("jwt-hs256-secret-file", c.Auth.JWTSecretFile)
	add("pulsar-token-file", c.Pulsar.TokenFile)
	add("tls-key", c.TLS.Key)
	add("caller-key-file", c.Callers.KeyFile)
	add("caller-previous-key-file", c.Callers.PreviousKeyFile)
	if c.Operations.Enabled {
		add("operations-key-file", c.Operations.KeyFile)
		add("operations-previous-key-file", c.Operations.PreviousKeyFile)
	}
	return out
}

// checkSecretFiles refuses, at start, a secret file that users other than
// the gateway's may read (checkSecretFile), as ssh refuses a private key
// others can read.
func (c Config) checkSecretFiles() error {
	var errs []error
	for _, f := range c.secretFiles() {
		errs = append(errs, checkSecretFile(f.flag, f.path, os.Getuid()))
	}
	return errors.Join(errs...)
}

// checkSecretFile refuses a secret file, read by the process of user
// uid, that another may read or change: one any user of the machine may
// (a mode that lets others read or write), one the members of its group
// may when the gateway's user owns it — it could be 0600 — and one they
// may change. A file another user owns may be read through its group:
// that is how a Kubernetes Secret volume reaches a pod's user (owned by
// root, group the pod's fsGroup, 0440). A file that cannot be read is
// left to the code that reads it to report; where the system has no Unix
// permissions there is nothing to check.
func checkSecretFile(flag, path string, uid int) error {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	owner, ok := fileOwner(fi)
	if !ok {
		return nil
	}
	perm := fi.Mode().Perm()
	var who string
	switch {
	case perm&0o006 != 0:
		who = "any user of this machine may " + access(perm, 0o004, 0o002)
	case perm&0o060 != 0 && owner == uid:
		who = "the members of its group may " + access(perm, 0o040, 0o020)
	case perm&0o020 != 0:
		who = "the members of its group may change it"
	default:
		return nil
	}
	return fmt.Errorf("--%s %s: permissions %04o are too open for a file that holds a secret: %s. "+
		"Make it readable by the gateway's user alone: chmod 600 %s", flag, path, perm, who, path)
}

// access says what a mode's read and write bits (one of them set) let
// their holders do.
func access(perm, read, write fs.FileMode) string {
	switch {
	case perm&read == 0:
		return "change it"
	case perm&write == 0:
		return "read it"
	}
	return "read and change it"
}
