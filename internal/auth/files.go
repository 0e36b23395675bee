package auth

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

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
