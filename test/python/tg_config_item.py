#!/usr/bin/env python3
"""Put or delete one configuration item in TrustGraph's config service with
TrustGraph's own Python API (trustgraph-base's AsyncConfigClient, on the
workspace's queue, as TrustGraph's services and api-gateway reach it):

  tg_config_item.py put TYPE KEY VALUE [--workspace default]
  tg_config_item.py delete TYPE KEY [--workspace default]

VALUE is stored as given: for the types tool-service and tool, the JSON text of
one descriptor. The broker is $TOOLGATE_PULSAR_URL (else pulsar://127.0.0.1:6650).
Exits non-zero with the reason when the config service does not answer.
"""

import argparse
import asyncio
import os
import sys


async def run(args):
    from trustgraph.base.async_config_client import AsyncConfigClient
    from trustgraph.base.async_pulsar_backend import AsyncPulsarBackend

    backend = AsyncPulsarBackend(os.environ.get("TOOLGATE_PULSAR_URL") or "pulsar://127.0.0.1:6650")
    try:
        cc = await AsyncConfigClient.create(
            backend,
            f"request:tg:config:{args.workspace}",
            f"response:tg:config:{args.workspace}",
            timeout=10,
        )
        try:
            if args.op == "put":
                await cc.put(args.workspace, args.type, args.key, args.value)
            else:
                await cc.delete(args.workspace, args.type, args.key)
        finally:
            await cc.close()
    finally:
        await backend.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("op", choices=["put", "delete"])
    ap.add_argument("type")
    ap.add_argument("key")
    ap.add_argument("value", nargs="?")
    ap.add_argument("--workspace", default="default")
    args = ap.parse_args()
    if args.op == "put" and args.value is None:
        ap.error("put needs a VALUE")
    try:
        asyncio.run(run(args))
    except Exception as e:  # the reason, not a traceback
        print(f"tg_config_item.py {args.op} {args.type}/{args.key}: {type(e).__name__}: {e}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)
    # Done: skip interpreter teardown, where the C++ Pulsar client sometimes
    # aborts ("terminate called without an active exception") after its work.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
