package wire

import (
	"fmt"
	"regexp"
	"strings"
)

// Tenant and namespaces of tool-service topics.
const (
	Tenant            = "tg"
	RequestNamespace  = "request"
	ResponseNamespace = "response"
)

// RequestTopic is the request topic of a service declared with the short
// "topic" descriptor field, e.g. "joke" → non-persistent://tg/request/joke.
func RequestTopic(topic string) string {
	return "non-persistent://" + Tenant + "/" + RequestNamespace + "/" + topic
}

// ResponseTopic is the response topic for the short "topic" descriptor field.
func ResponseTopic(topic string) string {
	return "non-persistent://" + Tenant + "/" + ResponseNamespace + "/" + topic
}

var (
	entityRE = regexp.MustCompile(`^[A-Za-z0-9_.\-=]+$`)
	localRE  = regexp.MustCompile(`^[A-Za-z0-9_.\-=:]+$`)
)

// ExpandQueue turns a queue name as TrustGraph writes it into a full Pulsar
// topic name and checks that the result is valid. It accepts full names
// ("non-persistent://tg/request/joke", "persistent://…") and the short form
// "<class>:<tenant>:<name>" ("request:tg:joke" →
// non-persistent://tg/request/joke), where the class is the namespace and
// only the class "flow" is persistent.
func ExpandQueue(q string) (string, error) {
	if strings.Contains(q, "://") {
		return q, ValidateTopic(q)
	}
	parts := strings.Split(q, ":")
	if len(parts) != 3 {
		return "", fmt.Errorf("queue %q is neither a full topic name (non-persistent://tenant/namespace/topic) nor of the form class:tenant:name", q)
	}
	scheme := "non-persistent"
	if parts[0] == "flow" {
		scheme = "persistent"
	}
	full := scheme + "://" + parts[1] + "/" + parts[0] + "/" + parts[2]
	return full, ValidateTopic(full)
}

// ValidateTopic reports whether name is a valid fully qualified Pulsar topic
// name: persistent:// or non-persistent://, then tenant/namespace/topic.
func ValidateTopic(name string) error {
	scheme, rest, ok := strings.Cut(name, "://")
	if !ok || (scheme != "persistent" && scheme != "non-persistent") {
		return fmt.Errorf("topic %q must start with persistent:// or non-persistent://", name)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		return fmt.Errorf("topic %q must have the form %s://tenant/namespace/topic", name, scheme)
	}
	for i, p := range parts {
		re := entityRE
		what := [...]string{"tenant", "namespace", "topic"}[i]
		if i == 2 {
			re = localRE
		}
		if !re.MatchString(p) {
			return fmt.Errorf("topic %q has an invalid %s %q (allowed: letters, digits, _ . - =%s)", name, what, p, map[bool]string{true: " :", false: ""}[i == 2])
		}
	}
	return nil
}

// OperationsTopic names where the replies of durable operations go: the
// stem of the persistent topics of the response namespace, one per
// operations key (the stem, ".", the key's id), that the gateways holding
// the key consume on one Key_Shared subscription (docs/operations.md).
const OperationsTopic = "persistent://" + Tenant + "/" + ResponseNamespace + "/toolgate.operations"

// ReplyTopic is the reply topic of one gateway instance: every service
// that honours PropReplyTo answers that instance's calls there. It lives in
// the response namespace, as ReplyToAllowed requires.
func ReplyTopic(instance string) string {
	return ResponseTopic(ReplyTopicPrefix + instance)
}

// ReplyTopicPrefix begins the local name of every gateway's reply topic.
const ReplyTopicPrefix = "toolgate."

// ValidateInstanceID reports whether id can name a gateway instance, that
// is, can be the end of a topic name (ReplyTopic).
func ValidateInstanceID(id string) error {
	if id == "" {
		return fmt.Errorf("instance id is empty")
	}
	if len(id) > 200 || !entityRE.MatchString(id) {
		return fmt.Errorf("instance id %q: want at most 200 letters, digits and . _ - = (it names the topic %s)", id, ReplyTopic(id))
	}
	return nil
}

// ReplyToAllowed reports whether a service whose response topic is
// responseTopic may answer on replyTo (a PropReplyTo value): only a valid
// topic of the same tenant and namespace, so that a caller cannot have
// replies sent anywhere else.
//
// The persistent twin of that namespace is allowed too (persistent://
// where the response topic is non-persistent://, same tenant and
// namespace): durable operations name OperationsTopic there.
func ReplyToAllowed(replyTo, responseTopic string) bool {
	if replyTo == responseTopic {
		return true
	}
	i := strings.LastIndexByte(responseTopic, '/')
	if i < 0 {
		return false
	}
	ns := responseTopic[:i+1]
	if !strings.HasPrefix(replyTo, ns) {
		rest, ok := strings.CutPrefix(ns, "non-persistent://")
		if !ok || !strings.HasPrefix(replyTo, "persistent://"+rest) {
			return false
		}
		ns = "persistent://" + rest
	}
	i = len(ns) - 1
	local := replyTo[i+1:]
	return local != "" && !strings.Contains(local, "/") && ValidateTopic(replyTo) == nil
}

// flowInfix joins a request topic's name and a service instance's suffix
// in the name of that instance's flow topic.
const flowInfix = ".flow-"

// FlowTopic is the non-persistent topic where one instance (a suffix of
// letters, digits, _ . - =) of the service on requestTopic takes the
// grants of flow control (PropCredit): the request topic's name with
// ".flow-<instance>" appended.
func FlowTopic(requestTopic, instance string) string {
	_, rest, _ := strings.Cut(requestTopic, "://")
	return "non-persistent://" + rest + flowInfix + instance
}

// FlowTopicAllowed reports whether flow is a flow topic of the service on
// requestTopic (FlowTopic's form), so that a reply cannot make a caller
// publish grants anywhere else.
func FlowTopicAllowed(flow, requestTopic string) bool {
	_, rest, ok := strings.Cut(requestTopic, "://")
	prefix := "non-persistent://" + rest + flowInfix
	if !ok || !strings.HasPrefix(flow, prefix) {
		return false
	}
	inst := flow[len(prefix):]
	return inst != "" && len(inst) <= 64 && entityRE.MatchString(inst) && ValidateTopic(flow) == nil
}

// cancelSuffix ends the name of a service's cancel topic.
const cancelSuffix = ".cancel"

// CancelTopic is the non-persistent topic where every instance of the
// service on requestTopic, each on a subscription of its own, hears that
// a caller has given a call up (a message with PropID and PropCredit
// CreditCancel): the request topic's name with ".cancel" appended. A
// caller sends there when it does not know which instance has the call
// (a unary call, a stream before its first chunk); the instance that has
// it ends the handler's context, the others ignore it. Nothing is sent
// for calls that are not given up.
func CancelTopic(requestTopic string) string {
	_, rest, _ := strings.Cut(requestTopic, "://")
	return "non-persistent://" + rest + cancelSuffix
}
