"""Failing tool service - a TrustGraph DynamicToolService that always raises.

Used by test/e2e/interop_test.go (TestInteropPythonServiceError) to check
how the gateway reports a failure of a Python tool service: TrustGraph's
DynamicToolService.on_request turns any exception raised by invoke() into
a ToolServiceResponse with error.type "tool-service-error" and
error.message str(exception), end_of_stream true.

It is launched exactly like TrustGraph's own joke-service
(trustgraph.tool_service.joke.service: Processor.launch), so it takes the
same command line:

    python test/python/failing_service.py -p pulsar://127.0.0.1:6650 \\
        --id failing-tool-service -t fail --no-metrics --no-loki-enabled

and serves non-persistent://tg/request/<topic>, answering on
non-persistent://tg/response/<topic>.
"""

import logging

from trustgraph.base import DynamicToolService

logger = logging.getLogger(__name__)

default_ident = "failing-tool-service"
default_topic = "fail"

FAILURE_MESSAGE = "the python tool failed on purpose"


class Processor(DynamicToolService):
    """A tool service whose every invocation raises RuntimeError."""

    async def invoke(self, config, arguments):
        logger.info(f"Failing on purpose: config={config}, arguments={arguments}")
        raise RuntimeError(FAILURE_MESSAGE)

    @staticmethod
    def add_args(parser):
        DynamicToolService.add_args(parser)
        # Same trick as the joke service: change the --topic default.
        for action in parser._actions:
            if "--topic" in action.option_strings:
                action.default = default_topic
                break


def run():
    Processor.launch(default_ident, __doc__)


if __name__ == "__main__":
    run()
