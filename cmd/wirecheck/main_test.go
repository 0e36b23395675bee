package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "give the service's --topic"},
		{[]string{"--topic", "a", "--request-topic", "b"}, "not both"},
		{[]string{"--topic", "a", "--quick", "[1]"}, "want a JSON object"},
		{[]string{"--request-topic", "request:tg:a", "--response-topic", "a b"}, "--response-topic"},
		{[]string{"--topic", "a", "--run", "("}, "--run"},
		{[]string{"--topic", "a", "extra"}, "unexpected arguments"},
	} {
		var out, errs bytes.Buffer
		if code := run(t.Context(), c.args, &out, &errs); code != 2 || !strings.Contains(errs.String(), c.want) {
			t.Errorf("%q: exit %d, %q; want 2 and %q", c.args, code, errs.String(), c.want)
		}
	}
}
