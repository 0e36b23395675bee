package auth

import (
	"slices"
	"strings"
	"testing"
)

func TestHashKey(t *testing.T) {
	t.Parallel()
	tests := []struct{ key, want string }{
		{"", "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{aliceKey, "sha256:85afddf4e6f8aeb1906be50a09e30a3260a78312890c20f72a8d18f951aa7a14"},
	}
	for _, tc := range tests {
		if got := HashKey(tc.key); got != tc.want {
			t.Errorf("HashKey(%q) = %s, want %s", tc.key, got, tc.want)
		}
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	yamlKeys := mustKeys(t)
	jsonKeys, err := LoadAPIKeys("testdata/apikeys.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		keys   *APIKeys
		key    string
		ok     bool
		user   string
		roles  []string
		method string
	}{
		{"yaml alice", yamlKeys, aliceKey, true, "alice", []string{"admin"}, MethodAPIKey},
		{"yaml bob", yamlKeys, bobKey, true, "svc-bob", []string{"reader"}, MethodAPIKey},
		{"json alice", jsonKeys, aliceKey, true, "alice", []string{"admin"}, MethodAPIKey},
		{"json has no bob", jsonKeys, bobKey, false, "", nil, ""},
		{"the hash is not the key", yamlKeys, HashKey(aliceKey), false, "", nil, ""},
		{"empty", yamlKeys, "", false, "", nil, ""},
		{"prefix of a key", yamlKeys, aliceKey[:10], false, "", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id, ok := tc.keys.Lookup(tc.key)
			if ok != tc.ok || id.User != tc.user || id.Method != tc.method || !slices.Equal(id.Roles, tc.roles) {
				t.Fatalf("Lookup = %+v, %v; want user %q roles %v method %q, %v", id, ok, tc.user, tc.roles, tc.method, tc.ok)
			}
		})
	}
	// Identities do not share the stored roles slice.
	id, _ := yamlKeys.Lookup(aliceKey)
	id.Roles[0] = "changed"
	if again, _ := yamlKeys.Lookup(aliceKey); again.Roles[0] != "admin" {
		t.Fatal("an identity's roles alias the key store")
	}
}

func TestParseAPIKeys(t *testing.T) {
	t.Parallel()
	h := HashKey("k")
	tests := []struct {
		name    string
		data    string
		wantErr []string // substrings; none means valid
	}{
		{"valid", "keys: [{hash: \"" + h + "\", user: u}]", nil},
		{"valid JSON", `{"keys": [{"hash": "` + h + `", "user": "u", "roles": ["r"]}]}`, nil},
		{"empty file", "", []string{"empty"}},
		{"no keys", "keys: []", []string{"no keys"}},
		{"unknown field", "keys: [{hash: \"" + h + "\", user: u, role: admin}]", []string{"field role not found"}},
		{"plain key instead of hash", "keys: [{hash: secret, user: u}]", []string{"keys[0]: hash must be"}},
		{"short hash", "keys: [{hash: \"sha256:abcd\", user: u}]", []string{"keys[0]: hash must be"}},
		{"other algorithm", "keys: [{hash: \"md5:" + strings.Repeat("a", 64) + "\", user: u}]", []string{"keys[0]: hash must be"}},
		{"all problems at once", "keys: [{hash: \"" + h + "\"}, {hash: \"" + h + "\", user: v}, {hash: x, user: w}]",
			[]string{"keys[0]: user is required", "keys[1]: same hash as keys[0]", "keys[2]: hash must be"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseAPIKeys([]byte(tc.data))
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestLoadAPIKeysMissingFile(t *testing.T) {
	t.Parallel()
	if _, err := LoadAPIKeys("testdata/nope.yaml"); err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("err %v, want one naming the file", err)
	}
}
