package brokertest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

// Operations is a deployment of durable operations of a test's own: a key
// made afresh (never committed) and topics no other test uses, so that no
// test's gateways see another's records or take its replies.
type Operations struct {
	KeyFile                string // holds Key
	Key                    []byte
	State, Chunks, Replies string // the topics
}

// NewOperations writes a fresh key to a file in dir and names fresh topics.
func NewOperations(dir string) (Operations, error) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	o := Operations{KeyFile: filepath.Join(dir, "operations.key"), Key: []byte(hex.EncodeToString(b[:])),
		State:   "persistent://tg/operations/" + UniqueTopic("state"),
		Chunks:  "persistent://tg/operations/" + UniqueTopic("chunks"),
		Replies: "persistent://tg/response/" + UniqueTopic("toolgate.operations")}
	return o, os.WriteFile(o.KeyFile, append(o.Key, '\n'), 0o600)
}

// TestOperations is NewOperations in a directory of t's.
func TestOperations(tb testing.TB) Operations {
	tb.Helper()
	o, err := NewOperations(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return o
}

// Flags are the gateway's flags serving durable operations of o.
func (o Operations) Flags() []string {
	return []string{"--operations", "--operations-key-file", o.KeyFile,
		"--operations-state-topic", o.State, "--operations-chunk-topic", o.Chunks, "--operations-reply-topic", o.Replies}
}
