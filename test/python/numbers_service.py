"""Numbers tool service - a TrustGraph DynamicToolService that answers with
the arguments exactly as they reached it.

Used by test/e2e/numbers_test.go (TestNumbersExactlyPython): the answer is a
JSON object with
  "raw":  the request's arguments text as the service decoded it from the
          Pulsar message (what DynamicToolService hands to json.loads),
  "ints": every integer argument as Python holds it after json.loads,
          written with str() (Python's ints are exact at any size).

Launched like TrustGraph's own services:

    python test/python/numbers_service.py -p pulsar://127.0.0.1:6650 \\
        --id numbers-tool-service -t numbers --no-metrics --no-loki-enabled
"""

import contextvars
import json

from trustgraph.base import DynamicToolService

default_ident = "numbers-tool-service"
default_topic = "numbers"

# The raw arguments of the request being handled (one per asyncio task).
_raw = contextvars.ContextVar("raw_arguments", default=None)


class Processor(DynamicToolService):
    """A tool service whose answer is its own arguments, raw and parsed."""

    async def on_request(self, msg, consumer, flow):
        _raw.set(msg.value().arguments)
        await super().on_request(msg, consumer, flow)

    async def invoke(self, config, arguments):
        ints = {k: str(v) for k, v in arguments.items()
                if isinstance(v, int) and not isinstance(v, bool)}
        return json.dumps({"raw": _raw.get(), "ints": ints})

    @staticmethod
    def add_args(parser):
        DynamicToolService.add_args(parser)
        for action in parser._actions:
            if "--topic" in action.option_strings:
                action.default = default_topic
                break


def run():
    Processor.launch(default_ident, __doc__)


if __name__ == "__main__":
    run()
