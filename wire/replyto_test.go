package wire

import "testing"

func TestReplyToAllowed(t *testing.T) {
	resp := "non-persistent://tg/response/joke"
	for replyTo, want := range map[string]bool{
		"non-persistent://tg/response/toolgate.gw-1": true,
		"non-persistent://tg/response/joke":          true,
		"non-persistent://tg/request/joke":           false, // another namespace
		"persistent://tg/response/toolgate.gw-1":     true,  // the persistent twin of the namespace
		"persistent://tg/request/joke":               false,
		"persistent://other/response/x":              false,
		"persistent://tg/response/a/b":               false,
		"non-persistent://other/response/x":          false, // another tenant
		"non-persistent://tg/response/":              false,
		"non-persistent://tg/response/a/b":           false,
		"non-persistent://tg/response/a b":           false,
		"tg/response/x":                              false,
	} {
		if got := ReplyToAllowed(replyTo, resp); got != want {
			t.Errorf("ReplyToAllowed(%q, %q) = %v, want %v", replyTo, resp, got, want)
		}
	}
}

func TestReplyTopicAndInstanceID(t *testing.T) {
	if got := ReplyTopic("gw-1"); got != "non-persistent://tg/response/toolgate.gw-1" {
		t.Fatalf("ReplyTopic(gw-1) = %q", got)
	}
	if !ReplyToAllowed(OperationsTopic, ResponseTopic("echo")) {
		t.Fatal("the operations topic is not allowed for a service in tg/response")
	}
	if ReplyToAllowed(OperationsTopic, "persistent://tg/other/echo") {
		t.Fatal("the operations topic is allowed for a service outside tg/response")
	}
	if !ReplyToAllowed(ReplyTopic("gw-1"), ResponseTopic("echo")) {
		t.Fatal("an instance's reply topic is not allowed for a service in tg/response")
	}
	for id, ok := range map[string]bool{"gw-1": true, "host_a.b=c": true, "": false, "a/b": false, "a:b": false} {
		if err := ValidateInstanceID(id); (err == nil) != ok {
			t.Errorf("ValidateInstanceID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}
