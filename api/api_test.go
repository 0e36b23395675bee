package api

import (
	"encoding/json"
	"testing"
)

func TestSpecVersions(t *testing.T) {
	var v3 struct {
		OpenAPI string `json:"openapi"`
	}
	if err := json.Unmarshal(Spec, &v3); err != nil || v3.OpenAPI != "3.1.0" {
		t.Fatalf("Spec: openapi %q (%v), want 3.1.0", v3.OpenAPI, err)
	}
	var v2 struct {
		Swagger string `json:"swagger"`
	}
	if err := json.Unmarshal(SpecV2, &v2); err != nil || v2.Swagger != "2.0" {
		t.Fatalf("SpecV2: swagger %q (%v), want 2.0", v2.Swagger, err)
	}
}
