package toolservice

import (
	"errors"
	"strings"
	"testing"
)

func TestContent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		blocks []ContentBlock
		want   string
		err    string
	}{
		{"none", nil, `[]`, ""},
		{"text", []ContentBlock{TextContent("hi")}, `[{"type":"text","text":"hi"}]`, ""},
		{"empty text", []ContentBlock{TextContent("")}, `[{"type":"text","text":""}]`, ""},
		{"image and audio", []ContentBlock{ImageContent([]byte{0x89, 'P', 'N', 'G'}, "image/png"), AudioContent([]byte("RIFF"), "audio/wav")},
			`[{"type":"image","data":"iVBORw==","mimeType":"image/png"},{"type":"audio","data":"UklGRg==","mimeType":"audio/wav"}]`, ""},
		{"embedded text", []ContentBlock{ResourceContent("test://r", "application/json", `{"a":1}`)},
			`[{"type":"resource","resource":{"uri":"test://r","mimeType":"application/json","text":"{\"a\":1}"}}]`, ""},
		{"embedded blob", []ContentBlock{BlobResourceContent("test://b", "", []byte{0, 1})},
			`[{"type":"resource","resource":{"uri":"test://b","blob":"AAE="}}]`, ""},
		{"link", []ContentBlock{ResourceLinkContent("file:///a.txt", "a.txt", "text/plain")},
			`[{"type":"resource_link","uri":"file:///a.txt","name":"a.txt","mimeType":"text/plain"}]`, ""},

		{"zero block", []ContentBlock{TextContent("x"), {}}, "", "content[1]: an empty ContentBlock"},
		{"image without data", []ContentBlock{ImageContent(nil, "image/png")}, "", "content[0]: image content has no data"},
		{"audio without MIME type", []ContentBlock{AudioContent([]byte{1}, "")}, "", "audio content has no MIME type"},
		{"resource without URI", []ContentBlock{ResourceContent("", "text/plain", "x")}, "", "no URI"},
		{"empty resource", []ContentBlock{ResourceContent("u:1", "", "")}, "", "is empty"},
		{"empty blob", []ContentBlock{BlobResourceContent("u:1", "", nil)}, "", "is empty"},
		{"link without name", []ContentBlock{ResourceLinkContent("u:1", "", "")}, "", "a URI and a name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Content(tc.blocks...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Content = %q, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Content = %q, %v\nwant %s", got, err, tc.want)
			}
		})
	}
}

func TestLog(t *testing.T) {
	t.Parallel()
	var sent []string
	r := &Request{send: func(text string) error { sent = append(sent, text); return nil }}
	if err := r.Log(LogInfo, "started"); err != nil {
		t.Fatal(err)
	}
	if err := r.Log(LogWarning, map[string]any{"rows": 3}); err != nil {
		t.Fatal(err)
	}
	want := []string{`{"log":{"level":"info","data":"started"}}`, `{"log":{"level":"warning","data":{"rows":3}}}`}
	if strings.Join(sent, "\n") != strings.Join(want, "\n") {
		t.Errorf("sent %q, want %q", sent, want)
	}
	if err := r.Log("loud", "x"); err == nil || !strings.Contains(err.Error(), `log level "loud"`) {
		t.Errorf("unknown level: %v", err)
	}
	if err := r.Log(LogInfo, make(chan int)); err == nil {
		t.Error("data JSON cannot encode: no error")
	}
	if len(sent) != 2 {
		t.Errorf("a failed Log sent something: %q", sent)
	}
	if err := (&Request{}).Log(LogInfo, "x"); !errors.Is(err, ErrNoCall) {
		t.Errorf("Log on a request no service delivered: %v", err)
	}
}
