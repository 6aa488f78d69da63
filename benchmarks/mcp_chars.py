"""Characters an agent reads per task through the MCP server, beside the in-process API.

Run ``python benchmarks/mcp_chars.py [--json] [--root CHECKOUT]``. Each task is a
list of steps an agent would take; every step is done twice:

* through the real server (``python -m ahp mcp`` as a subprocess, driven by the
  official MCP client over stdio, as ``tests/test_mcp.py`` does), counting for
  every answer the characters of its text content (``text``), of its
  ``structuredContent`` serialised as JSON (``structured``), and what travels in
  all (``both``): a client that gives the model only the text reads ``text``,
  one that gives it only the structured content (Claude Code, when the answer
  has it) reads ``structured``, one that forwards both reads ``both``;
  (``--root``: the server of another checkout, e.g. the code before a change);
* in-process through the library (``Terminal.run(yield_after=)``, then
  ``CommandHandle.send_input`` / ``wait`` / ``read_new``), counting the output
  the agent reads (the result's output, then only what is new): the floor.

Nothing is timed; only characters are counted, so the figures do not depend on
the machine's load (the outputs are the same on every run, but for durations in
the answers' status lines).

``--screen``: instead, the seconds one screen render takes (what ``read_screen``
costs the event loop) at sizes up to the 4096 x 4096 another client can set:
64 KiB of coloured lines replayed into :class:`ahp.agent.screen.ScreenModel`
(its default emulator; ``--screen-emulator pyte`` for the other).

``--memory``: instead, the server's peak resident memory (``VmHWM``) after each of
:data:`MEMORY_COMMANDS` (100 MB of output: lines, and one endless line), each in a
fresh server.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))

__all__ = ["TASKS", "Step", "main", "measure_inprocess", "measure_mcp"]

#: Generous bound for one task on a loaded machine.
TASK_TIMEOUT = 180.0
#: Seconds a step waits for the command (every step returns on an event well before).
WAIT = 60.0


#: Commands of 100 MB of output each, for ``--memory``.
MEMORY_COMMANDS: dict[str, str] = {
    "100MB-lines": "yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c 100000000",
    "100MB-one-line": "head -c 100000000 /dev/zero | tr '\\0' x; echo",
}


@attrs.frozen
class Step:
    """``run`` a command, ``send`` text (Enter added) and wait, or ``wait``."""

    kind: str
    text: str = ""
    yield_after: float = WAIT


def _repl_lines() -> list[str]:
    return [
        "x = 6",
        "y = 7",
        "x * y",
        "words = 'the quick brown fox jumps over the lazy dog'.split()",
        "len(words)",
        "sorted(words)[:3]",
        "import math",
        "math.sqrt(2)",
        "f = lambda n: n * n",
        "[f(i) for i in range(8)]",
        "sum(f(i) for i in range(100))",
        "exit()",
    ]


def _heredoc() -> str:
    body = "\n".join(f"line {i:04d}: " + "lorem ipsum dolor sit amet " * 2 for i in range(500))
    return f"cat > heredoc.txt <<'EOF'\n{body}\nEOF"


TASKS: dict[str, list[Step]] = {
    # A REPL driven a line at a time: 13 steps (start, 12 inputs).
    "repl-13-steps": [Step("run", "python3 -q"), *(Step("send", line) for line in _repl_lines())],
    # A 33 kB file written with a heredoc, then checked.
    "heredoc-33kB": [Step("run", _heredoc()), Step("run", "wc -l heredoc.txt")],
    # A prompt answered.
    "prompt": [
        Step("run", 'python3 -c \'n = input("name? "); print("hello", n)\''),
        Step("send", "Ada"),
    ],
    # A long command followed by polling: 300 lines over ~3 s, read as it goes.
    "follow-build": [
        Step(
            "run",
            'for i in $(seq 1 300); do echo "compiling unit $i of 300"; '
            "[ $((i % 100)) = 0 ] && sleep 1; done; echo built",
            yield_after=0.5,
        ),
        Step("wait", yield_after=0.8),
        Step("wait", yield_after=0.8),
        Step("wait"),
    ],
}


@attrs.define
class Count:
    text: int = 0
    structured: int = 0
    answers: int = 0

    @property
    def both(self) -> int:
        return self.text + self.structured


async def measure_mcp(task: Sequence[Step], cwd: str, root: Path = ROOT) -> Count:
    """The characters of every answer of the real server (of checkout ``root``) over ``task``."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ahp", "mcp"],
        env={"PYTHONPATH": str(root), "SHELL": "/bin/bash", "HOME": os.environ["HOME"]},
        cwd=cwd,
    )
    count = Count()
    with open(os.devnull, "w") as errlog:  # noqa: ASYNC230 (opening /dev/null does not block)
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            command_id: str | None = None
            for step in task:
                if step.kind == "run":
                    args: dict[str, Any] = {"command": step.text, "yield_after": step.yield_after}
                    name = "run_command"
                elif step.kind == "send":
                    args = {
                        "command_id": command_id,
                        "text": step.text,
                        "keys": ["enter"],
                        "wait": step.yield_after,
                    }
                    name = "send_input"
                else:
                    args = {"command_id": command_id, "timeout": step.yield_after}
                    name = "wait_command"
                result = await session.call_tool(name, args)
                text = "".join(block.text for block in result.content if block.type == "text")
                if result.is_error:
                    raise RuntimeError(f"{name} {args}: {text}")
                count.answers += 1
                count.text += len(text)
                if result.structured_content is not None:
                    count.structured += len(
                        json.dumps(result.structured_content, ensure_ascii=False)
                    )
                if step.kind == "run":
                    command_id = _command_id(result.structured_content, text)
    return count


def _server_peak_kib(cwd: str) -> int:
    """``VmHWM`` of the ``python -m ahp mcp`` child of this process started in ``cwd``."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])
            if ppid != os.getpid() or os.readlink(f"/proc/{entry}/cwd") != cwd:
                continue
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no server process found")


async def measure_peak(command: str, cwd: str, root: Path = ROOT) -> tuple[int, int]:
    """The server's peak memory (KiB) before and after running ``command``."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ahp", "mcp"],
        env={"PYTHONPATH": str(root), "SHELL": "/bin/bash", "HOME": os.environ["HOME"]},
        cwd=cwd,
    )
    with open(os.devnull, "w") as errlog:  # noqa: ASYNC230 (opening /dev/null does not block)
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await session.call_tool("run_command", {"command": "true"})
            before = _server_peak_kib(cwd)
            result = await session.call_tool(
                "run_command", {"command": command, "yield_after": TASK_TIMEOUT}
            )
            if result.is_error:
                raise RuntimeError(str(result.content))
            return before, _server_peak_kib(cwd)


def _command_id(data: dict[str, Any] | None, text: str) -> str | None:
    if data is not None and "command_id" in data:
        return str(data["command_id"])
    for word in text.replace(",", " ").replace(")", " ").split():
        if word.startswith("cmd-"):
            return word
    return None


async def measure_inprocess(task: Sequence[Step], cwd: str) -> Count:
    """The characters of output an agent reads through the library over ``task``."""
    from ahp.engine import open_host

    count = Count()
    async with open_host(shell="/bin/bash") as host:
        terminal = await host.create_terminal("ahp-terminal:/main", cwd=cwd, cols=120, rows=40)
        handle = None
        for step in task:
            if step.kind == "run":
                result = await terminal.run(step.text, yield_after=step.yield_after)
                handle = result.handle
                if handle is not None:
                    handle.read_new()  # what the result showed is read
                text = result.output
            else:
                assert handle is not None
                if step.kind == "send":
                    await handle.send_input(step.text + "\r")
                await handle.wait(timeout=step.yield_after)
                text = handle.read_new()
            count.answers += 1
            count.text += len(text)
    return count


def _screen_costs(emulator: str | None) -> None:
    import time

    from ahp.agent.screen import ScreenModel

    data = "".join(f"\x1b[32mline {i}\x1b[0m " + "x" * 70 + "\r\n" for i in range(800))
    print(f"| screen ({ScreenModel(emulator=emulator).emulator}) | seconds to render |")
    print("|---|---|")
    for cols, rows in ((120, 40), (500, 200), (1000, 400), (4096, 4096)):
        model = ScreenModel(cols, rows, emulator=emulator)
        started = time.perf_counter()
        model.feed(data[: 64 * 1024])
        model.screen()
        print(f"| {cols}x{rows} | {time.perf_counter() - started:.2f} |")


async def _memory(root: Path) -> None:
    print("| output | server peak before | server peak after the command |")
    print("|---|---|---|")
    for name, command in MEMORY_COMMANDS.items():
        with tempfile.TemporaryDirectory() as cwd, trio.fail_after(TASK_TIMEOUT):
            real = str(await trio.Path(cwd).resolve())
            before, after = await measure_peak(command, real, root)
        print(f"| {name} | {before // 1024} MiB | {after // 1024} MiB |")


async def _measure(json_out: bool, root: Path) -> None:
    rows: list[dict[str, Any]] = []
    for name, task in TASKS.items():
        with tempfile.TemporaryDirectory() as cwd, trio.fail_after(TASK_TIMEOUT):
            mcp = await measure_mcp(task, cwd, root)
        with tempfile.TemporaryDirectory() as cwd, trio.fail_after(TASK_TIMEOUT):
            lib = await measure_inprocess(task, cwd)
        rows.append(
            {
                "task": name,
                "steps": len(task),
                "mcp_text": mcp.text,
                "mcp_structured": mcp.structured,
                "mcp_both": mcp.both,
                "library": lib.text,
            }
        )
    if json_out:
        print(json.dumps(rows, indent=1))
        return
    print("| task | steps | MCP text | MCP structuredContent | MCP both | library |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['task']} | {row['steps']} | {row['mcp_text']} | {row['mcp_structured']} "
            f"| {row['mcp_both']} | {row['library']} |"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="checkout whose server is measured (default: this)"
    )
    parser.add_argument(
        "--memory", action="store_true", help="measure the server's peak memory instead"
    )
    parser.add_argument("--screen", action="store_true", help="measure screen renders instead")
    parser.add_argument("--screen-emulator", help="--screen: the emulator (default: the best here)")
    args = parser.parse_args(argv)
    if args.screen:
        _screen_costs(args.screen_emulator)
    elif args.memory:
        trio.run(_memory, args.root.resolve())
    else:
        trio.run(_measure, args.json, args.root.resolve())


if __name__ == "__main__":
    main()
