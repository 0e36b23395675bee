package toolservice

import "testing"

func TestTextLikePythonJSONDumps(t *testing.T) {
	cases := []struct {
		in   any
		want string
	}{
		{nil, ""},
		{"plain", "plain"},
		{[]byte("bytes"), "bytes"},
		{map[string]any{"b": 1, "a": []any{true, nil, "x"}}, `{"a": [true, null, "x"], "b": 1}`},
		{map[string]any{"s": "a,b: \"c\""}, `{"s": "a,b: \"c\""}`},
		{map[string]any{"é": "ü 😀 <&>"}, `{"\u00e9": "\u00fc \ud83d\ude00 <&>"}`},
		{[]int{1, 2}, `[1, 2]`},
		{3.5, `3.5`},
	}
	for _, c := range cases {
		got, err := Text(c.in)
		if err != nil || got != c.want {
			t.Errorf("Text(%v) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if _, err := Text(make(chan int)); err == nil {
		t.Error("Text(chan) should fail")
	}
}
