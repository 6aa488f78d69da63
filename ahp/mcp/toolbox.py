"""The tools' behaviour: each MCP tool call mapped onto the agent-facing command API.

Why a module of its own: this is the whole of what the MCP server *does* — pick
or create the terminal, run the command for as long as the model allowed
(``yield_after``), keep its handle so a later call can read, wait, type or kill — written against
:mod:`ahp.mcp.contract` and a :class:`~ahp.mcp.backend.Backend`, with no MCP SDK
types, so it is tested in-process as well as through the real server.

Errors: every failure a call can meet (bad arguments, an unknown terminal or
command, a busy terminal, a process that cannot start, a lost sidecar) becomes
a :class:`~ahp.mcp.output.ToolOutput` with ``is_error`` and a message saying what to do; an
unexpected exception is logged with its traceback and reported the same way.
A tool call never takes the server down.

Bounds: :data:`~ahp.mcp.tracked.MAX_TRACKED_COMMANDS` handles are kept (the oldest finished
ones are forgotten first; when all are running a new command is refused), and
at most :data:`MAX_TERMINALS` terminals are created through the tools. A finished
``pty: false`` run's exec terminal, kept in the catalogue for watchers (a bounded
few: :data:`ahp.engine.exec.EXEC_TERMINALS_KEPT`), takes no slot and is not listed.

Directories: a tool's ``cwd`` is made absolute once, by one rule, before it is used in
any mode (see :meth:`Toolbox._absolute`).

Reading: each tracked command has one read cursor (its handle's
``read_new``), moved by every answer about it — ``run_command``, ``read_output``,
``wait_command``, ``send_input`` with ``wait``, ``interrupt``, ``kill_command`` —
so each answer shows only the output its reader has not seen (``full``: all of
it, within the budget). The cursor is read in the same step as the result, with
no checkpoint between, so nothing printed in between is skipped.

Cancellation: when the client cancels ``run_command`` while it waits, the
command is interrupted (``run()`` does that, and kills it when it ignores the
Ctrl-C) — the person pressed stop; until it ends it is tracked under its
``command_id`` like any other. Cancelling ``wait_command`` only stops waiting.
"""

from __future__ import annotations

import logging
import os
import shlex
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ahp.agent.holding import ENDING_WAIT
from ahp.agent.line import CommandLineError, command_text
from ahp.agent.start import TerminalExitedError
from ahp.client.errors import ConnectionLost, NoAnswer
from ahp.engine.exec import exec_command
from ahp.mcp.backend import Backend, ClientBackend, HostBackend, NoSuchTerminal
from ahp.mcp.contract import AgentTerminal, Result, ScreenView
from ahp.mcp.keys import keys_text
from ahp.mcp.output import ToolError, ToolOutput
from ahp.mcp.render import (
    MARK,
    Shown,
    cwd_text,
    display_name,
    exec_output,
    format_result,
    result_data,
    status_lines,
    terminal_uri,
)
from ahp.mcp.tools import (
    DEFAULT_HEAD_BYTES,
    DEFAULT_TAIL_BYTES,
    ArgumentError,
    check_arguments,
    tool,
)
from ahp.mcp.tracked import CommandTable, Tracked
from ahp.protocol.state import CommandPart, TerminalInfo, TerminalState
from ahp.pty import procfs

if TYPE_CHECKING:
    from ahp.agent.screen import ScreenModel

__all__ = [
    "DEFAULT_TERMINAL",
    "MAX_SCREEN_COLS",
    "MAX_SCREEN_ROWS",
    "MAX_TERMINALS",
    "Toolbox",
]

log = logging.getLogger("ahp.mcp")

#: Terminals that may exist before run_command / create_terminal refuse to make more.
MAX_TERMINALS: Final = 32
#: The terminal run_command uses when none is named.
DEFAULT_TERMINAL: Final = "main"
#: Seconds interrupt / kill_command wait for the command to end before answering.
STOP_WAIT: Final = 10.0
#: Size of terminals the tools create (wide enough that tables and paths do not wrap).
DEFAULT_COLS: Final = 120
DEFAULT_ROWS: Final = 40
#: read_screen renders at most this many columns and rows, whatever size another
#: client gave the terminal: with pyte a screen costs time in proportion to its cells
#: (4096 x 4096 took 25-47 s of the event loop; 500 x 200, the largest create_terminal
#: makes, under 1 s), and with any emulator its text grows with them (16 MB at 4096 x
#: 4096). A larger terminal is rendered at this size, and the answer says so.
MAX_SCREEN_COLS: Final = 500
MAX_SCREEN_ROWS: Final = 200
#: Capped screen models kept (one per terminal read over the cap, oldest dropped).
MAX_CAPPED_SCREENS: Final = 4


def _gone(info: TerminalInfo) -> bool:
    """The terminal's process has exited, with an exit code or killed by a signal."""
    return info.exited or info.exitCode is not None


def _foreign_busy(backend: Backend, uri: str) -> bool:
    """The terminal's shell reports a command in progress (one not started by the tools)."""
    state = backend.state(uri)
    if state is None or not state.content:
        return False
    last = state.content[-1]
    return isinstance(last, CommandPart) and not last.isComplete


class Toolbox:
    """Every tool, bound to one backend; :meth:`call` is the single entry point."""

    def __init__(
        self,
        backend: Backend,
        *,
        commands: CommandTable | None = None,
        max_terminals: int = MAX_TERMINALS,
        default_cwd: str | None = None,
    ) -> None:
        self.backend = backend
        #: Where new terminals start unless a call names a directory (None: the backend's
        #: default, the home directory); relative ``cwd`` arguments are taken from here.
        self.default_cwd = default_cwd
        self.max_terminals = max_terminals
        self.commands = commands or CommandTable()
        #: Terminals a run_command or create_terminal call is setting up or typing into
        #: (not yet in ``commands``). A call picks its terminal and reserves it here in one
        #: step, with no checkpoint between (:meth:`_reserve`), so two concurrent calls never
        #: pick the same one; the setup itself (creating the terminal, subscribing to it)
        #: runs without any lock, so a call waiting on a sidecar that went away (up to
        #: ``LOST_AFTER``) holds up no other call.
        self._starting: set[str] = set()
        #: Commands of cancelled run_command calls, still ending (interrupted, then killed
        #: if they ignore it): a run_command in their terminal waits for that first.
        self._cancelled: set[str] = set()
        #: The terminals run_command typed into (forgotten when closed or replaced): is
        #: their shell one a command put there without detection (``exec bash``)?
        self._typed_into: dict[str, AgentTerminal] = {}
        #: The exec terminals of this server's ``pty: false`` runs still in the catalogue.
        self._execs: set[str] = set()
        #: Screen models of terminals larger than read_screen renders (most recent last).
        self._screens: OrderedDict[str, ScreenModel] = OrderedDict()
        self._handlers: dict[str, Callable[[dict[str, Any]], Awaitable[ToolOutput]]] = {
            "run_command": self.run_command,
            "read_output": self.read_output,
            "wait_command": self.wait_command,
            "send_input": self.send_input,
            "interrupt": self.interrupt,
            "kill_command": self.kill_command,
            "list_terminals": self.list_terminals,
            "read_screen": self.read_screen,
            "create_terminal": self.create_terminal,
            "close_terminal": self.close_terminal,
        }

    async def call(self, name: str, arguments: Mapping[str, Any] | None) -> ToolOutput:
        """Run tool ``name``; every failure becomes an error output (never an exception)."""
        notes: list[str] = []
        try:
            args = check_arguments(tool(name), arguments, notes)
            output = await self._handlers[name](args)
        except (ToolError, ArgumentError) as exc:
            return ToolOutput(str(exc), is_error=True)
        except NoSuchTerminal as exc:
            return ToolOutput(
                f"no terminal {display_name(str(exc))!r}; list_terminals shows the terminals",
                is_error=True,
            )
        except TerminalExitedError:
            # (Its shell exited while the command was being started: nothing ran.)
            return ToolOutput(
                f"{name}: the terminal's shell exited before the command started; nothing "
                "ran (the next run_command in it starts a new shell)",
                is_error=True,
            )
        except ConnectionLost as exc:  # (--connect: the sidecar went away; said, no traceback)
            log.warning("tool %s: %s", name, exc)
            return ToolOutput(f"{name} failed: {exc}", is_error=True)
        except NoAnswer as exc:  # (--connect: the sidecar is up but frozen or overloaded)
            log.warning("tool %s: %s", name, exc)
            return ToolOutput(f"{name} failed: {_describe(exc)}", is_error=True)
        except Exception as exc:
            log.exception("tool %s failed", name)
            return ToolOutput(f"{name} failed: {_describe(exc)}", is_error=True)
        if notes and not output.is_error:
            text = "\n".join([output.text, *(f"{MARK} note: {n}" for n in notes)])
            output = attrs.evolve(output, text=text, notes=tuple(notes))
        return output

    # -- helpers ---------------------------------------------------------------------------

    def _busy_error(self, uri: str) -> ToolError:
        running = self.commands.running_in(uri)
        if running is not None:
            return ToolError(
                f"terminal {display_name(uri)!r} is busy running command "
                f"{running.command_id} (`{running.command}`). Wait for it "
                f'(wait_command(command_id="{running.command_id}")), stop it (interrupt / '
                "kill_command), or run in another terminal (terminal='<new name>' creates one)"
            )
        # No id to give: a command another call is starting (its answer has the id), or
        # one typed by someone else.
        return ToolError(
            f"terminal {display_name(uri)!r} is busy: another call is starting a command "
            "there, or someone else typed one. Run in another terminal (terminal='<new "
            "name>' creates one), or try again later (list_terminals shows when it is idle "
            "and the id of a command started through these tools)"
        )

    def _exited(self, uri: str) -> bool:
        """Whether the terminal's shell has exited (a shell killed by a signal has no exit
        code: ``exited`` says so)."""
        return any(i.resource == uri and _gone(i) for i in self.backend.list())

    def _busy(self, uri: str) -> bool:
        if self._exited(uri):
            return False  # (a shell killed mid-command leaves its command part open)
        return (
            uri in self._starting
            or self.commands.running_in(uri) is not None
            or (not self._detection_lost(uri) and _foreign_busy(self.backend, uri))
        )

    def _detection_lost(self, uri: str) -> bool:
        """A command replaced the terminal's shell by one without detection: the command
        part left open in its state holds nothing."""
        terminal = self._typed_into.get(uri)
        return terminal is not None and terminal.commands.detection_lost

    def _is_exec(self, uri: str) -> bool:
        """The terminal is a ``pty: false`` run's (ours, or one whose state says so): no
        shell, no input, not a terminal the tools run commands in."""
        if uri in self._execs:
            return True
        state = self.backend.state(uri)
        return state is not None and state.isPty is False

    def _terminals(self) -> list[TerminalInfo]:
        """The catalogue without finished ``pty: false`` runs: they are kept there for
        watchers, hold no process, and neither are listed nor count against the limit."""
        return [i for i in self.backend.list() if not (_gone(i) and self._is_exec(i.resource))]

    def _reserve(self, uri: str) -> None:
        """Mark ``uri`` as being set up by this call (:attr:`_starting`); busy if it is."""
        if uri in self._starting:
            raise self._busy_error(uri)
        self._starting.add(uri)

    @contextmanager
    def _released_on_error(self, uri: str) -> Iterator[None]:
        """Give back the reservation of ``uri`` when its setup fails (or is cancelled)."""
        try:
            yield
        except BaseException:
            self._starting.discard(uri)
            raise

    async def _create(self, uri: str, *, cwd: str | None, cols: int, rows: int) -> None:
        # (Terminals other calls are creating count too: they may not be listed yet.)
        known = {info.resource for info in self._terminals()} | (self._starting - {uri})
        if len(known) >= self.max_terminals:
            raise ToolError(
                f"there are already {self.max_terminals} terminals, the most allowed; close "
                "some with close_terminal"
            )
        cwd = self._absolute(cwd) if cwd is not None else self.default_cwd
        await self._check_cwd(cwd)
        try:
            await self.backend.create(uri, cwd=cwd, cols=cols, rows=rows)
        except Exception as exc:
            raise ToolError(
                f"cannot create terminal {display_name(uri)!r}: {_describe(exc)}"
            ) from exc

    def _absolute(self, cwd: str) -> str:
        """A tool's ``cwd`` as the absolute path every mode uses (a new terminal, a ``cd``
        typed into an existing one, ``pty: false``): ``~`` and ``~/…`` (``~user``) are
        expanded with this server's home directory, and a relative path is taken from
        :attr:`default_cwd` (the server's start directory, ``--cwd``), never from where a
        shell happens to be; ``-`` is a directory named ``-`` there."""
        if cwd.startswith("~"):
            cwd = os.path.expanduser(cwd)
        if os.path.isabs(cwd):
            return os.path.normpath(cwd)
        if self.default_cwd is None:
            raise ToolError(f"cwd must be an absolute path here, got {cwd!r}")
        return os.path.normpath(os.path.join(self.default_cwd, cwd))

    async def _check_cwd(self, cwd: str | None) -> None:
        """A local ``cwd`` must be a directory we can look at (remote ones are the
        sidecar's to check)."""
        if cwd is None or not self.backend.local:
            return
        try:
            is_dir = await trio.Path(cwd).is_dir()
        except OSError as exc:  # EACCES on /proc/1/cwd, ELOOP, ENAMETOOLONG, ...
            reason = (exc.strerror or type(exc).__name__).lower()
            raise ToolError(f"cwd {cwd!r} is not accessible: {reason}") from None
        if not is_dir:
            raise ToolError(f"cwd {cwd!r} is not a directory")

    def _pick_default(self) -> str:
        """``main`` when it is free (or absent), else ``main-2``, ``main-3``…"""
        for n in range(1, MAX_TERMINALS + 2):
            name = DEFAULT_TERMINAL if n == 1 else f"{DEFAULT_TERMINAL}-{n}"
            uri = terminal_uri(name)
            if uri not in self._starting and (not self.backend.exists(uri) or not self._busy(uri)):
                return uri
        raise ToolError("every default terminal is busy; name a terminal or stop a command")

    def _command_output(
        self, result: Result, tracked: Tracked, shown: Shown, *, first: bool = False
    ) -> ToolOutput:
        handle = tracked.handle
        evidence = handle.input_evidence if handle is not None else None
        stopped = self._stopped(result)
        remarks = status_lines(
            result, tracked.terminal, brief=True, evidence=evidence, stopped=stopped
        )
        status = next(r for r in remarks if not r.startswith("output truncated"))
        text = format_result(
            result,
            tracked.terminal,
            tracked.command,
            shown,
            first=first,
            evidence=evidence,
            stopped=stopped,
        )
        return ToolOutput(
            text,
            result_data(result, tracked.terminal, tracked.command, shown),
            headline=f"{tracked.command_id} in terminal {tracked.terminal!r}: {status}",
        )

    def _stopped(self, result: Result) -> frozenset[int]:
        """The processes ``result`` left behind that are stopped (Ctrl-Z, SIGSTOP), not
        running: read from /proc when the terminals are this machine's, else none."""
        if not self.backend.local:
            return frozenset()
        states = ((p.pid, procfs.process_info(p.pid)) for p in result.background)
        return frozenset(
            pid for pid, info in states if info is not None and info.state in ("T", "t")
        )

    def _follow_up(
        self,
        result: Result,
        tracked: Tracked,
        *,
        full: bool = False,
        head_bytes: int = DEFAULT_HEAD_BYTES,
        tail_bytes: int = DEFAULT_TAIL_BYTES,
        typed: str = "",
    ) -> ToolOutput:
        """The answer about a command seen before: what is new since (or all), brief hints.
        Synchronous, so that the cursor moves in the same step the result was taken."""
        shown = tracked.read(full=full, head_bytes=head_bytes, tail_bytes=tail_bytes, typed=typed)
        return self._command_output(result, tracked, shown)

    def _target(self, args: dict[str, Any]) -> tuple[Tracked | None, str]:
        """(tracked command or None, terminal URI) from exactly one of command_id / terminal."""
        command_id: str | None = args.get("command_id")
        name: str | None = args.get("terminal")
        if command_id is not None and name is None:
            tracked = self.commands.get(command_id)
            return tracked, tracked.uri
        if name is None or command_id is not None:
            raise ToolError("give exactly one of command_id or terminal")
        uri = terminal_uri(name)
        if not self.backend.exists(uri):
            raise NoSuchTerminal(uri)
        return self.commands.running_in(uri), uri

    # -- tools -----------------------------------------------------------------------------

    async def run_command(self, args: dict[str, Any]) -> ToolOutput:
        command: str = args["command"]
        cwd: str | None = None if args["cwd"] is None else self._absolute(args["cwd"])
        if args.get("pty") is False:
            return await self._exec(command, args)
        try:
            command_text(command)  # (refused before a terminal is picked or made)
        except CommandLineError as exc:
            raise ToolError(str(exc)) from None
        if args["terminal"] is not None:
            await self._let_cancelled_end(terminal_uri(args["terminal"]))
            uri = terminal_uri(args["terminal"])
        else:
            uri = self._pick_default()
        self._reserve(uri)  # (no checkpoint since the pick)
        with self._released_on_error(uri):
            line = command
            replaced = self._exited(uri)
            if replaced:
                # Its shell is gone (``exit``, a crash): replace it by a fresh one. (Closed,
                # it is gone, whatever a sidecar's catalogue or our mirror says for a moment:
                # subscribing to it then failed, "Resource not found".)
                await self.backend.close(uri)
                self.commands.forget_terminal(uri)
                self._screens.pop(uri, None)
                self._typed_into.pop(uri, None)
            if replaced or not self.backend.exists(uri):
                await self._create(uri, cwd=cwd, cols=DEFAULT_COLS, rows=DEFAULT_ROWS)
            else:
                # (A command typed by someone else: run() refuses it below, naming it; a
                # command part the shell left open is not always one: ``exec bash``.)
                if self.commands.running_in(uri) is not None:
                    raise self._busy_error(uri)
                if cwd is not None:
                    await self._check_cwd(cwd)
                    line = f"cd -- {shlex.quote(cwd)} && {command}"
            self.commands.check_room()
            terminal = await self.backend.terminal(uri)
            self._typed_into[uri] = terminal
            known = {handle.id for handle in terminal.commands.all()}
        try:
            # Cancelling this call (the client gave up) interrupts the command: run() does.
            result = await terminal.run(
                line,
                timeout=args["timeout"],
                yield_after=args["yield_after"],
                head_bytes=args["head_bytes"],
                tail_bytes=args["tail_bytes"],
            )
        except CommandLineError as exc:  # (a TAB, in fish: known once the shell is)
            raise ToolError(str(exc)) from None
        except trio.Cancelled:
            # run() sent a Ctrl-C (and kills the command if it ignores it): until it ends
            # it holds the terminal, under its command_id (busy errors name it;
            # wait_command, kill_command).
            self._track_started(terminal, uri, command, known)
            raise
        finally:
            self._starting.discard(uri)
        if result.status == "refused":
            # Typed by someone else between our look and run(): nothing was typed.
            holder = result.holder
            what = f"`{holder.command_line}`" if holder is not None else "another command"
            raise ToolError(
                f"terminal {display_name(uri)!r} is busy: {what} holds it (typed by someone "
                "else); nothing was typed. Answer it with send_input(terminal=...), stop it "
                "with interrupt(terminal=...), or run in another terminal (terminal='<new name>' "
                "creates one)"
            )
        handle = result.handle
        if handle is not None:
            # The result as it is now, and the read cursor moved past it, in one step.
            result = handle.result()
            handle.read_new()
        tracked = Tracked(
            command_id=result.command_id,
            uri=uri,
            command=command,
            handle=handle,
            last=result,
            consumed=True,
        )
        self.commands.add(tracked)
        if result.status != "finished" and (silent := self.backend.silent(uri)) is not None:
            # (--connect: typing is no request, so nothing said it went unanswered; the
            # "still running" it would say is not known: the line may not have been typed.)
            raise ToolError(_silent_answer(silent, display_name(uri), result.command_id))
        return self._command_output(result, tracked, Shown.whole(result), first=True)

    async def _let_cancelled_end(self, uri: str) -> None:
        """The command of a cancelled run_command in ``uri`` is ending (its Ctrl-C sent,
        its kill due if it ignores that): give it that long to end, as ``run()`` gives a
        holder that is ending, before a busy error is said."""
        running = self.commands.running_in(uri)
        if running is None or running.command_id not in self._cancelled:
            return
        with trio.move_on_after(ENDING_WAIT):
            while not running.done:
                await running.wait(timeout=ENDING_WAIT)
        if running.done:
            self._cancelled.discard(running.command_id)

    def _track_started(
        self, terminal: AgentTerminal, uri: str, command: str, known: set[str]
    ) -> None:
        """Track the command a cancelled run_command call typed into ``uri`` (the newest
        handle not in ``known``), if it is not over."""
        self._cancelled = {c for c in self._cancelled if not self.commands.get(c).done}
        for handle in reversed(terminal.commands.all()):
            if handle.id not in known:
                if not handle.done:
                    tracked = Tracked(handle.id, uri, command, handle, handle.result())
                    try:
                        self.commands.add(tracked)
                        self._cancelled.add(handle.id)
                    except ToolError:
                        log.warning("cancelled command %s not tracked: no room", handle.id)
                return

    async def _exec(self, command: str, args: dict[str, Any]) -> ToolOutput:
        """run_command with ``pty: false``: ``exec_command`` here, or ``x-ahp-terminals/exec``
        on the server of ``--connect`` (:mod:`ahp.client.exec`). One answer; the result is
        kept under the short name of its exec terminal (``exec-<n>``) as its command_id,
        so that read_output / wait_command take the id the answer gave."""
        from ahp.client.exec import exec_remote

        cwd = self.default_cwd if args["cwd"] is None else self._absolute(args["cwd"])
        await self._check_cwd(cwd)
        self.commands.check_room()
        options: dict[str, Any] = {
            "cwd": cwd,
            "timeout": args["timeout"],
            "head_bytes": args["head_bytes"],
            "tail_bytes": args["tail_bytes"],
        }
        backend = self.backend
        if isinstance(backend, HostBackend):
            result = await exec_command(backend.host, command, **options)
        elif isinstance(backend, ClientBackend):
            result = await exec_remote(backend.client, command, **options)
        else:
            raise ToolError("pty false needs this server's own host or a --connect server")
        uri = result.command_id
        self._execs = {u for u in self._execs if self.backend.exists(u)} | {uri}
        result = attrs.evolve(result, command_id=display_name(uri))
        self.commands.add(
            Tracked(
                command_id=result.command_id,
                uri=uri,
                command=command,
                handle=None,
                last=result,
                consumed=True,
            )
        )
        return exec_output(result, command, stopped=self._stopped(result))

    async def read_output(self, args: dict[str, Any]) -> ToolOutput:
        tracked = self.commands.get(args["command_id"])
        await trio.lowlevel.checkpoint()
        result = tracked.result()
        shown = tracked.read(full=args["full"], head_bytes=0, tail_bytes=args["tail_bytes"])
        return self._command_output(result, tracked, shown)

    async def wait_command(self, args: dict[str, Any]) -> ToolOutput:
        tracked = self.commands.get(args["command_id"])
        result = await tracked.wait(timeout=args["timeout"])
        return self._follow_up(
            result,
            tracked,
            full=args["full"],
            head_bytes=args["head_bytes"],
            tail_bytes=args["tail_bytes"],
        )

    async def send_input(self, args: dict[str, Any]) -> ToolOutput:
        text: str = args["text"] or ""
        keys: list[str] = args["keys"] or []
        if not text and not keys:
            raise ToolError("nothing to send: give text, keys, or both")
        try:
            data = text + keys_text(keys)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        tracked, uri = self._target(args)
        if args["command_id"] is not None:
            assert tracked is not None
            if tracked.handle is None or tracked.handle.done:
                result = tracked.result()
                raise ToolError(
                    f"command {tracked.command_id} has already ended ({result.status}, exit "
                    f"code {result.exit_code}); to type at the shell prompt use "
                    f"terminal={tracked.terminal!r}"
                )
            await tracked.handle.send_input(data)
            if args["wait"] > 0:
                result = await tracked.wait(timeout=args["wait"])
                return self._follow_up(result, tracked, full=args["full"], typed=data)
        else:
            if args["wait"] > 0:
                raise ToolError("wait needs command_id (a terminal has nothing to wait for)")
            if self._exited(uri):
                raise ToolError(
                    f"terminal {display_name(uri)!r} has exited: nothing reads input there; "
                    "run_command starts a new shell in it"
                )
            terminal = await self.backend.terminal(uri)
            await terminal.send_input(data)
        where = f"command {args['command_id']}" if args["command_id"] else display_name(uri)
        return ToolOutput(
            f"sent {len(data)} characters to {where}; use read_output, wait_command or "
            "read_screen to see the effect"
        )

    async def interrupt(self, args: dict[str, Any]) -> ToolOutput:
        tracked, uri = self._target(args)
        if tracked is None or tracked.handle is None or tracked.handle.done:
            if tracked is not None and args["command_id"] is not None:
                return self._follow_up(tracked.result(), tracked)
            if self._exited(uri):
                return ToolOutput(
                    f"terminal {display_name(uri)!r} has no running shell (it exited): nothing "
                    "to interrupt; run_command there starts a new one"
                )
            terminal = await self.backend.terminal(uri)
            await terminal.interrupt()
            return ToolOutput(f"sent Ctrl-C to terminal {display_name(uri)!r}")
        await tracked.handle.interrupt()
        result = await tracked.wait(timeout=STOP_WAIT)
        return self._follow_up(result, tracked)

    async def kill_command(self, args: dict[str, Any]) -> ToolOutput:
        tracked = self.commands.get(args["command_id"])
        if tracked.handle is not None and not tracked.handle.done:
            await tracked.handle.kill()
        result = await tracked.wait(timeout=STOP_WAIT)
        return self._follow_up(result, tracked)

    async def list_terminals(self, args: dict[str, Any]) -> ToolOutput:
        rows: list[dict[str, Any]] = []
        for info in self.backend.list():
            uri = info.resource
            if self._is_exec(uri):
                continue  # a pty false run: not a terminal to use (its answer said it all)
            state = self.backend.state(uri)
            running = self.commands.running_in(uri)
            if _gone(info):
                kind = "exited"
            elif self._busy(uri):
                kind = "busy"
            else:
                kind = "idle"
            rows.append(
                {
                    "terminal": display_name(uri),
                    "uri": uri,
                    "state": kind,
                    "title": info.title,
                    "cwd": cwd_text(state.cwd) if state is not None else None,
                    "exit_code": info.exitCode,
                    "command_id": running.command_id if running else None,
                    "command": running.command if running else None,
                    "command_status": running.result().status if running else None,
                }
            )
        # (--connect: a connection that is down is said first; the rows are then as they were.)
        down = self.backend.connection()
        head = [f"{MARK} {down}"] if down else []
        extra = {"connection": down} if down else {}
        if not rows:
            text = "no terminals yet; run_command creates one ('main' by default)"
            return ToolOutput("\n".join([*head, text]), {"terminals": [], **extra})
        lines = head
        for row in rows:
            line = f"{row['terminal']}: {row['state']}"
            if row["command_id"]:
                line += f", {row['command_status']} {row['command_id']} `{row['command']}`"
            if row["exit_code"] is not None:
                line += f" (exit code {row['exit_code']})"
            if row["cwd"]:
                line += f" · cwd {row['cwd']}"
            if row["title"]:
                line += f" · title {row['title']!r}"
            lines.append(line)
        return ToolOutput("\n".join(lines), {"terminals": rows, **extra})

    async def read_screen(self, args: dict[str, Any]) -> ToolOutput:
        uri = terminal_uri(args["terminal"])
        terminal = await self.backend.terminal(uri)
        name = display_name(uri)
        state = self.backend.state(uri)
        cols = (state.cols if state is not None else None) or DEFAULT_COLS
        rows = (state.rows if state is not None else None) or DEFAULT_ROWS
        capped = state is not None and (cols > MAX_SCREEN_COLS or rows > MAX_SCREEN_ROWS)
        if capped:
            assert state is not None
            screen: ScreenView = self._capped_screen(uri, state)
        else:
            screen = terminal.screen()
        text = screen.text()
        mode = "full-screen (alternate) display" if screen.alternate_screen else "normal display"
        lines = [
            f"{MARK} screen of terminal {name!r} ({mode}); cursor at row "
            f"{screen.cursor_row}, column {screen.cursor_col}",
            text if text else "(blank screen)",
        ]
        data: dict[str, Any] = {
            "terminal": name,
            "text": text,
            "cursor_row": screen.cursor_row,
            "cursor_col": screen.cursor_col,
            "alternate_screen": screen.alternate_screen,
        }
        if capped:
            note = (
                f"the terminal is {cols}x{rows} (set by another client), more than "
                f"read_screen renders: shown at {min(cols, MAX_SCREEN_COLS)}x"
                f"{min(rows, MAX_SCREEN_ROWS)}, so long lines wrap earlier than on it"
            )
            lines.append(f"{MARK} {note}")
            data["note"] = note
        return ToolOutput("\n".join(lines), data)

    def _capped_screen(self, uri: str, state: TerminalState) -> ScreenView:
        """The screen rendered at most :data:`MAX_SCREEN_COLS` x :data:`MAX_SCREEN_ROWS`
        (a model of that size per terminal, brought up to date like the terminal's own)."""
        from ahp.agent.screen import ScreenModel

        cols = min(state.cols or DEFAULT_COLS, MAX_SCREEN_COLS)
        rows = min(state.rows or DEFAULT_ROWS, MAX_SCREEN_ROWS)
        model = self._screens.pop(uri, None)
        if model is None:
            model = ScreenModel(cols, rows)
        self._screens[uri] = model
        while len(self._screens) > MAX_CAPPED_SCREENS:
            self._screens.popitem(last=False)
        return model.update(attrs.evolve(state, cols=cols, rows=rows))

    async def create_terminal(self, args: dict[str, Any]) -> ToolOutput:
        if args["terminal"] is not None:
            uri = terminal_uri(args["terminal"])
        else:
            uri = next(
                (
                    terminal_uri(f"term-{n}")
                    for n in range(1, MAX_TERMINALS + 2)
                    if not self.backend.exists(terminal_uri(f"term-{n}"))
                    and terminal_uri(f"term-{n}") not in self._starting
                ),
                terminal_uri(f"term-{MAX_TERMINALS + 2}"),
            )
        if self.backend.exists(uri) or uri in self._starting:
            raise ToolError(f"terminal {display_name(uri)!r} already exists")
        self._reserve(uri)
        try:
            await self._create(uri, cwd=args["cwd"], cols=args["cols"], rows=args["rows"])
        finally:
            self._starting.discard(uri)
        return ToolOutput(
            f"created terminal {display_name(uri)!r} ({args['cols']}x{args['rows']}); run "
            f"commands in it with run_command(terminal={display_name(uri)!r}, …)"
        )

    async def close_terminal(self, args: dict[str, Any]) -> ToolOutput:
        uri = terminal_uri(args["terminal"])
        await self.backend.close(uri)
        self.commands.forget_terminal(uri)
        self._screens.pop(uri, None)
        self._typed_into.pop(uri, None)
        return ToolOutput(f"closed terminal {display_name(uri)!r}")


def _silent_answer(silent: str, terminal: str, command_id: str) -> str:
    """run_command's answer when the sidecar answered nothing while the command was to
    run (``silent``: :meth:`Backend.silent <ahp.mcp.backend.Backend.silent>`)."""
    return (
        f"{silent} (run_command): it may be stopped or overloaded, and whether the command "
        f"was typed into terminal {terminal!r} is not known (list_terminals shows its "
        f'terminals). If it was, it is command_id "{command_id}": wait_command or '
        "read_output follow it once the sidecar answers again; the next call tries again"
    )


def _describe(exc: BaseException) -> str:
    """One line for an exception (the first leaf of a group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, NoAnswer):
        return (
            f"the sidecar at {exc.where} did not answer within {exc.seconds:g} s ({exc.method}): "
            "it may be stopped or overloaded, and whether it did what was asked is not known "
            "(list_terminals shows its terminals); the next call tries again"
        )
    return str(exc) or type(exc).__name__
