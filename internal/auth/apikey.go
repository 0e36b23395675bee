package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

const hashPrefix = "sha256:"

// HashKey returns the form in which an API key is stored in a keys file:
// "sha256:" and the hex SHA-256 of the key. Keys should be long random
// strings (for example `openssl rand -hex 32`), which is what makes an
// unsalted hash safe to store.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hashPrefix + hex.EncodeToString(sum[:])
}

// APIKeys is a set of API keys, held as hashes, each naming a user.
type APIKeys struct {
	entries []keyEntry
}

type keyEntry struct {
	sum   [sha256.Size]byte
	user  string
	roles []string
}

// keysFile is the layout of an API keys file:
//
//	keys:
//	  - {hash: "sha256:<hex>", user: alice, roles: [admin]}
type keysFile struct {
	Keys []struct {
		Hash  string   `yaml:"hash"`
		User  string   `yaml:"user"`
		Roles []string `yaml:"roles"`
	} `yaml:"keys"`
}

// LoadAPIKeys reads an API keys file (YAML or JSON).
func LoadAPIKeys(name string) (*APIKeys, error) {
	data, err := readFile("API keys", name)
	if err != nil {
		return nil, err
	}
	k, err := ParseAPIKeys(data)
	if err != nil {
		return nil, fmt.Errorf("auth: API keys %s: %w", name, err)
	}
	return k, nil
}

// ParseAPIKeys parses the contents of an API keys file. Every problem is
// reported at once, with the entry it is in.
func ParseAPIKeys(data []byte) (*APIKeys, error) {
	var f keysFile
	if err := decodeStrict(data, &f); err != nil {
		return nil, err
	}
	if len(f.Keys) == 0 {
		return nil, errors.New("no keys: want keys: [{hash: \"sha256:<hex>\", user: name, roles: [...]}]")
	}
	var errs []error
	seen := map[[sha256.Size]byte]int{}
	out := &APIKeys{}
	for i, k := range f.Keys {
		e := keyEntry{user: k.User, roles: k.Roles}
		hexSum, ok := strings.CutPrefix(k.Hash, hashPrefix)
		b, err := hex.DecodeString(hexSum)
		switch {
		case !ok || err != nil || len(b) != sha256.Size:
			errs = append(errs, fmt.Errorf("keys[%d]: hash must be \"sha256:\" and 64 hex digits", i))
		default:
			copy(e.sum[:], b)
			if j, dup := seen[e.sum]; dup {
				errs = append(errs, fmt.Errorf("keys[%d]: same hash as keys[%d]", i, j))
			}
			seen[e.sum] = i
		}
		if strings.TrimSpace(k.User) == "" {
			errs = append(errs, fmt.Errorf("keys[%d]: user is required", i))
		}
		out.entries = append(out.entries, e)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// Lookup returns the identity of key. It compares the key's hash with every
// stored hash in constant time, so its timing says nothing about which
// stored hash, if any, is close.
func (k *APIKeys) Lookup(key string) (Identity, bool) {
	sum := sha256.Sum256([]byte(key))
	found := -1
	for i := range k.entries {
		if subtle.ConstantTimeCompare(sum[:], k.entries[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Identity{}, false
	}
	e := k.entries[found]
	return Identity{User: e.user, Roles: append([]string(nil), e.roles...), Method: MethodAPIKey}, true
}
