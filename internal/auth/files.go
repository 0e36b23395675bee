package auth

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	"gopkg.in/yaml.v3"
)

// decodeStrict decodes a YAML or JSON document (JSON is YAML) into v,
// rejecting fields v does not have, so a typo in a security file is an
// error rather than a silently missing rule.
func decodeStrict(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("the file is empty")
		}
		return err
	}
	return nil
}

// readFile reads a configuration file, naming it in any error.
func readFile(what, name string) ([]byte, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("auth: %s: %w", what, err)
	}
	return data, nil
}

// checkPatterns reports the first malformed path.Match pattern.
func checkPatterns(patterns []string) error {
	for _, p := range patterns {
		if p == "" {
			return errors.New("empty pattern")
		}
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("pattern %q: %w", p, err)
		}
	}
	return nil
}

// matchAny reports whether s matches one of the path.Match patterns.
func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}
