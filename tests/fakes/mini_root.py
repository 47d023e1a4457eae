"""A tiny root process for the orphan-rule test: starts two echo actors, prints their
pids as one JSON line, then waits forever (the test SIGKILLs it)."""

import json
import sys

import trio

from runtime import ActorSpec, open_supervisor
from runtime.kernel import _log


async def main() -> None:
    _log.configure("root")
    specs = [ActorSpec(name=n, module="tests.fakes.echo_actor") for n in ("a", "b")]
    async with open_supervisor(specs) as sup:
        print(json.dumps({"a": sup.pid_of("a"), "b": sup.pid_of("b")}), flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    sys.exit(trio.run(main))
