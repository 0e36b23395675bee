package operations

import (
	"bytes"
	"encoding/base64"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

func testKeys(t *testing.T, fill byte, verify ...[]byte) *Keys {
	t.Helper()
	k, err := NewKeys(bytes.Repeat([]byte{fill}, MinKeyBytes), verify...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKeysProtect(t *testing.T) {
	t.Parallel()
	k := testKeys(t, 1)
	plainRecord := []byte(`{"id":"` + testID + `","owner":"alice","state":"done","output":"the output"}`)
	record := func() transport.Message {
		return transport.Message{Key: testID, Payload: append([]byte(nil), plainRecord...)}
	}
	chunk := func() transport.Message {
		return transport.Message{Key: testID, Payload: []byte("part"), Properties: map[string]string{wire.PropSeq: "3"}}
	}
	protected := func(kind string, msg transport.Message) transport.Message {
		if err := k.protect(kind, &msg); err != nil {
			t.Fatal(err)
		}
		return msg
	}
	rec := protected(kindRecord, record())
	if bytes.Contains(rec.Payload, []byte("alice")) || bytes.Contains(rec.Payload, []byte("the output")) {
		t.Fatalf("the record travels in clear: %q", rec.Payload)
	}
	if again := protected(kindRecord, record()); bytes.Equal(again.Payload, rec.Payload) {
		t.Fatal("the same record encrypted twice alike")
	}
	if got, err := k.unprotect(kindRecord, rec); err != nil || !bytes.Equal(got, plainRecord) {
		t.Fatalf("a protected record: %q, %v", got, err)
	}
	tomb := protected(kindRecord, transport.Message{Key: testID})
	if got, err := k.unprotect(kindRecord, tomb); err != nil || got != nil || len(tomb.Payload) != 0 {
		t.Fatalf("a protected tombstone: %q %q, %v", tomb.Payload, got, err)
	}
	if got, err := k.unprotect(kindChunk, protected(kindChunk, chunk())); err != nil || string(got) != "part" {
		t.Fatalf("a protected chunk: %q, %v", got, err)
	}
	// resigned: a payload changed by someone who had the key for the
	// code only would still not open
	resigned := func(m transport.Message) transport.Message {
		m.Properties = map[string]string{propMAC: base64.StdEncoding.EncodeToString(mac(k.keys[0], kindRecord, m.Key, -1, false, m.Payload))}
		return m
	}
	for name, c := range map[string]struct {
		kind string
		msg  transport.Message
		want error
	}{
		"unsigned record":    {kindRecord, record(), errUnsigned},
		"unsigned tombstone": {kindRecord, transport.Message{Key: testID}, errUnsigned},
		"payload changed": {kindRecord, func() transport.Message {
			m := protected(kindRecord, record())
			m.Payload[len(m.Payload)-1] ^= 1
			return m
		}(), errBadSignature},
		"payload changed, code made anew": {kindRecord, func() transport.Message {
			m := protected(kindRecord, record())
			m.Payload[len(m.Payload)-1] ^= 1
			return resigned(m)
		}(), errSealed},
		"moved to another key": {kindRecord, func() transport.Message {
			m := protected(kindRecord, record())
			m.Key = "ffffffffffffffffffffffffffffffff"
			return m
		}(), errBadSignature},
		"moved to another key, code made anew": {kindRecord, func() transport.Message {
			m := protected(kindRecord, record())
			m.Key = "ffffffffffffffffffffffffffffffff"
			return resigned(m)
		}(), errSealed},
		"protected with another key": {kindRecord, func() transport.Message {
			m := record()
			_ = testKeys(t, 2).protect(kindRecord, &m)
			return m
		}(), errBadSignature},
		"a record's code on a chunk": {kindChunk, func() transport.Message {
			m := chunk()
			_ = k.protect(kindRecord, &m)
			return m
		}(), errBadSignature},
		"a tombstone's code on a record": {kindRecord, func() transport.Message {
			m := protected(kindRecord, record())
			m.Properties = tomb.Properties
			return m
		}(), errBadSignature},
		"chunk index changed": {kindChunk, func() transport.Message {
			m := protected(kindChunk, chunk())
			m.Properties[wire.PropSeq] = "4"
			return m
		}(), errBadSignature},
		"chunk marked last": {kindChunk, func() transport.Message {
			m := protected(kindChunk, chunk())
			m.Properties[propLast] = "true"
			return m
		}(), errBadSignature},
		"code not base64":                   {kindRecord, transport.Message{Key: testID, Payload: plainRecord, Properties: map[string]string{propMAC: "!!"}}, errBadSignature},
		"payload cut short, code made anew": {kindRecord, resigned(transport.Message{Key: testID, Payload: []byte("short")}), errSealed},
	} {
		if _, err := k.unprotect(c.kind, c.msg); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

// A key being replaced: what the old one protected still opens where it
// is a verify-only key, and nowhere else.
func TestKeysRotation(t *testing.T) {
	t.Parallel()
	old := bytes.Repeat([]byte{1}, MinKeyBytes)
	msg := transport.Message{Key: testID, Payload: []byte(`{}`)}
	if err := testKeys(t, 1).protect(kindRecord, &msg); err != nil {
		t.Fatal(err)
	}
	if got, err := testKeys(t, 2, old).unprotect(kindRecord, msg); err != nil || string(got) != `{}` {
		t.Fatalf("protected with the previous key: %q, %v", got, err)
	}
	if _, err := testKeys(t, 2).unprotect(kindRecord, msg); !errors.Is(err, errBadSignature) {
		t.Fatalf("protected with a key no longer given: %v", err)
	}
}

func TestKeysTooShort(t *testing.T) {
	t.Parallel()
	if _, err := NewKeys(make([]byte, MinKeyBytes-1)); err == nil {
		t.Fatal("a short key accepted")
	}
	if _, err := NewKeys(make([]byte, MinKeyBytes), make([]byte, 3)); err == nil {
		t.Fatal("a short verify-only key accepted")
	}
	dir := t.TempDir()
	short, long := filepath.Join(dir, "short"), filepath.Join(dir, "long")
	_ = os.WriteFile(short, []byte("  0123456789\n"), 0o600)
	_ = os.WriteFile(long, []byte(" 0123456789abcdef0123456789abcdef\n"), 0o600)
	if _, err := ReadKeyFile(short); err == nil {
		t.Fatal("a short key file accepted")
	}
	if k, err := ReadKeyFile(long); err != nil || string(k) != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("key file: %q, %v", k, err)
	}
}

func TestNewNeedsKeys(t *testing.T) {
	t.Parallel()
	if _, err := New(nil, nil, Options{}); !errors.Is(err, ErrNoKeys) {
		t.Fatalf("New without keys: %v, want ErrNoKeys", err)
	}
}

// What the state table brings is admitted only when signed, well formed
// and naming an allowed topic; each refusal is counted by its reason.
func TestAdmitRefusesAndCounts(t *testing.T) {
	t.Parallel()
	k := testKeys(t, 1)
	m, err := New(nil, nil, Options{Keys: k, TopicAllowed: func(topic string) error {
		if topic != wire.RequestTopic("echo") {
			return errors.New("outside tg/request")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(topic string) []byte {
		return []byte(`{"id":"` + testID + `","owner":"a","tool":"echo","state":"running","topic":"` + topic + `"}`)
	}
	signedBy := func(k *Keys, payload []byte) transport.Message {
		msg := transport.Message{Key: testID, Payload: payload}
		if err := k.protect(kindRecord, &msg); err != nil {
			t.Fatal(err)
		}
		return msg
	}
	if r, ok := m.admit(signedBy(k, rec(wire.RequestTopic("echo")))); !ok || r == nil || r.Owner != "a" {
		t.Fatalf("a signed record: %v %v", r, ok)
	}
	if r, ok := m.admit(signedBy(k, nil)); !ok || r != nil {
		t.Fatalf("a signed tombstone: %v %v", r, ok)
	}
	for name, c := range map[string]struct {
		msg    transport.Message
		reason string
	}{
		"unsigned record":         {transport.Message{Key: testID, Payload: rec(wire.RequestTopic("echo"))}, RefusedUnsigned},
		"unsigned tombstone":      {transport.Message{Key: testID}, RefusedUnsigned},
		"signed with another key": {signedBy(testKeys(t, 2), rec(wire.RequestTopic("echo"))), RefusedUnknownKey},
		"signed with another key, not named": {func() transport.Message {
			msg := signedBy(testKeys(t, 2), rec(wire.RequestTopic("echo")))
			delete(msg.Properties, propKeyID)
			return msg
		}(), RefusedSignature},
		"signed with another key, named as ours": {func() transport.Message {
			msg := signedBy(testKeys(t, 2), rec(wire.RequestTopic("echo")))
			msg.Properties[propKeyID] = k.ID()
			return msg
		}(), RefusedSignature},
		"signed, not a record":   {signedBy(k, []byte(`{"id":"x"}`)), RefusedMalformed},
		"a foreign cancel topic": {signedBy(k, rec("persistent://public/default/victim")), RefusedTopic},
	} {
		before := m.Stats().Refused[c.reason]
		if _, ok := m.admit(c.msg); ok {
			t.Errorf("%s: admitted", name)
		}
		if got := m.Stats().Refused[c.reason] - before; got != 1 {
			t.Errorf("%s: %s counted %d times, want once", name, c.reason, got)
		}
	}
}

// A flood of refused messages is logged each at debug level, and as a
// warning once.
func TestRefusalsLogRateLimited(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m, err := New(nil, nil, Options{Keys: testKeys(t, 1), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		m.admit(transport.Message{Key: testID, Payload: []byte(`{}`)})
	}
	if got := m.Stats().Refused[RefusedUnsigned]; got != 100 {
		t.Fatalf("%d refusals counted, want 100", got)
	}
	if debug, warn := strings.Count(buf.String(), "level=DEBUG"), strings.Count(buf.String(), "level=WARN"); debug != 100 || warn != 1 {
		t.Fatalf("%d debug lines and %d warnings, want 100 and 1", debug, warn)
	}
}

func TestStartRefusesWhatNoReaderWouldTake(t *testing.T) {
	m, err := New(nil, nil, Options{Keys: testKeys(t, 1)})
	if err != nil {
		t.Fatal(err)
	}
	m.caughtUp.Store(true)
	long := strings.Repeat("x", maxOwnerBytes+1)
	for _, s := range []StartSpec{{Owner: "jwt(https://idp.example):" + long, Tool: "echo"}, {Owner: "api-key:alice", Tool: long}} {
		if _, err := m.Start(t.Context(), s); !errors.Is(err, ErrTooLong) {
			t.Errorf("Start(owner %d bytes, tool %d bytes) = %v, want ErrTooLong", len(s.Owner), len(s.Tool), err)
		}
	}
}
