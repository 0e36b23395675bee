"""Running a service as a program's main: until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from typing import NoReturn

from .errors import Abandoned
from .service import Service

EXIT_ABANDONED = 3
"""The exit status of a service whose stop reached its deadline before
everything had closed (the broker does not answer)."""


def serve(service: Service) -> int:
    """Run ``service`` until SIGTERM or SIGINT, then stop it gracefully,
    and end the process.

    Once the service has stopped, the process exits with status 0, its
    logs and standard streams flushed, without the interpreter's
    finalization: there the Pulsar client's C++ threads, though the client
    was closed, can abort the process ("terminate called without an active
    exception", apache/pulsar-client-python#256; seen in about one stop in
    ten under load). When the stop reached its deadline with something
    still open (:class:`Abandoned`), it exits with :data:`EXIT_ABANDONED`,
    since the client's threads may be waiting for a broker that does not
    answer. The return type stays ``int`` for ``raise SystemExit(serve(svc))``.
    """

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, service.stop)
        await service.run()

    try:
        asyncio.run(main())
    except Abandoned:
        exit_now(EXIT_ABANDONED)
    exit_now(0)


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` once logs and standard streams are
    flushed, skipping the interpreter's finalization (see :func:`serve`)."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
