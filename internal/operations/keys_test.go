package operations

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
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

func TestKeysSignAndVerify(t *testing.T) {
	t.Parallel()
	k := testKeys(t, 1)
	record := func() transport.Message {
		return transport.Message{Key: testID, Payload: []byte(`{"id":"` + testID + `","owner":"a","state":"done","output":"x"}`)}
	}
	chunk := func() transport.Message {
		return transport.Message{Key: testID, Payload: []byte("part"), Properties: map[string]string{wire.PropSeq: "3"}}
	}
	signed := func(kind string, msg transport.Message) transport.Message {
		k.sign(kind, &msg)
		return msg
	}
	if err := k.verify(kindRecord, signed(kindRecord, record())); err != nil {
		t.Fatalf("a signed record: %v", err)
	}
	tomb := signed(kindRecord, transport.Message{Key: testID})
	if err := k.verify(kindRecord, tomb); err != nil {
		t.Fatalf("a signed tombstone: %v", err)
	}
	if err := k.verify(kindChunk, signed(kindChunk, chunk())); err != nil {
		t.Fatalf("a signed chunk: %v", err)
	}
	for name, c := range map[string]struct {
		kind string
		msg  transport.Message
		want error
	}{
		"unsigned record": {kindRecord, record(), errUnsigned},
		"output changed": {kindRecord, func() transport.Message {
			m := signed(kindRecord, record())
			m.Payload = bytes.Replace(m.Payload, []byte(`"x"`), []byte(`"FORGED"`), 1)
			return m
		}(), errBadSignature},
		"moved to another key": {kindRecord, func() transport.Message {
			m := signed(kindRecord, record())
			m.Key = "ffffffffffffffffffffffffffffffff"
			return m
		}(), errBadSignature},
		"signed with another key": {kindRecord, func() transport.Message {
			m := record()
			testKeys(t, 2).sign(kindRecord, &m)
			return m
		}(), errBadSignature},
		"a record's code on a chunk": {kindChunk, signed(kindRecord, chunk()), errBadSignature},
		"a tombstone's code on a record": {kindRecord, func() transport.Message {
			m := record()
			m.Properties = tomb.Properties
			return m
		}(), errBadSignature},
		"chunk index changed": {kindChunk, func() transport.Message {
			m := signed(kindChunk, chunk())
			m.Properties[wire.PropSeq] = "4"
			return m
		}(), errBadSignature},
		"chunk marked last": {kindChunk, func() transport.Message {
			m := signed(kindChunk, chunk())
			m.Properties[propLast] = "true"
			return m
		}(), errBadSignature},
		"code not base64": {kindRecord, transport.Message{Key: testID, Payload: record().Payload, Properties: map[string]string{propMAC: "!!"}}, errBadSignature},
	} {
		if err := k.verify(c.kind, c.msg); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

// A key being replaced: what the old one signed still passes where it is
// a verify-only key, and nowhere else.
func TestKeysRotation(t *testing.T) {
	t.Parallel()
	old := bytes.Repeat([]byte{1}, MinKeyBytes)
	msg := transport.Message{Key: testID, Payload: []byte(`{}`)}
	testKeys(t, 1).sign(kindRecord, &msg)
	if err := testKeys(t, 2, old).verify(kindRecord, msg); err != nil {
		t.Fatalf("signed with the previous key: %v", err)
	}
	if err := testKeys(t, 2).verify(kindRecord, msg); !errors.Is(err, errBadSignature) {
		t.Fatalf("signed with a key no longer given: %v", err)
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
		k.sign(kindRecord, &msg)
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
		"signed with another key": {signedBy(testKeys(t, 2), rec(wire.RequestTopic("echo"))), RefusedSignature},
		"signed, not a record":    {signedBy(k, []byte(`{"id":"x"}`)), RefusedMalformed},
		"a foreign cancel topic":  {signedBy(k, rec("persistent://public/default/victim")), RefusedTopic},
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
