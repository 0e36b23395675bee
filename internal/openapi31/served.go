package openapi31

import (
	"errors"
	"fmt"
	"strings"
)

// needsOperations tells the operations a gateway serves only with
// --operations: StartTool and the routes of google.longrunning.Operations.
func needsOperations(id string) bool {
	_, ok := opsErrors[id]
	return ok || id == "StartTool"
}

// WithoutOperations returns the OpenAPI document doc — Convert's output,
// or its Swagger 2.0 input — less what a gateway without --operations
// does not serve: the operations needsOperations names, the tags and
// schemas only they used. A gateway serves it in place of doc, so the
// document describes the routes it answers.
func WithoutOperations(doc []byte) ([]byte, error) {
	v, err := decode(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi31: reading the document: %w", err)
	}
	root, ok := v.(*Object)
	if !ok || root.Obj("paths") == nil {
		return nil, errors.New("openapi31: the document is not an OpenAPI object with paths")
	}
	paths := root.Obj("paths")
	usedTags := map[string]bool{}
	for _, p := range paths.Keys() {
		item := paths.Obj(p)
		for _, method := range item.Keys() {
			op := item.Obj(method)
			id := op.Str("operationId")
			id = strings.TrimPrefix(strings.TrimPrefix(id, operationPrefix), "Operations_")
			if needsOperations(id) {
				item.Delete(method)
				continue
			}
			tags, _ := op.Get("tags")
			list, _ := tags.([]any)
			for _, tag := range list {
				if s, ok := tag.(string); ok {
					usedTags[s] = true
				}
			}
		}
		if len(item.Keys()) == 0 {
			paths.Delete(p)
		}
	}
	if tags, ok := root.Get("tags"); ok {
		list, _ := tags.([]any)
		var kept []any
		for _, tag := range list {
			if t, ok := tag.(*Object); ok && usedTags[t.Str("name")] {
				kept = append(kept, t)
			}
		}
		root.Set("tags", kept)
	}
	if root.Obj("components").Obj("schemas") != nil {
		prune(root)
		if err := checkRefs(root); err != nil {
			return nil, err
		}
	}
	return encode(root)
}
