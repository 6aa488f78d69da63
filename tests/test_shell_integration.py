"""Shell integration through the engine: real bash, zsh and fish on real ptys (issue 3).

Each test creates terminals with :func:`ahp.engine.open_host` and the integration
injected by default, types commands with ``send_input`` and checks the command
parts, actions and text that an AHP client would see.

Test rules:
- Every shell gets a temporary HOME with its own startup files (``env={"HOME": ...}``);
  nothing reads the machine's rc files.
- Synchronise on state only: wait (under ``trio.fail_after``) until a predicate on
  the terminal's state holds, never on sleeps or silence. The one poll loop waits
  for a condition the terminal cannot report (``sleep`` in the foreground).
- A recorder follows every terminal from creation, so "never" and "exactly once"
  claims are checked over every action published.

fish: it writes the window title (OSC 0), an SGR reset and a CR after its
``fish_preexec`` event and before it runs the command, and no fish hook runs
later (fish 4 puts its own OSC 133 ``C`` at the same place). Those invisible
bytes therefore open every fish command's output; :func:`assert_output` accepts
exactly them, and nothing else, in front of the expected text.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio

from ahp.engine import Terminal, open_host
from ahp.protocol import (
    ActionEnvelope,
    CommandPart,
    Snapshot,
    TerminalClaimed,
    TerminalCommandDetectionAvailable,
    TerminalCommandExecuted,
    TerminalCwdChanged,
    TerminalData,
    TerminalState,
    UnclassifiedPart,
)
from ahp.protocol.actions import StateAction
from ahp.vt import (
    CommandFinished,
    CommandStart,
    CommandTracker,
    PromptEnd,
    PromptStart,
    Scanner,
)
from tests.helpers import TIMEOUT, wait_for_state

SHELLS = ("bash", "zsh", "fish")
PROMPTS = {"bash": "tbash$ ", "zsh": "tzsh% ", "fish": "tfish> "}
OSC633 = "\x1b]633;"
#: What fish writes between its preexec event and the command (see the module docstring):
#: bracketed paste off, the title, SGR resets and charset selection, a CR.
FISH_PRELUDE = r"(?:\x1b\[\?2004l|\x1b\]0;[^\x07\x1b]*\x07|\x1b\[[0-9;]*m|\x1b\(B|\r)*"
FORGED = r"printf '\033]633;E;rm -rf /;wrong\007\n'"


def shell_path(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if name == "bash":  # every terminal's default shell: the suite cannot do without it
            raise AssertionError("bash is required for these tests")
        pytest.skip(f"{name} is not installed (CI installs it: apt-get install -y {name})")
    return path


def write_home(shell: str, home: Path, rc: str | None = None) -> dict[str, str]:
    """Startup files for ``shell`` under ``home``; the environment that selects them."""
    home.mkdir(parents=True, exist_ok=True)
    (home / ".bashrc").write_text(rc if shell == "bash" and rc else "PS1='tbash$ '\n")
    (home / ".zshrc").write_text(rc if shell == "zsh" and rc else "PS1='tzsh%% '\n")
    conf = home / ".config" / "fish"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "config.fish").write_text(
        "set -g fish_greeting ''\nfunction fish_prompt; printf 'tfish> '; end\n"
    )
    # Keeps fish from generating man-page completions in the background on first start.
    (home / ".local" / "share" / "fish" / "generated_completions").mkdir(
        parents=True, exist_ok=True
    )
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "LANG": "C.UTF-8",
    }


def commands(state: TerminalState) -> list[CommandPart]:
    return [p for p in state.content if isinstance(p, CommandPart)]


def tail(state: TerminalState) -> str:
    """The text after the last command part (the prompt the shell printed since)."""
    parts: list[str] = []
    for part in reversed(state.content):
        if isinstance(part, CommandPart):
            break
        parts.append(str(part.value))
    return "".join(reversed(parts))


def assert_output(shell: str, part: CommandPart, expected: str) -> None:
    output = str(part.output)
    if shell == "fish":
        assert re.fullmatch(FISH_PRELUDE + re.escape(expected), output), output
    else:
        assert output == expected


@attrs.define
class Session:
    """A terminal, its prompt, and every action published since it was created."""

    term: Terminal
    prompt: str | None
    first: TerminalState | None = None
    actions: list[StateAction] = attrs.Factory(list)
    resyncs: int = 0
    probes: int = 0
    _changed: trio.Event = attrs.Factory(trio.Event)

    async def record(self, *, task_status: trio.TaskStatus[None]) -> None:
        async with self.term.subscribe(max_bytes=1 << 30) as sub:
            async for item in sub:
                if isinstance(item, Snapshot):
                    if self.first is None:
                        assert isinstance(item.state, TerminalState)
                        self.first = item.state
                        task_status.started()
                    else:
                        self.resyncs += 1
                elif isinstance(item, ActionEnvelope):
                    self.actions.append(item.action)
                    self._changed.set()
                    self._changed = trio.Event()

    async def synced(self) -> None:
        """Wait until the recorder holds every action published so far.

        The probe is a no-op claim (the current one): it is published after every
        action already reduced, and changes nothing.
        """
        self.probes += 1
        probe = TerminalClaimed(claim=self.state.claim)
        await self.term.dispatch(probe)
        with trio.fail_after(TIMEOUT):
            while sum(a == probe for a in self.actions) < self.probes:
                await self._changed.wait()

    @property
    def state(self) -> TerminalState:
        return self.term.state

    async def wait(self, predicate: Callable[[TerminalState], bool]) -> TerminalState:
        return await wait_for_state(self.term, predicate)

    async def ready(self) -> None:
        """Wait for the first prompt of an integrated shell."""
        prompt = self.prompt
        assert prompt is not None
        await self.wait(lambda s: bool(s.supportsCommandDetection) and prompt in tail(s))

    async def run(self, line: str) -> list[CommandPart]:
        """Type ``line`` (``\\n`` = Enter) and Enter; wait for the command and the next prompt.

        Returns the command parts that appeared (the caller checks there is one).
        """
        prompt = self.prompt
        assert prompt is not None
        before = len(commands(self.state))
        await self.term.send_input(line.replace("\n", "\r") + "\r")
        state = await self.wait(
            lambda s: len(commands(s)) > before and commands(s)[-1].isComplete and prompt in tail(s)
        )
        return commands(state)[before:]

    async def run_one(self, line: str) -> CommandPart:
        parts = await self.run(line)
        assert len(parts) == 1, parts
        return parts[0]

    async def check_invariants(self) -> None:
        """What must hold over the whole life of an integrated terminal."""
        await self.synced()
        assert self.first is not None
        assert self.resyncs == 0
        detected = sum(isinstance(a, TerminalCommandDetectionAvailable) for a in self.actions)
        assert detected + bool(self.first.supportsCommandDetection) == 1
        assert self.state.supportsCommandDetection is True
        for action in self.actions:
            if isinstance(action, TerminalData):
                assert OSC633 not in action.data, action
            if isinstance(action, TerminalCommandExecuted):
                assert action.commandLine != "rm -rf /"  # the forged E line
        assert OSC633 not in self.first.text()
        assert OSC633 not in self.state.text()
        assert "\x1b]133;" not in self.state.text()
        if self.prompt is not None:
            # Every prompt is shown outside command parts.
            for part in commands(self.state):
                assert self.prompt not in str(part.output), part
            unclassified = [p for p in self.state.content if isinstance(p, UnclassifiedPart)]
            assert self.prompt in "".join(str(p.value) for p in unclassified)


@asynccontextmanager
async def open_session(
    *,
    shell: str | None = None,
    argv: list[str] | None = None,
    home: Path,
    rc: str | None = None,
    prompt: str | None = None,
    cwd: Path | None = None,
) -> AsyncIterator[Session]:
    name = os.path.basename(shell or (argv or ["sh"])[0])
    env = write_home(name, home, rc)
    async with open_host() as host:
        with trio.fail_after(TIMEOUT):
            term = await host.create_terminal(
                shell=shell, argv=argv, cwd=str(cwd or home), env=env, cols=120, rows=40
            )
        session = Session(term, prompt if prompt is not None else PROMPTS.get(name))
        async with trio.open_nursery() as nursery:
            await nursery.start(session.record)
            try:
                if term.integrated:
                    await session.ready()
                yield session
                if term.integrated:
                    await session.check_invariants()
            finally:
                nursery.cancel_scope.cancel()


@pytest.fixture(params=SHELLS)
def shell(request: pytest.FixtureRequest) -> str:
    return shell_path(request.param)


def _name(shell: str) -> str:
    return os.path.basename(shell)


# -- per shell -----------------------------------------------------------------------------


async def test_echo_hello_is_one_command(shell: str, tmp_path: Path) -> None:
    async with open_session(shell=shell, home=tmp_path / "home") as s:
        assert s.term.integrated
        part = await s.run_one("echo hello")
        assert part.commandLine == "echo hello"
        assert_output(_name(shell), part, "hello\r\n")
        assert part.exitCode == 0
        assert part.durationMs is not None
        assert part.durationMs >= 0
        assert part.isComplete
        assert part.timestamp > 0
        # The prompt that follows is unclassified, and it is the user's prompt.
        assert isinstance(s.state.content[-1], UnclassifiedPart)
        assert PROMPTS[_name(shell)] in tail(s.state)


async def test_exit_codes_and_cwd(shell: str, tmp_path: Path) -> None:
    async with open_session(shell=shell, home=tmp_path / "home") as s:
        part = await s.run_one("false")
        assert (part.commandLine, part.exitCode, part.isComplete) == ("false", 1, True)
        part = await s.run_one("sh -c 'exit 7'")
        assert (part.commandLine, part.exitCode) == ("sh -c 'exit 7'", 7)
        assert s.state.cwd == (tmp_path / "home").as_uri()
        part = await s.run_one("cd /tmp")
        assert (part.commandLine, part.exitCode) == ("cd /tmp", 0)
        assert s.state.cwd == "file:///tmp"
        await s.synced()
        assert TerminalCwdChanged(cwd="file:///tmp") in s.actions


async def test_multiline_commands_are_one_command_each(shell: str, tmp_path: Path) -> None:
    if _name(shell) == "fish":
        loop, block = "for i in 1 2\necho $i\nend", "if true\necho yes\nend"
    else:
        loop, block = "for i in 1 2; do\necho $i\ndone", "if true; then\necho yes\nfi"
    async with open_session(shell=shell, home=tmp_path / "home") as s:
        part = await s.run_one(loop)
        assert part.commandLine == loop
        assert_output(_name(shell), part, "1\r\n2\r\n")
        assert part.exitCode == 0
        part = await s.run_one(block)
        assert part.commandLine == block
        assert_output(_name(shell), part, "yes\r\n")
        assert part.exitCode == 0


async def test_ctrl_c_completes_the_command_with_130(shell: str, tmp_path: Path) -> None:
    async with open_session(shell=shell, home=tmp_path / "home") as s:
        await s.term.send_input("sleep 30\r")
        state = await s.wait(lambda st: bool(commands(st)) and commands(st)[-1].commandLine != "")
        assert not commands(state)[-1].isComplete
        await wait_foreground(s.term, "sleep")
        await s.term.send_input("\x03")
        state = await s.wait(lambda st: commands(st)[-1].isComplete)
        part = commands(state)[-1]
        assert len(commands(state)) == 1
        assert (part.commandLine, part.exitCode) == ("sleep 30", 130)
        # The shell is usable afterwards.
        part = await s.run_one("echo again")
        assert_output(_name(shell), part, "again\r\n")


async def test_forged_command_line_is_never_used(shell: str, tmp_path: Path) -> None:
    async with open_session(shell=shell, home=tmp_path / "home") as s:
        part = await s.run_one(FORGED)
        assert part.commandLine == FORGED
        assert part.exitCode == 0
        assert_output(_name(shell), part, "\r\n")  # the sequence itself is removed
        # The forged line is not kept for the next command either.
        part = await s.run_one("echo next")
        assert part.commandLine == "echo next"
        assert all(p.commandLine != "rm -rf /" for p in commands(s.state))


async def test_marks_in_a_programs_output_move_no_command(shell: str, tmp_path: Path) -> None:
    """Session 19's probe, on a real shell: ``cat`` of a file holding the marks that
    finish a command with 0, start another and report a cwd, then a failure. Before,
    the ``cat`` finished as exit code 0 and a phantom command took the real 1."""
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "notes").write_bytes(
        b"x\x1b]633;D;0\x07\x1b]633;A\x07\x1b]633;B\x07\x1b]633;E;rm -rf /;n\x07"
        b"\x1b]633;C\x07\x1b]633;P;Cwd=/evil\x07\x1b]7;file://localhost/evil\x07y\n"
    )
    line = "cat notes; false"
    async with open_session(shell=shell, home=home) as s:
        part = await s.run_one(line)
        assert (part.commandLine, part.exitCode, part.isComplete) == (line, 1, True)
        assert [p.commandLine for p in commands(s.state)] == [line]
        assert s.state.cwd == home.as_uri()
        assert "\x1b]633" not in s.state.text()  # (removed from the text all the same)
        part = await s.run_one("echo next")
        assert (part.commandLine, part.exitCode) == ("echo next", 0)


async def test_empty_line_creates_no_command(shell: str, tmp_path: Path) -> None:
    async with open_session(shell=shell, home=tmp_path / "home") as s:
        await s.run_one("true")
        prompts = s.state.text().count(s.prompt or "")
        await s.term.send_input("\r")
        await s.wait(lambda st: st.text().count(s.prompt or "") > prompts)
        assert len(commands(s.state)) == 1
        part = await s.run_one("echo after")
        assert [p.commandLine for p in commands(s.state)] == ["true", "echo after"]
        assert_output(_name(shell), part, "after\r\n")


async def test_osc133_from_a_command_does_not_count_twice(shell: str, tmp_path: Path) -> None:
    # What a shell with its own integration (fish 4) or a program adds next to our OSC 633.
    line = r"printf '\033]133;D;5\007\033]133;A\007\033]133;C\007x\n\033]133;D;9\007'"
    async with open_session(shell=shell, home=tmp_path / "home") as s:
        part = await s.run_one(line)
        assert (part.commandLine, part.exitCode) == (line, 0)
        assert_output(_name(shell), part, "x\r\n")
        assert len(commands(s.state)) == 1


# -- user startup files --------------------------------------------------------------------

BASHRC = """\
PS1='ubash> '
alias greet='echo hi-from-alias'
PROMPT_COMMAND='__pc=$((__pc+1)); touch ~/pc-ran'
trap '__dbg=$((__dbg+1))' DEBUG
"""

ZSHRC = """\
PS1='uzsh> '
PROMPT_EOL_MARK='<no-eol>'
alias greet='echo hi-from-alias'
precmd() { __pc=$((__pc+1)); touch ~/pc-ran }
__my_preexec() { __px=$((__px+1)) }
preexec_functions+=(__my_preexec)
"""


async def _counters(s: Session, names: tuple[str, str]) -> tuple[int, int]:
    a, b = names
    part = await s.run_one(f'echo "{a}=${a} {b}=${b}"')
    m = re.fullmatch(rf"{a}=(\d+) {b}=(\d+)\r\n", str(part.output))
    assert m is not None, part
    return int(m[1]), int(m[2])


@pytest.mark.parametrize("name", ["bash", "zsh"])
async def test_user_rc_hooks_keep_working(name: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    rc, prompt = (BASHRC, "ubash> ") if name == "bash" else (ZSHRC, "uzsh> ")
    names = ("__pc", "__dbg") if name == "bash" else ("__pc", "__px")
    async with open_session(shell=shell_path(name), home=home, rc=rc, prompt=prompt) as s:
        part = await s.run_one("greet")
        assert (part.commandLine, str(part.output), part.exitCode) == (
            "greet",
            "hi-from-alias\r\n",
            0,
        )
        assert (home / "pc-ran").exists()  # the user's prompt hook ran
        first = await _counters(s, names)
        second = await _counters(s, names)
        assert all(x > 0 for x in first)
        assert all(y > x for x, y in zip(first, second, strict=True))  # both hooks still run

        rcfile = "~/.bashrc" if name == "bash" else "~/.zshrc"
        part = await s.run_one(f"source {rcfile}")
        assert (part.commandLine, part.exitCode) == (f"source {rcfile}", 0)
        (home / "pc-ran").unlink()
        part = await s.run_one("echo after-source")
        assert (part.commandLine, str(part.output), part.exitCode) == (
            "echo after-source",
            "after-source\r\n",
            0,
        )
        assert (home / "pc-ran").exists()
        third = await _counters(s, names)
        assert all(y > x for x, y in zip(second, third, strict=True))
        if name == "zsh":
            # The user's PROMPT_SP mark still shows, outside the command's output.
            part = await s.run_one("printf no-newline")
            assert str(part.output) == "no-newline"
            assert "<no-eol>" in tail(s.state)
        assert prompt in tail(s.state)


@pytest.mark.parametrize("name", ["bash", "zsh"])
async def test_osc133_from_the_users_rc_files_is_not_counted(name: str, tmp_path: Path) -> None:
    # Terminal integrations loaded from an rc file (kitty's, iTerm2's, a prompt theme) print
    # OSC 133 marks, possibly before our hooks ever printed an OSC 633 one.
    marks = r"printf '\033]133;A\007\033]133;C\007'"
    if name == "bash":
        rc = marks + "\nPS1='\\[\\e]133;A\\a\\]tbash$ \\[\\e]133;B\\a\\]'\n"
    else:
        rc = marks + "\nPS1=$'%{\\e]133;A\\a%}tzsh%% %{\\e]133;B\\a%}'\n"
    async with open_session(shell=shell_path(name), home=tmp_path / "home", rc=rc) as s:
        part = await s.run_one("echo hello")
        assert (part.commandLine, str(part.output), part.exitCode) == ("echo hello", "hello\r\n", 0)
        assert commands(s.state) == [part]


# -- no integration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "shell"),
    [(["sh"], None), (None, "/bin/sh"), (["bash"], None)],
    ids=["argv-sh", "shell-bin-sh", "argv-bash"],
)
async def test_other_launches_run_untouched(
    argv: list[str] | None, shell: str | None, tmp_path: Path
) -> None:
    async with open_session(argv=argv, shell=shell, home=tmp_path / "home", prompt="") as s:
        assert not s.term.integrated
        await s.term.send_input("echo $((6*7))\r")
        await s.wait(lambda st: "42\r\n" in st.text())
        await s.term.send_input("false; echo status=$?\r")
        await s.wait(lambda st: "status=1\r\n" in st.text())
        assert s.state.supportsCommandDetection is None
        assert commands(s.state) == []
        await s.synced()
        assert not any(isinstance(a, TerminalCommandDetectionAvailable) for a in s.actions)


async def test_osc133_after_osc633_is_ignored_without_injection(tmp_path: Path) -> None:
    # A program that marks its output with both families: one command, reported once.
    marks = r"\033]633;C\007\033]133;C\007out\n\033]133;D;3\007\033]633;D;0\007"
    async with open_session(argv=["sh", "-c", f"printf '{marks}'"], home=tmp_path) as s:
        with trio.fail_after(TIMEOUT):
            await s.term.wait_exited()
        (part,) = commands(s.state)
        assert (part.commandLine, str(part.output), part.exitCode) == ("", "out\r\n", 0)


@pytest.mark.parametrize("osc", [633, 133])
def test_scanner_reports_the_family_of_each_mark(osc: int) -> None:
    # Marks of both families compare equal (eq=False), so the vt tests cannot see this.
    data = b"".join(b"\x1b]%d;%s\x07" % (osc, m) for m in (b"A", b"B", b"C", b"D", b"D;0", b"D;42"))
    events = Scanner().feed(data)
    assert [type(e) for e in events] == [
        PromptStart,
        PromptEnd,
        CommandStart,
        CommandFinished,
        CommandFinished,
        CommandFinished,
    ]
    assert {
        e.osc
        for e in events
        if isinstance(e, PromptStart | PromptEnd | CommandStart | CommandFinished)
    } == {osc}


def test_tracker_told_about_injected_hooks_ignores_osc133() -> None:
    tracker = CommandTracker(nonce="n", osc133=False)
    for event in (PromptStart(osc=133), CommandStart(osc=133), CommandFinished(3, osc=133)):
        assert tracker.handle(event, wall_ms=1, mono_ms=1.0) == []
    assert not tracker.detection_available
    signed = CommandStart(nonce="n")
    assert tracker.handle(signed, wall_ms=1, mono_ms=1.0)[-1] == TerminalCommandExecuted(
        commandId="cmd-1", commandLine="", timestamp=1
    )


# -- helpers ---------------------------------------------------------------------------------


async def wait_foreground(term: Terminal, comm: str) -> None:
    """Poll until ``comm`` leads the foreground process group of the terminal's shell."""
    pid = term.pid
    assert pid is not None
    with trio.fail_after(TIMEOUT):
        while True:
            stat = await trio.Path(f"/proc/{pid}/stat").read_text()
            tpgid = int(stat.rsplit(")", 1)[1].split()[5])
            try:
                name = (await trio.Path(f"/proc/{tpgid}/comm").read_text()).strip()
            except FileNotFoundError:
                name = ""
            if tpgid != pid and name == comm:
                return
            await trio.sleep(0.01)


@pytest.mark.parametrize("name", SHELLS)
@pytest.mark.parametrize("user_rc", [True, False], ids=["rc", "no-rc"])
async def test_a_shell_can_start_without_the_users_rc_files(
    name: str, user_rc: bool, tmp_path: Path
) -> None:
    """``user_rc=False`` (``serve --no-rc``): the user's startup files are not read, so
    what they put in the environment (a PATH entry ahead of a venv's) is not there;
    command detection still loads and reports the command."""
    program = shell_path(name)
    env = write_home(name, tmp_path)
    (tmp_path / ".bashrc").write_text("export AHP_TEST_RC=loaded\n")
    (tmp_path / ".zshrc").write_text("export AHP_TEST_RC=loaded\n")
    (tmp_path / ".zshenv").write_text("export AHP_TEST_RC_ENV=loaded\n")
    (tmp_path / ".config" / "fish" / "config.fish").write_text("set -gx AHP_TEST_RC loaded\n")
    async with open_host(user_rc=user_rc) as host:
        with trio.fail_after(TIMEOUT):
            term = await host.create_terminal(shell=program, cwd=str(tmp_path), env=env)
            result = await term.run("env | grep -c '^AHP_TEST_RC.*=loaded'", timeout=TIMEOUT)
        assert term.integrated and term.state.supportsCommandDetection
        expected = ({"zsh": 2}.get(name, 1)) if user_rc else 0
        assert result.output.strip() == str(expected), result
        assert result.exit_code == (0 if user_rc else 1)
