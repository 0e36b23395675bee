package operations_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
)

// busParty produces on the state topic as anyone granted produce on it
// could: records of its own making, signed with key (nil: unsigned).
type busParty struct {
	p pulsar.Producer
}

func newBusParty(t *testing.T, stateTopic string) *busParty {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: stateTopic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return &busParty{p: p}
}

// put publishes record under id (a tombstone when record is nil):
// encrypted and signed with key, or in clear and unsigned when key is nil.
func (b *busParty) put(t *testing.T, id string, record map[string]any, key []byte) {
	t.Helper()
	var payload []byte
	if record != nil {
		var err error
		if payload, err = json.Marshal(record); err != nil {
			t.Fatal(err)
		}
	}
	msg := &pulsar.ProducerMessage{Key: id, Payload: payload}
	if key != nil {
		if payload != nil {
			msg.Payload = sealRecord(t, key, id, payload)
		}
		msg.Properties = map[string]string{"toolgate-mac": recordMAC(key, id, msg.Payload)}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := b.p.Send(ctx, msg); err != nil {
		t.Fatal(err)
	}
}

// recordHeader is a record's header as docs/operations.md gives it: the
// fields "toolgate-operations-v1", "record", the message key, "-1" and
// "false", each preceded by its length (8 bytes, big-endian).
func recordHeader(id string) []byte {
	var b []byte
	for _, f := range []string{"toolgate-operations-v1", "record", id, "-1", "false"} {
		b = binary.BigEndian.AppendUint64(b, uint64(len(f)))
		b = append(b, f...)
	}
	return b
}

// recordMAC is a record's code: HMAC-SHA256 under the key of its header
// and its payload as sent, length-prefixed alike; base64.
func recordMAC(key []byte, id string, payload []byte) string {
	h := hmac.New(sha256.New, key)
	h.Write(recordHeader(id))
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(payload))))
	h.Write(payload)
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// payloadAEAD is AES-256-GCM under the key HKDF-SHA256 derives from the
// deployment's key and a payload's salt.
func payloadAEAD(t *testing.T, key, salt []byte) cipher.AEAD {
	t.Helper()
	sub, err := hkdf.Key(sha256.New, key, salt, "toolgate-operations-v1 payload", 32)
	if err != nil {
		t.Fatal(err)
	}
	b, err := aes.NewCipher(sub)
	if err != nil {
		t.Fatal(err)
	}
	aead, err := cipher.NewGCM(b)
	if err != nil {
		t.Fatal(err)
	}
	return aead
}

// sealRecord encrypts a record's payload as docs/operations.md gives it:
// a 32-byte random salt, then the ciphertext and tag under a zero nonce,
// the header as additional data.
func sealRecord(t *testing.T, key []byte, id string, plain []byte) []byte {
	t.Helper()
	salt := make([]byte, 32)
	_, _ = rand.Read(salt)
	return payloadAEAD(t, key, salt).Seal(salt, make([]byte, 12), plain, recordHeader(id))
}

// openRecord decrypts a payload sealRecord (or a gateway) made.
func openRecord(t *testing.T, key []byte, id string, sealed []byte) []byte {
	t.Helper()
	if len(sealed) < 48 {
		t.Fatalf("a sealed record of %d bytes", len(sealed))
	}
	plain, err := payloadAEAD(t, key, sealed[:32]).Open(nil, make([]byte, 12), sealed[32:], recordHeader(id))
	if err != nil {
		t.Fatalf("the record of %s does not decrypt with the deployment's key: %v", id, err)
	}
	return plain
}

// recordOf reads operation id's record from the state table as any
// reader of the topic can: its payload as it travels.
func recordOf(t *testing.T, stateTopic, id string) []byte {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.CreateReader(pulsar.ReaderOptions{Topic: stateTopic, StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("reading %s for %s: %v", stateTopic, id, err)
		}
		if m.Key() != id || len(m.Payload()) == 0 {
			continue
		}
		return m.Payload()
	}
}

func newOperationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// TestForgedRecordsRefused: a party that may produce on the state topic,
// without the deployment's key, can no longer overwrite an operation's
// output, delete it, plant operations in a caller's list, lock a caller
// out with running records, or have a gateway send a cancel to a topic
// outside the announcements' allow-list; each record it sends is refused
// and counted in toolgate_operations_records_refused_total.
func TestForgedRecordsRefused(t *testing.T) {
	flags := append(setup(t), "--max-operations-per-caller", "3")
	stateTopic := flagValue(flags, "operations-state-topic")
	key, err := os.ReadFile(flagValue(flags, "operations-key-file"))
	if err != nil {
		t.Fatal(err)
	}
	key = bytes.TrimSpace(key)
	otherKey := bytes.Repeat([]byte("k"), 48)
	g := apptest.Start(t, nil, flags...)
	g.WaitReady(t, 60*time.Second)
	base, admin := "http://"+g.HTTPAddr(), "http://"+g.AdminAddr()
	forger := newBusParty(t, stateTopic)
	refused := func(reason string) float64 {
		return scrape(t, admin, `toolgate_operations_records_refused_total{reason="`+reason+`"}`)
	}
	// waitRefused waits until n more records were refused for reason
	// than before: the gateway has read them.
	waitRefused := func(reason string, before float64, n int) {
		t.Helper()
		eventually.True(t, 20*time.Second, strconv.Itoa(n)+" records refused as "+reason, func() bool {
			return refused(reason)-before >= float64(n)
		})
		if got := refused(reason) - before; got != float64(n) {
			t.Fatalf("%s: %v records refused, want %d", reason, got, n)
		}
	}

	// alice's operation, done; its record as the table holds it tells
	// how the gateway names alice.
	code, op := do(t, http.MethodPost, base+"/v1/tools/echo:start", aliceKey, `{"arguments": {"msg": "the real output"}}`)
	if code != http.StatusOK {
		t.Fatalf("start: %d %v", code, op)
	}
	id := strings.TrimPrefix(op["name"].(string), "operations/")
	eventually.True(t, 20*time.Second, "alice's operation done", func() bool {
		_, got := do(t, http.MethodGet, base+"/v1/operations/"+id, aliceKey, "")
		return got["done"] == true
	})
	// A reader of the topic without the key learns nothing of it.
	raw := recordOf(t, stateTopic, id)
	if bytes.Contains(raw, []byte("the real output")) || bytes.Contains(raw, []byte(`"owner"`)) {
		t.Fatalf("the record travels in clear: %q", raw)
	}
	var real map[string]any
	if err := json.Unmarshal(openRecord(t, key, id, raw), &real); err != nil {
		t.Fatal(err)
	}
	owner, _ := real["owner"].(string)
	if owner == "" {
		t.Fatalf("the record of %s names no owner: %v", id, real)
	}
	now := time.Now().UnixMilli()

	t.Run("forged output", func(t *testing.T) {
		forged := map[string]any{"id": id, "owner": owner, "tool": "echo", "state": "done", "create_ms": now, "deadline_ms": now + 60000,
			"end_ms": now, "output": "FORGED BY A BUS PARTY", "gateway": "forger"}
		unsigned, badSig := refused("unsigned"), refused("bad_signature")
		forger.put(t, id, forged, nil)
		forger.put(t, id, forged, otherKey)
		forger.put(t, id, nil, nil) // and a tombstone
		waitRefused("unsigned", unsigned, 2)
		waitRefused("bad_signature", badSig, 1)
		code, got := do(t, http.MethodGet, base+"/v1/operations/"+id, aliceKey, "")
		resp, _ := got["response"].(map[string]any)
		if code != http.StatusOK || resp == nil || resp["output"] != "the real output" {
			t.Fatalf("after the forgeries: %d %v, want the real output", code, got)
		}
	})

	t.Run("planted record", func(t *testing.T) {
		planted := newOperationID()
		unsigned := refused("unsigned")
		forger.put(t, planted, map[string]any{"id": planted, "owner": owner, "tool": "admin-only-tool", "state": "done",
			"create_ms": now, "deadline_ms": now + 60000, "end_ms": now, "output": "planted"}, nil)
		waitRefused("unsigned", unsigned, 1)
		if code, got := do(t, http.MethodGet, base+"/v1/operations/"+planted, aliceKey, ""); code != http.StatusNotFound {
			t.Fatalf("the planted operation: %d %v, want 404", code, got)
		}
		if _, list := do(t, http.MethodGet, base+"/v1/operations", aliceKey, ""); bytes.Contains(mustJSON(t, list), []byte(planted)) {
			t.Fatalf("alice's list shows the planted operation: %v", list)
		}
	})

	t.Run("cap lock-out", func(t *testing.T) {
		unsigned := refused("unsigned")
		const n = 5 // over the cap of 3
		for range n {
			fid := newOperationID()
			forger.put(t, fid, map[string]any{"id": fid, "owner": owner, "tool": "echo", "state": "running",
				"create_ms": now, "deadline_ms": now + int64(time.Hour/time.Millisecond)}, nil)
		}
		waitRefused("unsigned", unsigned, n)
		code, got := do(t, http.MethodPost, base+"/v1/tools/echo:start", aliceKey, `{"arguments": {"msg": "not locked out"}}`)
		if code != http.StatusOK {
			t.Fatalf("alice's start after %d forged running records: %d %v, want 200", n, code, got)
		}
	})

	t.Run("foreign cancel topic", func(t *testing.T) {
		// Even signed with the deployment's key (a gateway configured
		// otherwise), a record naming a request topic outside the
		// allow-list is refused; unsigned, it is refused as such.
		victim := "persistent://public/default/" + brokertest.UniqueTopic("victim")
		signedID, unsignedID := newOperationID(), newOperationID()
		rec := func(id string) map[string]any {
			return map[string]any{"id": id, "owner": owner, "tool": "echo", "state": "running",
				"create_ms": now, "deadline_ms": now + int64(time.Hour/time.Millisecond), "topic": victim}
		}
		topic, unsigned := refused("topic_not_allowed"), refused("unsigned")
		forger.put(t, signedID, rec(signedID), key)
		forger.put(t, unsignedID, rec(unsignedID), nil)
		waitRefused("topic_not_allowed", topic, 1)
		waitRefused("unsigned", unsigned, 1)
		told := scrape(t, admin, "toolgate_operations_cancels_sent_total")
		for _, fid := range []string{signedID, unsignedID} {
			if code, got := do(t, http.MethodPost, base+"/v1/operations/"+fid+":cancel", aliceKey, "{}"); code != http.StatusNotFound {
				t.Fatalf("cancel of the record naming %s: %d %v, want 404", victim, code, got)
			}
			if code, got := do(t, http.MethodDelete, base+"/v1/operations/"+fid, aliceKey, ""); code != http.StatusNotFound {
				t.Fatalf("delete of the record naming %s: %d %v, want 404", victim, code, got)
			}
		}
		if got := scrape(t, admin, "toolgate_operations_cancels_sent_total") - told; got != 0 {
			t.Fatalf("%v cancels sent", got)
		}
	})

	t.Run("forged chunks", func(t *testing.T) {
		chunkTopic := flagValue(flags, "operations-chunk-topic")
		c, err := pulsar.NewClient(pulsar.ClientOptions{URL: brokertest.PulsarURL()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: chunkTopic})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		// Three chunks 1.5 s apart; forged ones for chunks 1 and 2 (the
		// last) are on the topic long before the real ones.
		code, op := do(t, http.MethodPost, base+"/v1/tools/echo:start", aliceKey, `{"arguments": {"mode": "stream", "n": 3, "gap_ms": 1500}, "timeout": "60s"}`)
		if code != http.StatusOK {
			t.Fatalf("start: %d %v", code, op)
		}
		sid := strings.TrimPrefix(op["name"].(string), "operations/")
		unsigned, badSig := refused("unsigned"), refused("bad_signature")
		for i, mac := range []string{"", recordMAC(otherKey, sid, []byte("FORGED"))} {
			msg := &pulsar.ProducerMessage{Key: sid, Payload: []byte("FORGED"), Properties: map[string]string{"toolgate-seq": strconv.Itoa(i + 1)}}
			if i == 1 {
				msg.Properties["toolgate-last"] = "true"
				msg.Properties["toolgate-mac"] = mac
			}
			if _, err := p.Send(t.Context(), msg); err != nil {
				t.Fatal(err)
			}
		}
		resp := openOpStream(t, base, sid, "", "application/x-ndjson", "")
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		lines := strings.Split(strings.TrimSpace(string(body)), "\n")
		if resp.StatusCode != http.StatusOK || len(lines) != 3 {
			t.Fatalf("the stream: %d %q, want the 3 real chunks", resp.StatusCode, body)
		}
		for i, l := range lines {
			wantChunk(t, decodeChunk(t, l), i, 3)
		}
		if refused("unsigned") <= unsigned || refused("bad_signature") <= badSig {
			t.Fatalf("the forged chunks were not counted: unsigned %v → %v, bad_signature %v → %v", unsigned, refused("unsigned"), badSig, refused("bad_signature"))
		}
	})

	// What the gateway itself signs still passes: a record the test signs
	// with the deployment's key, naming an allowed topic, is alice's.
	t.Run("signed record accepted", func(t *testing.T) {
		fid := newOperationID()
		forger.put(t, fid, map[string]any{"id": fid, "owner": owner, "tool": "echo", "state": "done",
			"create_ms": now, "deadline_ms": now + 60000, "end_ms": now, "output": "signed"}, key)
		eventually.True(t, 20*time.Second, "the signed record in alice's table", func() bool {
			code, _ := do(t, http.MethodGet, base+"/v1/operations/"+fid, aliceKey, "")
			return code == http.StatusOK
		})
	})
}
