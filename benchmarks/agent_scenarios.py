"""Ordinary agent tasks, run through the library and the remote client (issue 20).

Why: the run API is judged by what an agent gets done with it on real programs —
editors, REPLs, prompts of every kind, progress bars, dev servers in the
background, pagers, huge and binary output, parallel terminals, a shell that
exits — and by how much it must read to do it. Each scenario is a task an agent
would do, written as an agent would (the public API only: ``run``, ``start``,
the handle, ``screen()``), against a fresh bash terminal, in-process
(``local``) or through a real server on port 0 and a real client (``remote``).

Figures per scenario and mode: passed or not, wall time, and the characters the
agent read (every ``output``/``note`` of a result it got, every ``read_new``,
every ``screen().text()``): ``benchmarks/README.md``, "Issue 20".

    python benchmarks/agent_scenarios.py                 # both modes, a table
    python benchmarks/agent_scenarios.py --mode local --json out.json
    python benchmarks/agent_scenarios.py --only python_repl,editor

Real programs only (bash, python3, git, vim, less, top, node when installed);
a scenario whose program is missing is reported ``missing``, not passed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ahp
from ahp.client import connect
from ahp.server import ServeOptions

try:
    from ahp.agent import CommandHandle, CommandResult, as_completed, wait_any
except ImportError:  # the tree before issue 20 (run through this script for "before")
    from ahp.run import CommandHandle, CommandResult, as_completed, wait_any  # type: ignore

#: Bound on one scenario (a hang fails it; it never stops the suite).
SCENARIO_TIMEOUT = 60.0
TOKEN = "scenario-token"


@attrs.define
class Agent:
    """What the agent reads, counted; and how it gets more terminals."""

    term: Any
    new_terminal: Callable[[], Awaitable[Any]]
    workdir: Path
    chars: int = 0
    #: Of which in ``note`` (the one-sentence explanations, issue 20).
    note_chars: int = 0

    def read(self, result: CommandResult) -> CommandResult:
        note = len(getattr(result, "note", ""))
        self.chars += len(result.output) + note
        self.note_chars += note
        return result

    def read_new(self, handle: CommandHandle) -> str:
        text = handle.read_new()
        self.chars += len(text)
        return text

    def screen(self) -> str:
        text: str = self.term.screen().text()
        self.chars += len(text)
        return text

    async def run(self, command: str, **options: Any) -> CommandResult:
        return self.read(await self.term.run(command, **options))

    async def wait(self, handle: CommandHandle, timeout: float | None = None) -> CommandResult:
        return self.read(await handle.wait(timeout))


Scenario = Callable[[Agent], Awaitable[bool]]
SCENARIOS: dict[str, tuple[Scenario, tuple[str, ...]]] = {}


def scenario(*programs: str) -> Callable[[Scenario], Scenario]:
    def register(fn: Scenario) -> Scenario:
        SCENARIOS[fn.__name__] = (fn, programs)
        return fn

    return register


async def answer(agent: Agent, result: CommandResult, keys: str) -> CommandResult:
    assert result.handle is not None, result
    await result.handle.send_input(keys)
    return await agent.wait(result.handle)


# -- the tasks ---------------------------------------------------------------------------------


@scenario()
async def build_and_exit_code(agent: Agent) -> bool:
    ok = await agent.run("echo compiling; echo done")
    failed = await agent.run("echo 'error: no such file' >&2; exit_code=2; (exit $exit_code)")
    return ok.exit_code == 0 and ok.output == "compiling\ndone\n" and failed.exit_code == 2


@scenario()
async def read_prompt(agent: Agent) -> bool:
    first = await agent.run('read -p "Project name? " name; echo "created $name"')
    if first.status != "waiting_for_input":
        return False
    final = await answer(agent, first, "demo\r")
    return final.status == "finished" and final.output.endswith("created demo\n")


@scenario("python3")
async def password_prompt(agent: Agent) -> bool:
    first = await agent.run(
        'python3 -c \'import getpass; print("ok" if getpass.getpass() else "no")\''
    )
    if first.status != "waiting_for_input" or first.handle is None:
        return False
    evidence = first.handle.input_evidence
    final = await answer(agent, first, "hunter2\r")
    return bool(evidence and not evidence.echo) and final.output.endswith("ok\n")


@scenario()
async def confirm_prompt(agent: Agent) -> bool:
    (agent.workdir / "victim").write_text("x")
    first = await agent.run(f"rm -i {agent.workdir / 'victim'}")
    if first.status != "waiting_for_input":
        return False
    final = await answer(agent, first, "y\r")
    return final.exit_code == 0 and not (agent.workdir / "victim").exists()


@scenario()
async def silent_read(agent: Agent) -> bool:
    first = await agent.run("cat > notes.txt")
    if first.status != "waiting_for_input":
        return False
    final = await answer(agent, first, "line one\r\x04")
    return final.exit_code == 0 and (agent.workdir / "notes.txt").read_text() == "line one\n"


@scenario()
async def pause_is_not_a_prompt(agent: Agent) -> bool:
    result = await agent.run("printf 'Continue? '; sleep 2; echo yes")
    return result.status == "finished" and result.output == "Continue? yes\n"


@scenario("python3")
async def python_repl(agent: Agent) -> bool:
    first = await agent.run("python3 -q")
    if first.status != "waiting_for_input" or first.handle is None:
        return False
    handle = first.handle
    agent.read_new(handle)
    await handle.send_input("sum(range(10))\r")
    await agent.wait(handle)
    seen = agent.read_new(handle)
    await handle.send_input("exit()\r")
    final = await agent.wait(handle)
    return "45" in seen and final.status == "finished"


@scenario("node")
async def node_repl(agent: Agent) -> bool:
    first = await agent.run("node")
    if first.status != "waiting_for_input" or first.handle is None:
        return False
    handle = first.handle
    agent.read_new(handle)
    await handle.send_input("6*7\r")
    await agent.wait(handle)
    seen = agent.read_new(handle)
    await handle.send_input(".exit\r")
    final = await agent.wait(handle)
    return "42" in seen and final.status == "finished"


@scenario("node")
async def node_readline_question(agent: Agent) -> bool:
    program = (
        'const rl = require("readline").createInterface({input: process.stdin, '
        'output: process.stdout}); rl.question("Package name: ", a => '
        '{ console.log("ok " + a); rl.close(); })'
    )
    first = await agent.run(f"node -e '{program}'")
    if first.status != "waiting_for_input":
        return False
    final = await answer(agent, first, "pkg\r")
    return final.output.endswith("ok pkg\n")


@scenario("ipython")
async def ipython_repl(agent: Agent) -> bool:
    first = await agent.run("ipython --no-banner --colors=NoColor --no-confirm-exit")
    if first.status != "waiting_for_input" or first.handle is None:
        return False
    handle = first.handle
    await handle.send_input("2**10\r")
    await agent.wait(handle)
    seen = agent.screen()
    if "1024" not in seen:
        # prompt_toolkit asks for the cursor position and waits 2 s for an answer a
        # terminal without a viewer does not give: waiting meanwhile; look again.
        await agent.wait(handle, timeout=10)
        seen = agent.screen()
    await handle.send_input("exit\r")
    final = await agent.wait(handle)
    for _ in range(3):  # (the same wait for a cursor-position answer, on the way out)
        if final.done:
            break
        final = await agent.wait(handle, timeout=10)
    return "1024" in seen and final.status == "finished"


@scenario("vim")
async def edit_a_file(agent: Agent) -> bool:
    first = await agent.run("vim -u NONE -N notes.md")
    if first.status != "waiting_for_input" or not first.alternate_screen:
        return False
    assert first.handle is not None
    await first.handle.send_input("iHello from the agent\x1b:wq\r")
    final = await agent.wait(first.handle)
    text = (agent.workdir / "notes.md").read_text()
    return final.status == "finished" and text == "Hello from the agent\n"


@scenario("git", "vim")
async def git_commit_opens_an_editor(agent: Agent) -> bool:
    setup = await agent.run(
        "git init -q repo && cd repo && git config user.name a && git config user.email a@b"
        " && echo x > f && git add f"
    )
    if setup.exit_code != 0:
        return False
    first = await agent.run("GIT_EDITOR='vim -u NONE -N' git commit")
    if first.status != "waiting_for_input" or first.handle is None:
        return False
    evidence = first.handle.input_evidence
    screen = agent.screen()
    await first.handle.send_input("ggOfirst commit\x1b:wq\r")
    final = await agent.wait(first.handle)
    log = await agent.run("git log --oneline")
    return (
        evidence is not None
        and evidence.full_screen
        and "COMMIT_EDITMSG" in " ".join(evidence.programs)
        and "Please enter the commit message" in screen
        and final.exit_code == 0
        and "first commit" in log.output
    )


@scenario("less")
async def pager(agent: Agent) -> bool:
    paged = await agent.run("seq 1 300 | less")
    if paged.status != "waiting_for_input":
        return False
    screen = agent.screen()
    final = await answer(agent, paged, "q")
    plain = await agent.run("git --no-pager log -1 2>/dev/null; man -P cat ls | head -3")
    return screen.startswith("1\n2\n") and final.status == "finished" and plain.done


@scenario("top")
async def full_screen_monitor(agent: Agent) -> bool:
    first = await agent.run("top -d 1")
    if first.status != "waiting_for_input" or first.handle is None:
        return False
    screen = agent.screen()
    final = await answer(agent, first, "q")
    return "PID" in screen and final.status == "finished"


@scenario()
async def progress_bar(agent: Agent) -> bool:
    result = await agent.run(
        "for i in $(seq 0 5 100); do printf '\\rDownloading [%-20s] %3d%%' "
        "$(printf '#%.0s' $(seq 0 $((i/5)))) $i; sleep 0.01; done; echo; echo saved"
    )
    return result.output.endswith("100%\nsaved\n") and result.output.count("\n") == 2


@scenario("python3")
async def dev_server_in_the_background(agent: Agent) -> bool:
    started = await agent.run(
        "python3 -m http.server 0 --bind 127.0.0.1 > server.log 2>&1 & sleep 0.5; echo up"
    )
    if not started.background:
        return False
    port_line = await agent.run(
        "for i in $(seq 50); do grep -q port server.log && break; sleep 0.1; done; cat server.log"
    )
    port = port_line.output.split("port ")[-1].split(" ")[0]
    fetched = await agent.run(f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/")
    stopped = await agent.run("kill %1; wait 2>/dev/null; echo stopped")
    return fetched.output.strip() == "200" and stopped.output.endswith("stopped\n")


@scenario()
async def dev_server_in_the_foreground(agent: Agent) -> bool:
    handle = await agent.term.start("python3 -m http.server 0 --bind 127.0.0.1")
    partial = await agent.wait(handle, timeout=2)
    await handle.interrupt()
    final = await agent.wait(handle)
    return partial.status == "running" and final.status == "interrupted"


@scenario()
async def huge_output(agent: Agent) -> bool:
    result = await agent.run("seq 1 2000000")
    return (
        result.exit_code == 0
        and result.truncated
        and result.total_lines == 2000000
        and result.output.startswith("1\n2\n")
        and result.output.endswith("2000000\n")
    )


@scenario()
async def binary_output(agent: Agent) -> bool:
    result = await agent.run("head -c 200000 /dev/urandom; echo; echo end")
    return result.exit_code == 0 and result.output.endswith("end\n")


@scenario()
async def parallel_terminals(agent: Agent) -> bool:
    terms = [await agent.new_terminal() for _ in range(3)]
    handles = [
        await t.start(f"sleep {d}; echo done {d}")
        for t, d in zip(terms, ("1.5", "0.2", "0.8"), strict=True)
    ]
    first = await wait_any(handles)
    order = [agent.read(r).output async for r in as_completed(handles)]
    return first is handles[1] and order == ["done 0.2\n", "done 0.8\n", "done 1.5\n"]


@scenario()
async def busy_terminal(agent: Agent) -> bool:
    first = await agent.run('read -p "Overwrite? [y/N] " a; echo "answer=$a"')
    refused = await agent.run("echo next")
    if refused.status != "refused" or first.handle is None:
        return False
    final = await answer(agent, first, "y\r")
    after = await agent.run("echo next")
    return final.output.endswith("answer=y\n") and after.output == "next\n"


@scenario()
async def hard_timeout(agent: Agent) -> bool:
    result = await agent.run("echo working; sleep 30", timeout=1)
    after = await agent.run("echo next")
    return result.status == "timed_out" and after.output == "next\n"


@scenario()
async def heredoc_then_more(agent: Agent) -> bool:
    """Several lines are one command: the later lines' output is this run's."""
    result = await agent.run("cat <<'EOF' > lines.txt\na\nb\nEOF\nwc -l < lines.txt\necho last")
    after = await agent.run("echo next")
    return result.output == "2\nlast\n" and after.output == "next\n"


@scenario()
async def syntax_error(agent: Agent) -> bool:
    """A line the shell never starts ends, with the shell's message."""
    result = await agent.run("echo (")
    after = await agent.run("echo next")
    return "syntax error" in result.output and after.output == "next\n"


@scenario()
async def tiny_timeout(agent: Agent) -> bool:
    """A timeout so short its Ctrl-C may beat the command's start."""
    result = await agent.run("sleep 2", timeout=1e-6)
    after = await agent.run("echo next")
    return result.status == "timed_out" and after.output == "next\n"


@scenario()
async def shell_exits(agent: Agent) -> bool:
    result = await agent.run("echo bye; exit 3")
    return result.status == "shell_exited" and result.exit_code == 3


# -- running -----------------------------------------------------------------------------------


@attrs.frozen
class Outcome:
    name: str
    mode: str
    status: str  # passed, failed, missing, error
    seconds: float
    chars: int
    detail: str = ""
    note_chars: int = 0


@asynccontextmanager
async def local_terminals() -> AsyncIterator[Callable[[str], Awaitable[Any]]]:
    async with ahp.open_host() as host:

        async def new(cwd: str) -> Any:
            term = await host.create_terminal(shell="/bin/bash", cwd=cwd)
            # As the remote side does: the shell is ready (command detection announced).
            with trio.move_on_after(10):
                async with term.subscribe() as updates:
                    async for _ in updates:
                        if term.state.supportsCommandDetection is not None:
                            break
            return term

        yield new


@asynccontextmanager
async def remote_terminals() -> AsyncIterator[Callable[[str], Awaitable[Any]]]:
    async with ahp.open_host() as host, trio.open_nursery() as nursery:
        sidecar = await nursery.start(ahp.serve_host, host, ServeOptions(port=0, token=TOKEN))
        async with connect(sidecar.url) as client:
            count = 0

            async def new(cwd: str) -> Any:
                nonlocal count
                count += 1
                uri = f"ahp-terminal:/scenario-{count}"
                await client.create_terminal(uri, cwd=cwd)
                term = client.terminal(uri)
                with trio.move_on_after(10):
                    await client.wait_for(lambda: term.state.supportsCommandDetection is not None)
                return term

            yield new
        nursery.cancel_scope.cancel()


async def run_one(
    name: str, fn: Scenario, programs: tuple[str, ...], mode: str, new: Any
) -> Outcome:
    missing = [p for p in programs if shutil.which(p) is None]
    if missing:
        return Outcome(name, mode, "missing", 0.0, 0, f"not installed: {' '.join(missing)}")
    with tempfile.TemporaryDirectory(prefix="ahp-scenario-") as tmp:
        workdir = Path(tmp)
        term = await new(tmp)
        agent = Agent(term=term, new_terminal=lambda: new(tmp), workdir=workdir)
        started = time.monotonic()
        try:
            with trio.fail_after(SCENARIO_TIMEOUT):
                passed = await fn(agent)
        except trio.TooSlowError:
            return Outcome(name, mode, "failed", time.monotonic() - started, agent.chars, "hung")
        except Exception as exc:  # a crash of the API is a failure of the scenario
            return Outcome(name, mode, "error", time.monotonic() - started, agent.chars, repr(exc))
        elapsed = time.monotonic() - started
    status = "passed" if passed else "failed"
    return Outcome(name, mode, status, elapsed, agent.chars, note_chars=agent.note_chars)


async def run_suite(modes: list[str], only: set[str] | None) -> list[Outcome]:
    outcomes = []
    for mode in modes:
        opener = local_terminals if mode == "local" else remote_terminals
        async with opener() as new:
            for name, (fn, programs) in SCENARIOS.items():
                if only and name not in only:
                    continue
                outcomes.append(await run_one(name, fn, programs, mode, new))
                print(outcomes[-1], file=sys.stderr, flush=True)
    return outcomes


def table(outcomes: list[Outcome]) -> str:
    modes = sorted({o.mode for o in outcomes})
    names = list(dict.fromkeys(o.name for o in outcomes))
    by = {(o.name, o.mode): o for o in outcomes}
    head = "| task | " + " | ".join(f"{m}: result, s, chars read" for m in modes) + " |"
    lines = [head, "|---|" + "---|" * len(modes)]
    for name in names:
        cells = []
        for mode in modes:
            o = by[(name, mode)]
            cells.append(f"{o.status}, {o.seconds:.2f}, {o.chars}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for mode in modes:
        mine = [o for o in outcomes if o.mode == mode]
        passed = sum(o.status == "passed" for o in mine)
        total_s = sum(o.seconds for o in mine)
        chars = sum(o.chars for o in mine)
        lines.append(
            f"\n{mode}: {passed} of {len(mine)} passed, {total_s:.1f} s, {chars} characters read"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--mode", choices=("local", "remote", "both"), default="both")
    parser.add_argument("--only", help="comma-separated scenario names")
    parser.add_argument("--json", metavar="PATH", help="write the outcomes as JSON")
    args = parser.parse_args()
    modes = ["local", "remote"] if args.mode == "both" else [args.mode]
    only = set(args.only.split(",")) if args.only else None
    os.environ.setdefault("PAGER", "cat")
    outcomes = trio.run(run_suite, modes, only)
    print(table(outcomes))
    if args.json:
        Path(args.json).write_text(json.dumps([attrs.asdict(o) for o in outcomes], indent=2))


if __name__ == "__main__":
    main()
