"""Attribution on the real default model (the "whose name" field case of
docs/RELIABILITY.md, model level).

Window A of the case, said ``--runs`` times (a new session each, the profile reset to a
pinned ``home_city=Lyon``) to a daemon on the embedded default model:
"My sister Anna just moved to Berlin, I'm staying in Lyon." Counted: runs after which
``home_city`` is still Lyon and ``name`` is not Anna (the case asks for ≥ 9 of 10), and
the facts the real reflection wrote, printed so a reader can judge the rest.

Usage: ``python -m bench.attribution [--runs 10] [--write]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

import trio

from bench._results import machine_line, publish, utc_now
from runtime.shell.client import open_client
from tests.daemon import run_daemon

SECTION = "## Attribution on the default model"
SAID = "My sister Anna just moved to Berlin, I'm staying in Lyon."


async def measure(runs: int) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        async with run_daemon(Path(tmp) / "state", ready_timeout_s=600) as d:
            for i in range(runs):
                async with open_client(url=d.url, token=d.token, session=f"fc04-{i}") as c:
                    await c.request({"type": "subscribe", "channels": ["reflection"]},
                                    "subscribed")
                    for f in await c.memory("memory.profile.list"):
                        await c.memory("memory.profile.remove", {"key": f["key"]})
                    await c.memory("memory.profile.set", {"key": "home_city", "value": "Lyon",
                                                          "pinned": True})
                    with trio.fail_after(300):
                        frames = [f async for f in c.say(SAID)]
                        event = await c.wait_for(lambda f: f.get("type") == "reflection"
                                                 and f["turn"] == frames[-1]["turn"])
                    facts = {f["key"]: f["value"] for f in await c.memory("memory.profile.list")}
                    out.append({"outcome": event["outcome"], "facts": facts})
                    print(f"run {i + 1}: {event['outcome']} {facts}", file=sys.stderr, flush=True)
    return out


def render(results: list[dict], command: str) -> str:
    kept = sum(r["facts"].get("home_city") == "Lyon" and r["facts"].get("name") != "Anna"
               for r in results)
    written = Counter(k for r in results for k in r["facts"] if k != "home_city")
    return "\n".join([
        SECTION, "",
        f"Command: `{command}` ({utc_now()}; {machine_line()}; default model). "
        f"\"{SAID}\" said {len(results)} times, each in a new session after resetting the "
        "profile to a pinned `home_city=Lyon`.", "",
        f"- `home_city` still Lyon and no `name=Anna`: **{kept} of {len(results)}** "
        "(the case asks for at least 9 of 10).",
        "- Other facts the reflection wrote (key: runs): "
        + (", ".join(f"`{k}`: {n}" for k, n in written.most_common()) or "none") + ".",
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    """Run, print (``--write``: record) the section."""
    p = argparse.ArgumentParser(prog="python -m bench.attribution", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--write", action="store_true", help="write the section to bench/RESULTS.md")
    args = p.parse_args(argv)
    results = trio.run(measure, args.runs)
    command = "python -m bench.attribution " + " ".join(argv if argv is not None
                                                         else sys.argv[1:])
    publish(SECTION, render(results, command.strip()), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
