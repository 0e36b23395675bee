package operations_test

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/toolservice"
)

// keyID is a key's id as docs/operations.md gives it: the first 8 bytes
// of HMAC-SHA256 under the key of "toolgate-operations-v1 key id", hex.
func keyID(key []byte) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("toolgate-operations-v1 key id"))
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// madeID is an operation id as docs/operations.md gives it, made at at
// under key: 12 hex digits of Unix milliseconds, 32 random ones, and the
// first 4 bytes of HMAC-SHA256 under the key of "toolgate-operations-v1 id "
// and those 44 digits, hex.
func madeID(key []byte, at time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	body := fmt.Sprintf("%012x", at.UnixMilli()) + hex.EncodeToString(b[:])
	h := hmac.New(sha256.New, key)
	h.Write([]byte("toolgate-operations-v1 id " + body))
	return body + hex.EncodeToString(h.Sum(nil)[:4])
}

// withFlag is flags with the value of --name replaced by value.
func withFlag(flags []string, name, value string) []string {
	out := slices.Clone(flags)
	for i, f := range out {
		if f == "--"+name && i+1 < len(out) {
			out[i+1] = value
		}
	}
	return out
}

// readyDetails are the details /readyz on the admin listener gives.
func readyDetails(t *testing.T, admin string) map[string]any {
	t.Helper()
	resp, err := http.Get(admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Details map[string]any `json:"details"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return body.Details
}

// TestTwoDeploymentsKeepTheirReplies: two deployments with different
// operations keys on the same topics (state, chunks, reply stem) each
// finish every operation they start — neither takes the other's replies,
// which it could not read — and each reports the other's key as one it
// does not hold (operations_foreign_keys, unknown_key refusals).
func TestTwoDeploymentsKeepTheirReplies(t *testing.T) {
	flags := setup(t)
	other := brokertest.TestOperations(t)
	mine, err := readKey(flagValue(flags, "operations-key-file"))
	if err != nil {
		t.Fatal(err)
	}
	a := apptest.Start(t, nil, flags...)
	b := apptest.Start(t, nil, withFlag(flags, "operations-key-file", other.KeyFile)...)
	a.WaitReady(t, 60*time.Second)
	b.WaitReady(t, 60*time.Second)
	const n = 20
	type started struct{ base, id, msg string }
	var ops []started
	for i := range n {
		for g, gw := range []*apptest.Gateway{a, b} {
			base := "http://" + gw.HTTPAddr()
			msg := fmt.Sprintf("deployment %d, operation %d", g, i)
			code, op := do(t, http.MethodPost, base+"/v1/tools/echo:start", aliceKey, `{"arguments": {"msg": "`+msg+`"}, "timeout": "60s"}`)
			if code != http.StatusOK {
				t.Fatalf("start on deployment %d: %d %v", g, code, op)
			}
			ops = append(ops, started{base, strings.TrimPrefix(op["name"].(string), "operations/"), msg})
		}
	}
	for _, o := range ops {
		eventually.True(t, 30*time.Second, "operation "+o.id+" done on its deployment", func() bool {
			code, got := do(t, http.MethodGet, o.base+"/v1/operations/"+o.id, aliceKey, "")
			if code != http.StatusOK || got["done"] != true {
				return false
			}
			resp, _ := got["response"].(map[string]any)
			if resp == nil || resp["output"] != o.msg {
				t.Fatalf("operation %s: %v, want done with %q", o.id, got, o.msg)
			}
			return true
		})
	}
	for name, c := range map[string]struct {
		gw        *apptest.Gateway
		own, they []byte
	}{"A": {a, mine, other.Key}, "B": {b, other.Key, mine}} {
		admin := "http://" + c.gw.AdminAddr()
		d := readyDetails(t, admin)
		if keys, _ := d["operations_keys"].([]any); len(keys) != 1 || keys[0] != keyID(c.own) {
			t.Fatalf("%s: operations_keys %v, want [%s]", name, d["operations_keys"], keyID(c.own))
		}
		stem := flagValue(flags, "operations-reply-topic")
		if topics, _ := d["operations_reply_topics"].([]any); len(topics) != 1 || topics[0] != stem+"."+keyID(c.own) {
			t.Fatalf("%s: operations_reply_topics %v, want [%s.%s]", name, d["operations_reply_topics"], stem, keyID(c.own))
		}
		eventually.True(t, 10*time.Second, name+" reporting the other deployment's key", func() bool {
			foreign, _ := readyDetails(t, admin)["operations_foreign_keys"].([]any)
			return slices.Contains(foreign, any(keyID(c.they)))
		})
		if got := scrape(t, admin, `toolgate_operations_records_refused_total{reason="unknown_key"}`); got < n {
			t.Fatalf("%s: %v records refused as unknown_key, want the other's %d at least", name, got, n)
		}
	}
}

// readKey is the key a key file holds, as the gateway reads it.
func readKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	return []byte(strings.TrimSpace(string(b))), err
}

// madeBy reports whether id is an id madeID makes under key.
func madeBy(key []byte, id string) bool {
	if len(id) != 52 {
		return false
	}
	h := hmac.New(sha256.New, key)
	h.Write([]byte("toolgate-operations-v1 id " + id[:44]))
	return id[44:] == hex.EncodeToString(h.Sum(nil)[:4])
}

// stateMessages are the messages keyed id on the state topic, in order.
func stateMessages(t *testing.T, stateTopic, id string) []pulsar.Message {
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
	var out []pulsar.Message
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for r.HasNext() {
		m, err := r.Next(ctx)
		if err != nil {
			t.Fatalf("reading %s: %v", stateTopic, err)
		}
		if m.Key() == id {
			out = append(out, m)
		}
	}
	return out
}

// stateOf is the state a record message holds, opened with key.
func stateOf(t *testing.T, key []byte, id string, m pulsar.Message) string {
	t.Helper()
	if len(m.Payload()) == 0 {
		return "(tombstone)"
	}
	var r struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal(openRecord(t, key, id, m.Payload()), &r); err != nil {
		t.Fatal(err)
	}
	return r.State
}

// compact has the broker compact topic and waits for it to finish.
func compact(t *testing.T, topic string) {
	t.Helper()
	path := brokertest.AdminURL() + "/admin/v2/persistent/" + strings.TrimPrefix(topic, "persistent://") + "/compaction"
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusConflict {
		t.Fatalf("compaction of %s: HTTP %d", topic, resp.StatusCode)
	}
	eventually.True(t, 60*time.Second, "the compaction of "+topic+" done", func() bool {
		resp, err := http.Get(path)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var st struct {
			Status    string `json:"status"`
			LastError string `json:"lastError"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&st)
		if st.Status == "ERROR" {
			t.Fatalf("compaction of %s: %s", topic, st.LastError)
		}
		return st.Status == "SUCCESS"
	})
}

// TestReplayedRecordChangesNothing: the running record of an operation
// done, published again after its end (as a producer's retry or a party
// replaying it would), changes nothing on the gateway reading live, and
// that gateway writes the end again over it, so that a gateway started
// after a compaction (the last record of each operation only) reports the
// operation done too.
func TestReplayedRecordChangesNothing(t *testing.T) {
	flags := setup(t)
	key, err := readKey(flagValue(flags, "operations-key-file"))
	if err != nil {
		t.Fatal(err)
	}
	stateTopic := flagValue(flags, "operations-state-topic")
	a := apptest.Start(t, nil, flags...)
	a.WaitReady(t, 60*time.Second)
	aBase := "http://" + a.HTTPAddr()
	code, op := do(t, http.MethodPost, aBase+"/v1/tools/echo:start", aliceKey, `{"arguments": {"msg": "the answer"}, "timeout": "120s"}`)
	if code != http.StatusOK {
		t.Fatalf("start: %d %v", code, op)
	}
	id := strings.TrimPrefix(op["name"].(string), "operations/")
	eventually.True(t, 20*time.Second, "the operation done", func() bool {
		_, got := do(t, http.MethodGet, aBase+"/v1/operations/"+id, aliceKey, "")
		return got["done"] == true
	})
	msgs := stateMessages(t, stateTopic, id)
	if len(msgs) < 2 || stateOf(t, key, id, msgs[0]) != "running" || stateOf(t, key, id, msgs[len(msgs)-1]) != "done" {
		t.Fatalf("%d records of the operation on the state topic", len(msgs))
	}
	// The running record, as the gateway wrote it, once more.
	replay := newBusParty(t, stateTopic)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := replay.p.Send(ctx, &pulsar.ProducerMessage{Key: id, Payload: msgs[0].Payload(), Properties: msgs[0].Properties()}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "the end written again after the replay", func() bool {
		msgs := stateMessages(t, stateTopic, id)
		return len(msgs) >= 4 && stateOf(t, key, id, msgs[len(msgs)-1]) == "done"
	})
	if _, got := do(t, http.MethodGet, aBase+"/v1/operations/"+id, aliceKey, ""); got["done"] != true {
		t.Fatalf("after the replay, the gateway reading live: %v", got)
	}
	compact(t, stateTopic)
	c := apptest.Start(t, nil, flags...)
	c.WaitReady(t, 60*time.Second)
	code, got := do(t, http.MethodGet, "http://"+c.HTTPAddr()+"/v1/operations/"+id, aliceKey, "")
	resp, _ := got["response"].(map[string]any)
	if code != http.StatusOK || got["done"] != true || resp == nil || resp["output"] != "the answer" {
		t.Fatalf("a gateway started after the compaction: %d %v, want it done with its answer", code, got)
	}
}

// TestOperationNotSeenYet: a GET of an id the deployment made a moment
// ago whose record the gateway's table has not read is UNAVAILABLE with a
// Retry-After (OPERATION_NOT_SEEN_YET), never NOT_FOUND, and the
// operation once its record is read; an id no key of the deployment made
// is NOT_FOUND.
func TestOperationNotSeenYet(t *testing.T) {
	flags := setup(t)
	key, err := readKey(flagValue(flags, "operations-key-file"))
	if err != nil {
		t.Fatal(err)
	}
	g := apptest.Start(t, nil, flags...)
	g.WaitReady(t, 60*time.Second)
	base := "http://" + g.HTTPAddr()
	// alice's owner, from an operation of hers.
	code, op := do(t, http.MethodPost, base+"/v1/tools/echo:start", aliceKey, `{"arguments": {"msg": "x"}}`)
	if code != http.StatusOK {
		t.Fatalf("start: %d %v", code, op)
	}
	real := strings.TrimPrefix(op["name"].(string), "operations/")
	if !madeBy(key, real) {
		t.Fatalf("operation id %q: want 52 hex digits, the last 8 the tag of the first 44 under the deployment's key", real)
	}
	var rec map[string]any
	if err := json.Unmarshal(openRecord(t, key, real, recordOf(t, flagValue(flags, "operations-state-topic"), real)), &rec); err != nil {
		t.Fatal(err)
	}

	id := madeID(key, time.Now())
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/operations/"+id, nil)
	req.Header.Set("X-Api-Key", aliceKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "OPERATION_NOT_SEEN_YET") {
		t.Fatalf("an operation made a moment ago, not read yet: %d %s %s, want 503 with Retry-After, OPERATION_NOT_SEEN_YET", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	now := time.Now().UnixMilli()
	newBusParty(t, flagValue(flags, "operations-state-topic")).put(t, id, map[string]any{"id": id, "owner": rec["owner"], "tool": "echo",
		"state": "running", "create_ms": now, "deadline_ms": now + 60000, "v": 1}, key)
	eventually.True(t, 20*time.Second, "the operation once its record is read", func() bool {
		code, got := do(t, http.MethodGet, base+"/v1/operations/"+id, aliceKey, "")
		return code == http.StatusOK && got["done"] == false
	})
	for name, id := range map[string]string{
		"another deployment's": madeID([]byte("another deployment's key, 32 bytes long at least"), time.Now()),
		"made long ago":        madeID(key, time.Now().Add(-time.Hour)),
	} {
		if code, got := do(t, http.MethodGet, base+"/v1/operations/"+id, aliceKey, ""); code != http.StatusNotFound {
			t.Fatalf("%s: %d %v, want 404", name, code, got)
		}
	}
}

// TestReplySentInTimeDeliveredLate: a reply the service sent before the
// operation's deadline while no gateway read the reply topic (the one
// that started it stopped) is recorded by the gateway that reads it after
// the deadline — the operation is done, not failed DEADLINE_EXCEEDED.
func TestReplySentInTimeDeliveredLate(t *testing.T) {
	answered := make(chan struct{})
	release := make(chan struct{})
	flags := setupWith(t, func(ctx context.Context, r *toolservice.Request) (any, error) {
		if r.Arguments["mode"] == "held" {
			<-release
			defer close(answered)
			return "sent in time", nil
		}
		return echo.Handle(ctx, r)
	})
	a := apptest.Start(t, nil, flags...)
	a.WaitReady(t, 60*time.Second)
	code, op := do(t, http.MethodPost, "http://"+a.HTTPAddr()+"/v1/tools/echo:start", aliceKey, `{"arguments": {"mode": "held"}, "timeout": "8s"}`)
	if code != http.StatusOK {
		t.Fatalf("start: %d %v", code, op)
	}
	id := strings.TrimPrefix(op["name"].(string), "operations/")
	md, _ := op["metadata"].(map[string]any)
	deadline, err := time.Parse(time.RFC3339Nano, fmt.Sprint(md["deadline"]))
	if err != nil {
		t.Fatalf("deadline %v: %v", md["deadline"], err)
	}
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	close(release) // the reply goes out, in time, to a topic nobody reads now
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the service did not answer")
	}
	eventually.True(t, 10*time.Second, "the operation's deadline passed", func() bool { return time.Now().After(deadline.Add(time.Second)) })
	b := apptest.Start(t, nil, flags...)
	b.WaitReady(t, 60*time.Second)
	eventually.True(t, 20*time.Second, "the operation ended on B", func() bool {
		_, got := do(t, http.MethodGet, "http://"+b.HTTPAddr()+"/v1/operations/"+id, aliceKey, "")
		if got["done"] != true {
			return false
		}
		resp, _ := got["response"].(map[string]any)
		if resp == nil || resp["output"] != "sent in time" {
			t.Fatalf("a reply sent in time, read after the deadline: %v, want done", got)
		}
		return true
	})
}

// TestRotationLosesNoReply: during a key's rotation — replica A given the
// old key only, replica B the new one with the old as the previous key —
// the operations A starts finish, read done on both (B, taking some of
// their replies, writes their ends with the old key), and those B starts
// finish on B (their replies on the new key's topic, which only B reads);
// A reports the new key as one it does not hold.
func TestRotationLosesNoReply(t *testing.T) {
	flags := setup(t)
	oldFile := flagValue(flags, "operations-key-file")
	oldKey, err := readKey(oldFile)
	if err != nil {
		t.Fatal(err)
	}
	next := brokertest.TestOperations(t)
	a := apptest.Start(t, nil, flags...)
	b := apptest.Start(t, nil, append(withFlag(flags, "operations-key-file", next.KeyFile), "--operations-previous-key-file", oldFile)...)
	a.WaitReady(t, 60*time.Second)
	b.WaitReady(t, 60*time.Second)
	aBase, bBase := "http://"+a.HTTPAddr(), "http://"+b.HTTPAddr()
	stem := flagValue(flags, "operations-reply-topic")
	if topics, _ := readyDetails(t, "http://"+b.AdminAddr())["operations_reply_topics"].([]any); len(topics) != 2 ||
		topics[0] != stem+"."+keyID(next.Key) || topics[1] != stem+"."+keyID(oldKey) {
		t.Fatalf("B's reply topics %v, want the new key's and the old one's", topics)
	}
	start := func(base string, i int) (string, string) {
		msg := fmt.Sprintf("%s %d", base, i)
		code, op := do(t, http.MethodPost, base+"/v1/tools/echo:start", aliceKey, `{"arguments": {"msg": "`+msg+`"}, "timeout": "60s"}`)
		if code != http.StatusOK {
			t.Fatalf("start on %s: %d %v", base, code, op)
		}
		return strings.TrimPrefix(op["name"].(string), "operations/"), msg
	}
	doneOn := func(base, id, msg string) {
		eventually.True(t, 30*time.Second, "operation "+id+" done on "+base, func() bool {
			code, got := do(t, http.MethodGet, base+"/v1/operations/"+id, aliceKey, "")
			if code != http.StatusOK || got["done"] != true {
				return false
			}
			if resp, _ := got["response"].(map[string]any); resp == nil || resp["output"] != msg {
				t.Fatalf("operation %s on %s: %v, want done with %q", id, base, got, msg)
			}
			return true
		})
	}
	for i := range 10 {
		id, msg := start(aBase, i)
		if !madeBy(oldKey, id) {
			t.Fatalf("A's operation %s not started with the old key", id)
		}
		doneOn(aBase, id, msg)
		doneOn(bBase, id, msg)
		id, msg = start(bBase, i)
		if !madeBy(next.Key, id) {
			t.Fatalf("B's operation %s not started with the new key", id)
		}
		doneOn(bBase, id, msg)
	}
	eventually.True(t, 10*time.Second, "A reporting the new key", func() bool {
		foreign, _ := readyDetails(t, "http://"+a.AdminAddr())["operations_foreign_keys"].([]any)
		return slices.Contains(foreign, any(keyID(next.Key)))
	})
}
