// Package jokes is the joke service's whole logic: pick a joke by style and
// topic. It exists to show the toolservice SDK and to test the gateway.
package jokes

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/toolgate/toolgate/toolservice"
)

var byStyle = map[string][]string{
	"pun": {
		"I tried to write a {t} joke about queues, but it was dropped before anyone subscribed.",
		"My {t} service asked for a raise. I told it the request was non-persistent.",
		"Why did the {t} message cross the broker? To get to the other subscription.",
	},
	"dad-joke": {
		"I only know one joke about {t}. I'll tell you when you subscribe.",
		"Did you hear about the {t} gateway? It let everybody through, but only on time.",
	},
	"one-liner": {
		"{t}: works on my topic.",
		"There are two hard things in {t}: cache invalidation, naming things and off-by-one errors.",
	},
}

// Styles lists the styles the service knows, in a stable order.
var Styles = []string{"pun", "dad-joke", "one-liner"}

// Pick returns a joke of the given style about topic. The same inputs give
// the same joke, which keeps tests exact.
func Pick(style, topic string) (string, error) {
	list, ok := byStyle[style]
	if !ok {
		return "", toolservice.Errorf("invalid-argument", "unknown joke style %q (known: %s)", style, strings.Join(Styles, ", "))
	}
	if topic == "" {
		topic = "software"
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(topic))
	return strings.ReplaceAll(list[h.Sum32()%uint32(len(list))], "{t}", topic), nil
}

// Handle is the joke service's toolservice.Handler.
func Handle(_ context.Context, req *toolservice.Request) (any, error) {
	style, _ := req.Config["style"].(string)
	if style == "" {
		style = "pun"
	}
	topic, _ := req.Arguments["topic"].(string)
	joke, err := Pick(style, topic)
	if err != nil {
		return nil, err
	}
	return fmt.Sprintf("Here's a %s for you:\n\n%s", style, joke), nil
}

// Announcement is what the joke service announces: the tell-joke tool, whose
// calls carry the joke's style as a config value.
func Announcement() *toolservice.Announcement {
	return &toolservice.Announcement{
		ConfigParams: []toolservice.ConfigParam{{Name: "style"}},
		Tools: []toolservice.Tool{{
			Name:        "tell-joke",
			Description: "Tell a joke on a given topic",
			Arguments:   []toolservice.Argument{{Name: "topic", Type: "string", Description: "The topic for the joke"}},
			Config:      map[string]any{"style": "pun"},
		}},
	}
}
