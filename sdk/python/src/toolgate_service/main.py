"""Running a service as a program's main: until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

from .errors import Abandoned
from .service import Service

EXIT_ABANDONED = 3
"""The exit status of a service whose stop reached its deadline before
everything had closed (the broker does not answer)."""


def serve(service: Service) -> int:
    """Run ``service`` until SIGTERM or SIGINT, then stop it gracefully.

    Returns 0 once it has stopped. When the stop reached its deadline with
    something still open (:class:`Abandoned`), it does not return: the
    process exits with :data:`EXIT_ABANDONED` at once, since the client's
    threads may be waiting for a broker that does not answer.
    """

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, service.stop)
        await service.run()

    try:
        asyncio.run(main())
    except Abandoned:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_ABANDONED)
    return 0
