"""Shell integration against real bash, zsh and fish in real ptys.

Test rules:
- Every shell runs with a temporary HOME holding its own startup files and a minimal environment,
  so nothing depends on the machine's user files.
- Synchronise on output only: wait for a byte pattern (every wait is under ``trio.fail_after``),
  never sleep as a substitute. The one poll loop waits for a condition (a foreground job).
- Assert on raw bytes and on the OSC 633 sequences found by ``OSC633`` below.
- The pty harness is self-contained on purpose (the project's pty layer is written separately).
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import termios
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio

from ahp.shell import (
    BASH_SCRIPT,
    ShellLaunch,
    escape_value,
    prepare_shell,
    remove_launch_files,
)

NONCE = "t3st-N0nce_42"
WAIT = 15.0

OSC633 = re.compile(rb"\x1b\]633;([A-Z])(?:;([^\x07]*))?\x07")
# From a finished command (or an empty line) to the end of the next prompt.
CYCLE = re.compile(rb"\x1b\]633;D(?:;[^\x07]*)?\x07.*?\x1b\]633;B\x07", re.S)
# A cwd report (bash and fish print it before D, zsh when a command changes directory).
CWD_MARK = re.compile(rb"\x1b\]633;P;Cwd=[^\x07]*\x07")
# The C mark our scripts print (signed with the terminal's nonce).
C_MARK = b"\x1b]633;C;" + NONCE.encode() + b"\x07"
# Escape sequences shells print around output (CSI, OSC, charset selection, keypad modes).
_VT_NOISE = re.compile(
    rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>]"
)

# Gives the child the pty as controlling terminal (so ^C works), then runs the shell.
_CTTY_EXEC = (
    "import fcntl, os, sys, termios\n"
    "fcntl.ioctl(0, termios.TIOCSCTTY, 0)\n"
    "os.execvp(sys.argv[1], sys.argv[1:])\n"
)

SHELLS = ("bash", "zsh", "fish")
PROMPTS = {"bash": b"tbash$ ", "zsh": b"tzsh% ", "fish": b"tfish> "}
# The marks of one command, in order. bash and fish report the cwd before D (whoever sees a
# command's end has the cwd it left); zsh reports a change at once (chpwd) and the cwd after D.
FULL = {"bash": "ECPDAB", "zsh": "ECDPAB", "fish": "ECPDAB"}


def _have(shell: str) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed (CI installs it: apt-get install -y {shell})")


# --------------------------------------------------------------------------- harness


@attrs.frozen
class Ev:
    code: str
    arg: str | None  # (C, D and P: without the nonce that signs them)
    start: int
    end: int
    signed: bool = False


def parse_events(data: bytes) -> list[Ev]:
    events = []
    for m in OSC633.finditer(data):
        code = m[1].decode()
        arg = None if m[2] is None else m[2].decode("utf-8", "surrogateescape")
        signed = False
        if code in "CDP" and arg is not None:
            if arg == NONCE:
                arg, signed = None, True
            elif arg.endswith(";" + NONCE):
                arg, signed = arg[: -len(NONCE) - 1] or None, True
        events.append(Ev(code, arg, m.start(), m.end(), signed))
    return events


@attrs.frozen
class Cycle:
    """Everything from sending one line to the end of the following prompt."""

    raw: bytes

    @property
    def events(self) -> list[Ev]:
        return parse_events(self.raw)

    @property
    def codes(self) -> str:
        return "".join(e.code for e in self.events)

    def only(self, code: str) -> Ev:
        found = [e for e in self.events if e.code == code]
        assert len(found) == 1, f"expected one {code}, got {found} in {self.raw!r}"
        return found[0]

    def output(self) -> bytes:
        """Bytes between C and D, without the cwd reports (P) there."""
        return CWD_MARK.sub(b"", self.raw[self.only("C").end : self.only("D").start])

    def prompt(self) -> bytes:
        """Bytes between the last A and the last B."""
        a = [e for e in self.events if e.code == "A"][-1]
        b = [e for e in self.events if e.code == "B"][-1]
        return self.raw[a.end : b.start]

    def cwd(self) -> str | None:
        p = [e for e in self.events if e.code == "P"][-1]
        assert p.arg is not None
        assert p.arg.startswith("Cwd=")
        return p.arg[len("Cwd=") :]


class Term:
    """A shell on a pty: a reader task collects output, ``expect`` waits for patterns."""

    def __init__(self, master: int, proc: subprocess.Popen[bytes]) -> None:
        self.master = master
        self.proc = proc
        self.stream = trio.lowlevel.FdStream(os.dup(master))
        self.buf = bytearray()
        self.pos = 0
        self.eof = False
        self._changed = trio.Event()

    async def reader(self) -> None:
        while True:
            try:
                data = await self.stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""  # EIO on the master: the slave side is gone
            except OSError as exc:
                if exc.errno != errno.EIO:
                    raise
                data = b""
            if data:
                self.buf += data
                await self._answer_queries(data)
            else:
                self.eof = True
            self._changed.set()
            self._changed = trio.Event()
            if self.eof:
                return

    async def _answer_queries(self, data: bytes) -> None:
        # Newer fish versions ask the terminal for its attributes and cursor position.
        if b"\x1b[c" in data or b"\x1b[0c" in data:
            await self.stream.send_all(b"\x1b[?62;22c")
        if b"\x1b[6n" in data:
            await self.stream.send_all(b"\x1b[1;1R")

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def expect(self, pattern: re.Pattern[bytes] | bytes) -> re.Match[bytes]:
        """Wait for ``pattern`` after the read position; move the position past the match."""
        if isinstance(pattern, bytes):
            pattern = re.compile(re.escape(pattern))
        with trio.move_on_after(WAIT):
            while True:
                m = pattern.search(self.buf, self.pos)
                if m is not None:
                    self.pos = m.end()
                    return m
                if self.eof:
                    break
                await self._changed.wait()
        why = "the shell exited" if self.eof else f"nothing after {WAIT} s"
        tail = bytes(self.buf[self.pos :])[-3000:]
        raise AssertionError(f"no {pattern.pattern!r} ({why}); output: {tail!r}")

    async def ready(self) -> Cycle:
        start = self.pos
        m = await self.expect(CYCLE)
        return Cycle(bytes(self.buf[start : m.end()]))

    async def run(self, line: str) -> Cycle:
        """Type ``line`` (newlines become Enter) plus Enter and wait for the next prompt."""
        start = self.pos
        await self.send(line.replace("\n", "\r").encode() + b"\r")
        m = await self.expect(CYCLE)
        return Cycle(bytes(self.buf[start : m.end()]))

    async def wait_foreground(self, comm: str) -> None:
        """Poll until the terminal's foreground process group leader is running ``comm``."""
        with trio.fail_after(WAIT):
            while True:
                pgrp = os.tcgetpgrp(self.master)
                if pgrp != self.proc.pid and _process_name(pgrp) in (comm, None):
                    return
                await trio.sleep(0.01)


def _process_name(pid: int) -> str | None:
    """The command name of ``pid`` ("" if it is gone), or None without procfs."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except FileNotFoundError:
        return "" if Path("/proc/self").exists() else None


def _write_user_files(shell: str, home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    if shell == "bash":
        (home / ".bashrc").write_text(
            "PS1='tbash$ '\nalias greet='echo hi-from-alias'\n", encoding="utf-8"
        )
    elif shell == "zsh":
        (home / ".zshrc").write_text(
            "PS1='tzsh%% '\nalias greet='echo hi-from-alias'\n", encoding="utf-8"
        )
    else:
        conf = home / ".config" / "fish"
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "config.fish").write_text(
            "set -g fish_greeting ''\n"
            "function fish_prompt; printf 'tfish> '; end\n"
            "alias greet 'echo hi-from-alias'\n",
            encoding="utf-8",
        )
        # Keeps fish from generating man-page completions in the background on first start.
        (home / ".local" / "share" / "fish" / "generated_completions").mkdir(
            parents=True, exist_ok=True
        )


def _base_env(home: Path) -> dict[str, str]:
    return {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TERM": "xterm-256color",
        "LANG": "C.UTF-8",
        "USER": os.environ.get("USER", "tester"),
    }


@asynccontextmanager
async def open_shell(
    shell: str,
    home: Path,
    *,
    argv: Sequence[str] | None = None,
    login: bool = False,
    setup: Callable[[Path], None] | None = None,
) -> AsyncIterator[Term]:
    """Start ``shell`` integrated, in a pty, with HOME=``home``; wait for the first prompt."""
    _have(shell)
    _write_user_files(shell, home)
    if setup is not None:
        setup(home)
    launch = prepare_shell(argv or [shell], _base_env(home), nonce=NONCE, login=login)
    assert launch.integrated
    async with _spawn(launch, cwd=home) as term:
        await term.ready()
        yield term


@asynccontextmanager
async def _spawn(launch: ShellLaunch, *, cwd: Path) -> AsyncIterator[Term]:
    master, proc = _start_in_pty(launch, cwd)
    term = Term(master, proc)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(term.reader)
            try:
                yield term
            finally:
                nursery.cancel_scope.cancel()
    finally:
        await term.stream.aclose()
        os.close(master)  # the shell gets SIGHUP and passes it on to its jobs
        try:
            await trio.to_thread.run_sync(functools.partial(proc.wait, timeout=5))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        remove_launch_files(launch)


def _start_in_pty(launch: ShellLaunch, cwd: Path) -> tuple[int, subprocess.Popen[bytes]]:
    master, slave = os.openpty()
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 250, 0, 0))
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", _CTTY_EXEC, *launch.argv],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            env=launch.env,
            cwd=cwd,
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return master, proc


def _strip_vt(data: bytes) -> bytes:
    return _VT_NOISE.sub(b"", data).replace(b"\r", b"")


# --------------------------------------------------------------------------- per shell


@pytest.fixture(params=SHELLS)
def shell(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    _have(name)
    return name


async def test_echo_hello_full_sequence(shell: str, tmp_path: Path) -> None:
    async with open_shell(shell, tmp_path / "home") as t:
        c = await t.run("echo hello")
    # E, C, output, D;0 and P (see FULL), A, B — in that order, once each.
    assert c.codes == FULL[shell], c.raw
    e = c.only("E")
    assert e.arg == f"echo hello;{NONCE}"
    assert b"hello\r\n" in c.output()
    assert c.only("D").arg == "0"
    assert c.cwd() == str(tmp_path / "home")
    assert c.prompt() == PROMPTS[shell]
    # The marks that move the state carry the nonce (program output cannot forge them).
    assert all(e.signed for e in c.events if e.code in "CDP"), c.raw


async def test_exit_codes_and_cwd(shell: str, tmp_path: Path) -> None:
    async with open_shell(shell, tmp_path / "home") as t:
        c = await t.run("false")
        assert c.only("D").arg == "1"
        c = await t.run("sh -c 'exit 7'")
        assert c.only("D").arg == "7"
        assert c.only("E").arg == f"sh -c 'exit 7';{NONCE}"
        c = await t.run("cd /tmp")
        assert c.only("D").arg == "0"
        assert c.cwd() == "/tmp"


async def test_cwd_is_reported_before_the_end(shell: str, tmp_path: Path) -> None:
    """Probe L: the cwd came after D, so a client that acts on a command's end (``run``
    returns) could still see the cwd it left. bash and fish report it before D, zsh as
    the directory changes. A subshell's ``cd`` is not the shell's cwd."""
    home = tmp_path / "home"
    async with open_shell(shell, home) as t:
        c = await t.run("cd /tmp")
        d = c.only("D")
        cwds = [e.arg for e in c.events if e.code == "P" and e.start < d.start]
        assert cwds and cwds[-1] == "Cwd=/tmp", c.raw
        sub = "fish -c 'cd /'" if shell == "fish" else "(cd /)"
        c = await t.run(sub)
        assert {e.arg for e in c.events if e.code == "P"} <= {"Cwd=/tmp"}, c.raw


async def test_multiline_command_is_one_command(shell: str, tmp_path: Path) -> None:
    script = (
        "for i in 1 2\necho item$i\nend"
        if shell == "fish"
        else "for i in 1 2; do\necho item$i\ndone"
    )
    async with open_shell(shell, tmp_path / "home") as t:
        c = await t.run(script)
    assert c.codes == FULL[shell], c.raw
    assert c.only("E").arg == f"{escape_value(script)};{NONCE}"
    assert "\\x0a" in (c.only("E").arg or "")
    assert c.only("D").arg == "0"
    out = _strip_vt(c.output())
    assert b"item1\n" in out
    assert b"item2\n" in out


async def test_empty_line_reports_no_command(shell: str, tmp_path: Path) -> None:
    async with open_shell(shell, tmp_path / "home") as t:
        c = await t.run("")
        assert "E" not in c.codes
        assert "C" not in c.codes
        assert c.only("D").arg is None
        # The next real command is still detected normally.
        c = await t.run("true")
        assert c.codes == FULL[shell]
        assert c.only("D").arg == "0"


async def test_ctrl_c_reports_130(shell: str, tmp_path: Path) -> None:
    async with open_shell(shell, tmp_path / "home") as t:
        start = t.pos
        await t.send(b"sleep 30\r")
        await t.expect(C_MARK)
        await t.wait_foreground("sleep")
        await t.send(b"\x03")
        m = await t.expect(CYCLE)
    c = Cycle(bytes(t.buf[start : m.end()]))
    assert c.only("E").arg == f"sleep 30;{NONCE}"
    assert c.only("D").arg == "130"


async def test_pipeline_is_one_command(shell: str, tmp_path: Path) -> None:
    async with open_shell(shell, tmp_path / "home") as t:
        c = await t.run("echo a | cat")
    assert c.codes == FULL[shell], c.raw
    assert c.only("E").arg == f"echo a | cat;{NONCE}"
    assert b"a\r\n" in c.output()


async def test_nonce_is_not_visible_to_commands(shell: str, tmp_path: Path) -> None:
    async with open_shell(shell, tmp_path / "home") as t:
        c = await t.run("echo $AHP_NONCE")
        assert c.only("E").arg == f"echo $AHP_NONCE;{NONCE}"
        out = c.output()
        assert NONCE.encode() not in out
        assert _strip_vt(out).split(b"\n")[0] == b""  # an empty line
        c = await t.run("env | grep -c AHP_")
        assert NONCE.encode() not in c.output()
        assert _strip_vt(c.output()).split(b"\n")[0] == b"0"


async def test_alias_and_prompt_unchanged(shell: str, tmp_path: Path) -> None:
    async with open_shell(shell, tmp_path / "home") as t:
        c = await t.run("greet")
    assert c.only("E").arg == f"greet;{NONCE}"
    assert b"hi-from-alias\r\n" in c.output()
    # Between A and B there is exactly the user's prompt, nothing of ours.
    assert c.prompt() == PROMPTS[shell]


async def test_special_characters_are_escaped(shell: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    weird = home / "esc;dir\\with\ttab\nnewline-é"
    async with open_shell(shell, home, setup=lambda h: weird.mkdir(parents=True)) as t:
        c = await t.run("echo 'semi;back\\slash'")
        assert c.only("E").arg == f"echo 'semi\\x3bback\\\\slash';{NONCE}"
        assert b"semi;back\\slash\r\n" in c.output()
        c = await t.run("cd esc*")
        assert c.only("D").arg == "0"
        assert c.cwd() == escape_value(str(weird))
        assert c.cwd() == (str(home) + "/esc\\x3bdir\\\\with\\x09tab\\x0anewline-é")


# --------------------------------------------------------------------------- bash specifics

BASHRC_WITH_HOOKS = """\
PS1='tbash$ '
alias greet='echo hi-from-alias'
HISTCONTROL=ignoreboth
PROMPT_COMMAND='__pc=$((__pc+1)); touch ~/pc-ran'
trap '__dbg=$((__dbg+1))' DEBUG
"""


async def _counter(t: Term, name: str) -> int:
    c = await t.run(f'echo "{name}=${name}"')
    m = re.search(rb"%s=(\d+)" % name.encode(), c.output())
    assert m is not None, c.raw
    return int(m[1])


async def test_bash_user_hooks_keep_working(tmp_path: Path) -> None:
    home = tmp_path / "home"

    def setup(h: Path) -> None:
        (h / ".bashrc").write_text(BASHRC_WITH_HOOKS, encoding="utf-8")

    async with open_shell("bash", home, setup=setup) as t:
        c = await t.run("greet")
        assert c.codes == "ECPDAB"
        assert b"hi-from-alias" in c.output()
        assert c.prompt() == b"tbash$ "
        assert (home / "pc-ran").exists()
        pc1, dbg1 = await _counter(t, "__pc"), await _counter(t, "__dbg")
        pc2, dbg2 = await _counter(t, "__pc"), await _counter(t, "__dbg")
        assert pc2 > pc1 > 0
        assert dbg2 > dbg1 > 0

        # Re-reading the rc replaces PS1, PROMPT_COMMAND and the DEBUG trap; detection recovers.
        c = await t.run("source ~/.bashrc")
        assert c.only("D").arg == "0"
        c = await t.run("echo after")
        assert c.codes == "ECPDAB", c.raw
        assert c.only("E").arg == f"echo after;{NONCE}"
        assert c.prompt() == b"tbash$ "
        c = await t.run("false")
        assert c.only("D").arg == "1"
        pc3, dbg3 = await _counter(t, "__pc"), await _counter(t, "__dbg")
        pc4, dbg4 = await _counter(t, "__pc"), await _counter(t, "__dbg")
        assert pc4 > pc3 > pc2
        assert dbg4 > dbg3 > dbg2

        # A line left out of history (HISTCONTROL=ignorespace): an empty command line.
        c = await t.run(" echo hidden")
        assert c.only("E").arg == f";{NONCE}"
        assert c.only("D").arg == "0"
        # History off: still one E/C/D per line.
        await t.run("set +o history")
        c = await t.run("echo nohist | cat")
        assert c.codes == "ECPDAB"
        assert c.only("E").arg == f";{NONCE}"


def _bashrc(text: str) -> Callable[[Path], None]:
    def setup(h: Path) -> None:
        (h / ".bashrc").write_text("PS1='tbash$ '\n" + text, encoding="utf-8")

    return setup


async def test_bash_lines_left_out_of_history_start_and_end(tmp_path: Path) -> None:
    """Probe L: a line that did not reach history and ran no simple command in the shell
    itself (a subshell: a repeat under Debian's HISTCONTROL=ignoreboth, a leading space,
    HISTIGNORE, history off) had no C and a D without a status: "not run", no exit code.
    PS0 now starts every line bash runs; a syntax error or an empty line still starts none."""
    async with open_shell(
        "bash", tmp_path / "home", setup=_bashrc("HISTCONTROL=ignoreboth\n")
    ) as t:
        for _ in range(2):
            c = await t.run("(echo building; exit 3)")
            assert c.codes == "ECPDAB", c.raw
            assert c.only("D").arg == "3"
            assert _strip_vt(c.output()) == b"building\n"
        assert c.only("E").arg == f";{NONCE}"  # (the repeat: its line is not known)
        c = await t.run(" (exit 9)")
        assert (c.codes, c.only("D").arg) == ("ECPDAB", "9"), c.raw
        await t.run("HISTIGNORE='*'")
        c = await t.run("! (exit 4)")
        assert (c.codes, c.only("D").arg) == ("ECPDAB", "0"), c.raw
        await t.run("set +o history")
        c = await t.run("time (exit 5)")
        assert (c.codes, c.only("D").arg) == ("ECPDAB", "5"), c.raw
        c = await t.run("echo (")
        assert (c.codes, c.only("D").arg) == ("PDAB", None), c.raw
        assert b"syntax error" in c.raw
        c = await t.run("")
        assert (c.codes, c.only("D").arg) == ("PDAB", None), c.raw


async def test_bash_a_repeat_under_ignoredups_keeps_its_line(tmp_path: Path) -> None:
    async with open_shell(
        "bash", tmp_path / "home", setup=_bashrc("HISTCONTROL=ignoredups\n")
    ) as t:
        for _ in range(2):
            c = await t.run("(exit 3)")
            assert c.codes == "ECPDAB", c.raw
            assert c.only("E").arg == f"(exit 3);{NONCE}"
            assert c.only("D").arg == "3"


async def test_bash_promptvars_off_still_starts_every_line(tmp_path: Path) -> None:
    """Probe L: ``shopt -u promptvars`` left only the DEBUG trap, which never sees a line
    run in a subshell. PS0's escapes are still decoded then: it ends with a C mark (no E:
    the line is not known), and D always carries the status."""
    async with open_shell("bash", tmp_path / "home", setup=_bashrc("shopt -u promptvars\n")) as t:
        c = await t.run("(echo sub; exit 3)")
        assert (c.codes, c.only("D").arg) == ("CPDAB", "3"), c.raw
        assert _strip_vt(c.output()) == b"sub\n"
        c = await t.run("echo (")
        assert "C" not in c.codes, c.raw
        c = await t.run("")
        assert "C" not in c.codes, c.raw
        # PS0 holds the nonce literally: kept unexported (from the next prompt on).
        await t.run("export PS0")
        c = await t.run("env | grep -c 633")
        assert _strip_vt(c.output()).split(b"\n")[0] == b"0"
        # Back on: E, C and D as usual.
        await t.run("shopt -s promptvars")
        c = await t.run("(exit 4)")
        assert (c.codes, c.only("D").arg) == ("ECPDAB", "4"), c.raw
        assert c.only("E").arg == f"(exit 4);{NONCE}"


async def test_bash_posix_mode_in_bashrc(tmp_path: Path) -> None:
    """Probe L: with ``set -o posix`` in ~/.bashrc, ``trap -p DEBUG`` shows no trap as
    ``trap -- - DEBUG``; "-" was taken for the user's DEBUG trap and run before every
    command (``bash: -: command not found``)."""
    async with open_shell("bash", tmp_path / "home", setup=_bashrc("set -o posix\n")) as t:
        c = await t.run("echo hi; false")
        assert (c.codes, c.only("D").arg) == ("ECPDAB", "1"), c.raw
        assert _strip_vt(c.output()) == b"hi\n"
        assert b"not found" not in c.raw


async def test_bash_array_prompt_command_and_subshell(tmp_path: Path) -> None:
    def setup(h: Path) -> None:
        (h / ".bashrc").write_text(
            "PROMPT_COMMAND=('__st=$?' 'PS1=\"[$__st]tb\\$ \"')\n", encoding="utf-8"
        )

    async with open_shell("bash", tmp_path / "home", setup=setup) as t:
        c = await t.run("(exit 3)")  # the DEBUG trap never sees a subshell-only line
        assert c.codes == "ECPDAB", c.raw
        assert c.only("D").arg == "3"
        # The user's PROMPT_COMMAND saw the same $? and its PS1 is what gets wrapped.
        assert c.prompt() == b"[3]tb$ "


async def test_bash_login_reads_profile(tmp_path: Path) -> None:
    def setup(h: Path) -> None:
        (h / ".bash_profile").write_text("echo profile-was-read\nPS1='login$ '\n", encoding="utf-8")

    async with open_shell("bash", tmp_path / "home", argv=["bash", "-l"], setup=setup) as t:
        assert b"profile-was-read" in t.buf
        c = await t.run("echo $AHP_SHELL_LOGIN.")
        assert c.prompt() == b"login$ "
        assert _strip_vt(c.output()).split(b"\n")[0] == b"."


async def test_bash_exec_bash_degrades_gracefully(tmp_path: Path) -> None:
    async with open_shell("bash", tmp_path / "home") as t:
        await t.send(b"exec bash\r")
        await t.expect(C_MARK)
        await t.expect(b"tbash$ ")  # the new bash read ~/.bashrc normally
        after_exec = t.pos
        await t.send(b'echo "[$AHP_NONCE]"\r')
        await t.expect(b"[]\r\n")  # still no nonce
        await t.expect(b"tbash$ ")
        # No integration any more, and nothing broke (no error messages).
        tail = bytes(t.buf[after_exec : t.pos])
        assert b"\x1b]633" not in tail
        assert b"command not found" not in tail


# --------------------------------------------------------------------------- zsh specifics


async def test_zsh_zdotdir_private_and_restored(tmp_path: Path) -> None:
    _have("zsh")
    home = tmp_path / "home"
    _write_user_files("zsh", home)
    launch = prepare_shell(["zsh"], _base_env(home), nonce=NONCE)
    (zdotdir,) = launch.cleanup_paths
    assert launch.env["ZDOTDIR"] == zdotdir
    assert stat.S_IMODE(os.stat(zdotdir).st_mode) == 0o700
    assert launch.env["ZDOTDIR"] == zdotdir and "USER_ZDOTDIR" not in launch.env
    files = [".zlogin", ".zprofile", ".zshenv", ".zshrc"]
    assert sorted(os.listdir(zdotdir)) == [*files, "launch.zsh"]
    assert stat.S_IMODE(os.stat(Path(zdotdir, "launch.zsh")).st_mode) == 0o600
    try:
        async with _spawn(launch, cwd=home) as t:
            await t.ready()
            assert sorted(os.listdir(zdotdir)) == files  # the launch file (the nonce) is gone
            c = await t.run('echo "[${ZDOTDIR-unset}][${USER_ZDOTDIR-}]"')
            assert b"[unset][]\r\n" in c.output()
            c = await t.run("greet")
            assert b"hi-from-alias\r\n" in c.output()
    finally:
        remove_launch_files(launch)
    assert not _exists(zdotdir)
    remove_launch_files(launch)  # idempotent


def _exists(path: str) -> bool:
    return os.path.exists(path)


async def test_zsh_user_zdotdir_login_and_hooks(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cfg = home / ".config" / "zsh"

    def setup(h: Path) -> None:
        (h / ".zshrc").unlink()  # everything lives in the ZDOTDIR chosen by ~/.zshenv
        cfg.mkdir(parents=True)
        (h / ".zshenv").write_text(": ${ZDOTDIR:=$HOME/.config/zsh}\n", encoding="utf-8")
        (cfg / ".zprofile").write_text("typeset -g from_profile=yes\n", encoding="utf-8")
        (cfg / ".zshrc").write_text(
            "PS1='tzsh%% '\n"
            "typeset -A assoc; assoc[k]=v\n"
            "my_precmd() { print -n x >> ~/precmd-ran }\n"
            "precmd_functions+=(my_precmd)\n",
            encoding="utf-8",
        )
        (cfg / ".zlogin").write_text("typeset -g from_login=yes\n", encoding="utf-8")

    async with open_shell("zsh", home, login=True, setup=setup) as t:
        c = await t.run('echo "$ZDOTDIR|$assoc[k]|$from_profile|$from_login"')
        assert f"{cfg}|v|yes|yes\r\n".encode() in c.output()
        assert c.prompt() == b"tzsh% "
        c = await t.run("source $ZDOTDIR/.zshrc")
        c = await t.run("false")
        assert c.codes == "ECDPAB"
        assert c.only("D").arg == "1"
    assert len((home / "precmd-ran").read_text()) >= 3


async def test_zsh_prompt_set_by_precmd_is_wrapped(tmp_path: Path) -> None:
    def setup(h: Path) -> None:
        (h / ".zshrc").write_text(
            'theme_precmd() { PS1="[%?]theme%% " }\nprecmd_functions+=(theme_precmd)\n',
            encoding="utf-8",
        )

    async with open_shell("zsh", tmp_path / "home", setup=setup) as t:
        c = await t.run("false")
        assert c.only("D").arg == "1"
        assert c.prompt() == b"[1]theme% "


# --------------------------------------------------------------------------- fish specifics


async def test_fish_prompt_sees_status_and_can_be_replaced(tmp_path: Path) -> None:
    def setup(h: Path) -> None:
        (h / ".config" / "fish" / "config.fish").write_text(
            "set -g fish_greeting ''\n"
            "function fish_prompt; printf '[%s|%s]f> ' $status \"$pipestatus\"; end\n",
            encoding="utf-8",
        )

    async with open_shell("fish", tmp_path / "home", setup=setup) as t:
        c = await t.run("false | true")
        assert c.only("D").arg == "0"
        assert c.prompt() == b"[0|1 0]f> "
        c = await t.run("function fish_prompt; printf 'new> '; end")
        assert c.only("D").arg == "0"
        assert c.prompt() == b"new> "
        c = await t.run("false")
        assert c.codes == "ECPDAB"
        assert c.only("D").arg == "1"
        assert c.prompt() == b"new> "


async def test_fish_login(tmp_path: Path) -> None:
    async with open_shell("fish", tmp_path / "home", login=True) as t:
        c = await t.run("status is-login; and echo is-login")
        assert b"is-login\r\n" in c.output()
        assert c.prompt() == PROMPTS["fish"]


# --------------------------------------------------------------------------- launch rewriting


@pytest.mark.parametrize(
    "argv",
    [
        ["sh"],
        ["/bin/sh", "-i"],
        ["dash"],
        ["python3"],
        ["bash", "-c", "echo x"],
        ["bash", "--norc"],
        ["bash", "script.sh"],
        ["zsh", "-c", "true"],
        ["fish", "-c", "echo x"],
        ["/usr/bin/zsh", "-x"],
    ],
)
def test_other_launches_are_untouched(argv: list[str]) -> None:
    env = {"HOME": "/home/u", "AHP_NONCE": "leaked", "USER_ZDOTDIR": "/x", "KEEP": "1"}
    launch = prepare_shell(argv, env, nonce=NONCE)
    assert launch.argv == tuple(argv)
    assert launch.integrated is False
    assert launch.cleanup_paths == ()
    assert launch.env == {"HOME": "/home/u", "KEEP": "1"}


def _launch_file(launch: ShellLaunch, index: int) -> Path:
    path = Path(launch.argv[index].removeprefix("source ").strip("'"))
    (directory,) = launch.cleanup_paths
    assert path.parent == Path(directory)
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    return path


def test_bash_launch() -> None:
    launch = prepare_shell(["/bin/bash"], {"HOME": "/h"}, nonce=NONCE)
    try:
        assert launch.argv[:2] == ("/bin/bash", "--init-file") and launch.argv[3:] == ("-i",)
        assert launch.integrated
        assert launch.env == {"HOME": "/h"}  # nothing of ours in the environment
        text = _launch_file(launch, 2).read_text()
        assert f"__ahp_nonce={NONCE}\n" in text and "__ahp_login=\n" in text
        assert str(BASH_SCRIPT) in text
    finally:
        remove_launch_files(launch)
    assert BASH_SCRIPT.is_file()
    for argv, login in ((["bash", "-l"], False), (["bash", "--login"], False), (["bash"], True)):
        launch = prepare_shell(argv, {}, nonce=NONCE, login=login)
        try:
            assert "__ahp_login=1\n" in _launch_file(launch, 2).read_text()
            assert "-l" not in launch.argv  # a login bash would not read --init-file
        finally:
            remove_launch_files(launch)
    launch = prepare_shell(["bash", "-i"], {}, nonce=NONCE)
    assert launch.integrated
    remove_launch_files(launch)


def test_zsh_launch() -> None:
    launch = prepare_shell(["/usr/bin/zsh", "--login"], {"HOME": "/h"}, nonce=NONCE)
    try:
        assert launch.argv == ("/usr/bin/zsh", "-il")
        assert set(launch.env) == {"HOME", "ZDOTDIR"}
        text = Path(launch.env["ZDOTDIR"], "launch.zsh").read_text()
        assert f"__ahp_nonce={NONCE}\n" in text
        assert "__ahp_zd='/h'\n" in text and "__ahp_zd_set=0\n" in text
        stub = Path(launch.cleanup_paths[0], ".zshrc").read_text()
        assert "zsh_integration.zsh" in stub and NONCE not in stub
    finally:
        remove_launch_files(launch)
    launch = prepare_shell(["zsh"], {"HOME": "/h", "ZDOTDIR": "/z"}, nonce=NONCE)
    try:
        assert launch.argv == ("zsh", "-i")
        text = Path(launch.env["ZDOTDIR"], "launch.zsh").read_text()
        assert "__ahp_zd='/z'\n" in text and "__ahp_zd_set=1\n" in text
    finally:
        remove_launch_files(launch)


def test_fish_launch() -> None:
    launch = prepare_shell(["fish"], {"HOME": "/h"}, nonce=NONCE)
    try:
        assert launch.argv[:2] == ("fish", "--init-command")
        assert launch.env == {"HOME": "/h"}
        text = _launch_file(launch, 2).read_text()
        assert f"set -g __ahp_nonce {NONCE}\n" in text and "fish_integration.fish" in text
    finally:
        remove_launch_files(launch)
    launch = prepare_shell(["/usr/bin/fish", "-l"], {}, nonce=NONCE)
    assert launch.argv[:3] == ("/usr/bin/fish", "-l", "--init-command")
    remove_launch_files(launch)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="argv"):
        prepare_shell([], {}, nonce=NONCE)
    for nonce in ("", "a;b", "a\x07", "x" * 129):
        with pytest.raises(ValueError, match="nonce"):
            prepare_shell(["bash"], {}, nonce=nonce)


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("echo hello", "echo hello"),
        ("a;b", "a\\x3bb"),
        ("back\\slash", "back\\\\slash"),
        ("two\nlines", "two\\x0alines"),
        ("tab\there", "tab\\x09here"),
        ("\x1b]0;x\x07", "\\x1b]0\\x3bx\\x07"),
        ("\\x3b", "\\\\x3b"),
        ("é ü 🙂 \x7f", "é ü 🙂 \x7f"),
        ("", ""),
    ],
)
def test_escape_value(raw: str, escaped: str) -> None:
    assert escape_value(raw) == escaped


def test_escape_round_trips_through_the_parser() -> None:
    from ahp.vt import unescape_value as unescape

    for text in ("a;b\\c\n\td\x1b\x07", "\\x3b", "é;🙂", "", "x" * 5000 + ";"):
        assert unescape(escape_value(text).encode()) == text


def test_remove_launch_files_is_idempotent(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "f").write_text("x")
    f = tmp_path / "file"
    f.write_text("y")
    launch = ShellLaunch(argv=("x",), env={}, integrated=False, cleanup_paths=(str(d), str(f)))
    remove_launch_files(launch)
    remove_launch_files(launch)
    assert not d.exists()
    assert not f.exists()
