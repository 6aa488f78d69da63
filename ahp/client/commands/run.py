"""``ahp-terminals run URL -- COMMAND…``: one command in a remote terminal, like ``ssh host cmd``.

The command runs in a new terminal (created for it and disposed afterwards) or,
with ``--terminal NAME``, in an existing one (left running). It is typed into
the terminal's shell through :meth:`ahp.client.RemoteTerminal.run`, so a single
argument is a shell command line (``run URL -- 'make && ./a.out'``) and several
arguments are quoted into one (``run URL -- sh -c 'echo hi; exit 3'``).

Exit status: the command's exit code (the shell's, when the command ended the
shell: ``run URL -- 'exit 7'`` exits 7); :data:`TIMED_OUT` (124, as ``timeout(1)``)
when ``--timeout`` expired and the command was interrupted; :data:`FAILED`
(125) when ``run`` itself failed (bad URL, refused token, unknown terminal, lost
connection, exit code unknown, the ``--terminal`` busy with another command:
refused, nothing typed) — with one line on stderr; 128 + N when signal N
(SIGINT, that is Ctrl-C: 130; SIGTERM, SIGHUP) stopped ``run``: the command is
interrupted and a terminal created for it is disposed first, and one line on
stderr names the signal.

Output: the rendered output (progress bars as their last state, cursor moves
applied, no escapes) is printed as it comes, a line once it is done changing
(:meth:`~ahp.agent.CommandHandle.read_settled`: a progress bar settles before it
is printed), at most ``--max-output-bytes`` bytes in whole lines: the first ones
as they come, up to the limit less the tail, and, when there is more, the most
recent ones within the tail, half the limit and :data:`TAIL_BYTES` at most (held
back, printed at the end): the head and the tail, as the agent layer's output
budget keeps them (:mod:`ahp.agent.budget`), not the last N bytes. When output was
dropped between them, one line on stderr says exactly how many bytes and lines. On Ctrl-C,
SIGTERM or SIGHUP the command is interrupted and what it printed until then is
printed before the status line. ``--json`` prints the whole result at the end
instead (its ``output``: the last ``--max-output-bytes`` bytes; the command's
budget is :data:`RAW_FACTOR` times the limit, so that its tail covers them).

A lost connection (the network, or the server closing a client that fell too far
behind with 1013): ``run`` reconnects by itself (the client library's reconnect,
replay or snapshot) and carries on following the command, its output and its exit
code; output the server could not replay is missing from what is printed (a
reconnect answered by a snapshot). When no reconnect succeeds within
:data:`RECONNECT_WINDOW` seconds, ``run`` gives up (125, "connection lost while
the command ran"); a terminal it created is then disposed over the next
connection that succeeds within :data:`DISPOSE_TIMEOUT`, or, failing that, named
on stderr as left on the server (with the ``rm`` command that closes it). A server
that shuts down (it closes the connection with 1001 ``going away``, and ends every
terminal) is no network drop: ``run`` says so and exits 125 at once, waiting for no
reconnect — unless the command's end came before the close (a SIGTERM drain waits for
running commands, then says goodbye after what is queued): that is reported as usual,
and the terminal, which the server ends, is not disposed.

Input: the command reads from its terminal, not from ``run``'s standard input,
which is not forwarded. So that ``echo data | ahp-terminals run URL -- cat`` does not wait
forever, ``run`` refuses (status 125, before connecting) when its standard
input is a pipe, socket or file with data in it.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import secrets
import shlex
import signal
import sys
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Final, Literal

import attrs
import trio

from ahp.agent import (
    DEFAULT_MAX_OUTPUT,
    INTERRUPT_GRACE,
    CommandHandle,
    CommandLineError,
    CommandResult,
    RunOptions,
    TerminalExitedError,
    run_command,
)
from ahp.agent.budget import RETAINED_OUTPUT_BYTES
from ahp.agent.line import command_text
from ahp.agent.surface import CANCEL_INTERRUPT_TIMEOUT
from ahp.client.commands.common import (
    SERVER_SHUT_DOWN,
    CommandFailed,
    main,
    open_client,
    printable,
    resolve_target,
    terminal_uri,
)
from ahp.protocol.state import CommandPart

if TYPE_CHECKING:
    from ahp.client.connection import Client

__all__ = [
    "FAILED",
    "TIMED_OUT",
    "OutputPrinter",
    "Printed",
    "add_parser",
    "command_line",
    "exit_status",
    "printed_output",
    "run",
]

TIMED_OUT: Final = 124
#: Seconds ``run --timeout S`` waits past S plus the command's Ctrl-C grace
#: (:data:`ahp.agent.INTERRUPT_GRACE`, after which a command that ignores Ctrl-C is
#: killed) before it stops waiting for a command that outlives even the kill: it
#: exits 124 then, closing the terminal it created (which ends the command).
HARD_TIMEOUT_MARGIN: Final = 2.0
FAILED: Final = 125
#: Bound on disposing the terminal created for the command (after a lost connection:
#: on waiting for a reconnect, and disposing over it).
DISPOSE_TIMEOUT: Final = 10.0
#: Seconds ``run`` waits for its connection to come back (the client reconnects by
#: itself) before it gives up on following the command (125).
RECONNECT_WINDOW: Final = 10.0
#: Seconds between two tries to dispose a terminal when the connection dropped
#: before the answer (the next try goes over the client's next connection).
RETRY_PAUSE: Final = 0.1
#: The command's output budget is this many times ``--max-output-bytes`` (a quarter
#: head, the rest tail: the tail alone exceeds what is printed).
RAW_FACTOR: Final = 4
#: ``--max-output-bytes`` at most (and what ``0`` means): the rendered output a
#: command keeps is bounded by :data:`ahp.agent.budget.RETAINED_OUTPUT_BYTES`.
MAX_PRINTED: Final = RETAINED_OUTPUT_BYTES
#: The raw budget asked for at most: its tail (three quarters) stays within the bound.
MAX_BUDGET: Final = RETAINED_OUTPUT_BYTES * 4 // 3
#: Bytes of the most recent output held back for the end when the output exceeds the
#: limit (at most half of it); the rest of the limit is printed as it comes.
TAIL_BYTES: Final = 64 * 1024
#: Seconds between looks at the output when none arrives (a line can settle without
#: new output: the command ended, or the cursor moved on).
STREAM_POLL: Final = 0.5
#: Signals that stop ``run`` (command interrupted, terminal disposed, one line on stderr
#: naming the signal): Ctrl-C's too, which said nothing (probe M).
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: The line for a server that shut down (1001) before the command started (a drain
#: waits for commands typed, not for those still to be typed).
SHUT_DOWN_BEFORE: Final = (
    "the server shut down (1001 going away) before the command started (it ended its terminals)"
)
STDIN_REFUSED: Final = (
    "standard input is not forwarded (the command reads from its remote terminal): "
    "put the data in the command line, or run with < /dev/null"
)


def output_limit(value: int) -> int:
    """``--max-output-bytes``: 0..MAX_PRINTED, 0 meaning MAX_PRINTED.

    Raises:
        CommandFailed: out of range (one line naming the bound).
    """
    if not 0 <= value <= MAX_PRINTED:
        raise CommandFailed(
            f"--max-output-bytes {value} is out of range: 0 to {MAX_PRINTED} "
            f"(the output a command keeps; 0 means {MAX_PRINTED})"
        )
    return value or MAX_PRINTED


def _add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--token",
        help="access token (default: the URL's tkn parameter, else the content of the file "
        "$AHP_TOKEN_FILE names, else $AHP_TOKEN)",
    )
    p.add_argument(
        "--terminal",
        metavar="NAME",
        help="run in this existing terminal (a name or ahp-terminal: URI) instead of a new one",
    )
    p.add_argument("--timeout", type=float, metavar="S", help="interrupt the command after S s")
    p.add_argument(
        "--cwd",
        metavar="PATH",
        help="working directory of the new terminal (made absolute here)",
    )
    p.add_argument(
        "--max-output-bytes",
        type=int,
        default=DEFAULT_MAX_OUTPUT,
        metavar="N",
        help=f"print at most N bytes of output, in whole lines, counted as printed: the "
        f"first lines as they come, and when there is more than fits, the last ones, at "
        f"most N/2 bytes and {TAIL_BYTES}, at the end; the lines between are dropped and a "
        f"line on stderr says how many (--json: its output is the last N bytes) (default "
        f"{DEFAULT_MAX_OUTPUT}; at most {MAX_PRINTED}, the output a command keeps; 0 means "
        f"that bound)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the whole CommandResult as JSON (command_line, status, output, "
        "raw_output, exit_code, duration_ms, truncated, omitted_bytes, omitted_lines, "
        "total_bytes, total_lines, timed_out, waiting_for_input, alternate_screen, "
        "shell_exited, background, command_id; stderr and signal, filled by exec_command only)",
    )


#: Options of ``run`` and whether each takes a value (see :func:`split_options`).
_OPTIONS: Final = {
    "--token": True,
    "--terminal": True,
    "--timeout": True,
    "--cwd": True,
    "--max-output-bytes": True,
    "--json": False,
}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], help: str) -> None:
    p = sub.add_parser(
        "run",
        help=help,
        usage="%(prog)s [options] URL [options] -- COMMAND...",
        description=(
            "Run one command in a new terminal (disposed afterwards) or in an existing one "
            "(--terminal), print its output (escape sequences removed) and exit with its exit "
            "code. One COMMAND argument is a shell command line; several are shell-quoted "
            "into one. The command reads from its remote terminal: run's standard input is "
            "not forwarded, and run refuses to start when it is a pipe or file with data. "
            f"Exit status: the command's; {TIMED_OUT} when --timeout expired (the "
            f"command is interrupted with Ctrl-C); {FAILED} when run itself failed, with one "
            "line on stderr; 128+N on signal N (SIGINT, SIGTERM, SIGHUP: the command is "
            "interrupted and a terminal created for it disposed)."
        ),
    )
    p.add_argument(
        "url", metavar="URL", help="the server's URL, as printed by `ahp-terminals serve`"
    )
    _add_options(p)
    p.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="COMMAND",
        help="the command, after `--` (one argument: a shell command line)",
    )
    p.set_defaults(handler=run)


def split_options(words: list[str]) -> tuple[list[str], list[str]]:
    """``run`` options given after URL, and the command words (after ``--`` if present).

    Why: argparse hands everything after URL to the command (``REMAINDER``); leading
    words that are ``run``'s own options are taken back, up to ``--`` or the first word
    that is not one of them.
    """
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            return words[:i], words[i + 1 :]
        name, eq, _ = word.partition("=")
        if name not in _OPTIONS:
            break
        i += 2 if _OPTIONS[name] and not eq else 1
    return words[:i], words[i:]


def _parse_late_options(args: argparse.Namespace) -> list[str]:
    late, words = split_options(list(args.command))
    if late:
        parser = argparse.ArgumentParser(prog="ahp-terminals run", add_help=False)
        _add_options(parser)
        parser.parse_args(late, namespace=args)
    return words


def command_line(words: list[str]) -> str:
    """One argument is a shell command line as is; several are shell-quoted and joined."""
    if not words:
        raise CommandFailed("no command given (usage: ahp-terminals run URL -- COMMAND...)")
    return words[0] if len(words) == 1 else shlex.join(words)


@attrs.frozen
class Printed:
    """The output as ``run`` prints it: at most ``limit`` bytes, whole lines."""

    text: str
    #: Bytes dropped from the start (as printed), or None when unknown (the raw
    #: output was already cut while collected).
    dropped: int | None
    truncated: bool


def printed_output(output: str, limit: int, *, cut_before: bool = False) -> Printed:
    """The last ``limit`` UTF-8 bytes of ``output``, starting at a line start.

    ``cut_before``: ``output`` is itself the end of a longer output (its first
    line may be partial, so it is dropped too).
    """
    data = output.encode("utf-8", "surrogatepass")
    start = max(0, len(data) - limit)
    if start or cut_before:
        # Start after a newline (whole lines); keep the partial line only if it is all.
        newline = data.find(b"\n", start - 1 if start else 0)
        if start and data[start - 1 : start] == b"\n":
            newline = start - 1
        if 0 <= newline < len(data) - 1:
            start = newline + 1
    if not start and not cut_before:
        return Printed(output, 0, False)
    text = data[start:].decode("utf-8", "ignore")
    return Printed(text, None if cut_before else start, True)


@attrs.define
class OutputPrinter:
    """Prints lines as they come within ``limit`` bytes (UTF-8, as printed): up to
    ``limit - tail`` from the start at once, then the most recent lines, at most
    ``tail`` bytes (:data:`TAIL_BYTES`, at most half the limit), at :meth:`close`.

    Buffering: the held-back tail, at most ``tail`` bytes.
    """

    limit: int
    write: Callable[[str], None]
    printed_bytes: int = 0
    printed_lines: int = 0
    #: Bytes fed so far (UTF-8, as printed).
    fed_bytes: int = 0
    _tail: collections.deque[tuple[str, int]] = attrs.field(factory=collections.deque)
    _tail_size: int = 0
    _holding: bool = False

    @property
    def tail_limit(self) -> int:
        return min(self.limit // 2, TAIL_BYTES)

    @property
    def truncated(self) -> bool:
        """Whether output was dropped: fed and neither printed nor held in the tail.
        (Output past ``limit - tail`` is held back, but when it all fits in the tail
        it is all printed: nothing was dropped, and ``run`` says nothing; probe P: it
        said "0 bytes in 0 lines dropped".)"""
        return self.printed_bytes + self._tail_size < self.fed_bytes

    def feed(self, text: str) -> None:
        """Lines (each ending in ``\n``) that are done changing.

        Cost: O(len(text)) at C speed, plus Python work per line only for the lines
        that can still be printed (the head until it is full, then at most
        :attr:`tail_limit` characters' worth at the end of ``text``): a flood of short
        lines costs no Python loop over every line (it held ``run``'s reader).
        """
        self.fed_bytes += len(text.encode("utf-8", "surrogatepass"))
        if not self._holding:
            text = self._feed_head(text)
        if text:
            self._feed_tail(text)

    def _feed_head(self, text: str) -> str:
        """Print what fits in the head; the rest of ``text`` (holding from then on)."""
        head_limit = self.limit - self.tail_limit
        size = len(text.encode("utf-8", "surrogatepass"))
        if self.printed_bytes + size <= head_limit:
            if text:
                self.write(text)
                self.printed_bytes += size
                self.printed_lines += len(text.splitlines())
            return ""
        at = 0
        for line in text.splitlines(keepends=True):
            size = len(line.encode("utf-8", "surrogatepass"))
            if self.printed_bytes + size > head_limit:
                break
            self.write(line)
            self.printed_bytes += size
            self.printed_lines += 1
            at += len(line)
        self._holding = True
        return text[at:]

    def _feed_tail(self, text: str) -> None:
        """Keep the most recent lines of ``text`` within :attr:`tail_limit` bytes."""
        tail_limit = self.tail_limit
        # The lines that start before the last ``tail_limit`` characters end up dropped
        # (what follows them is ``tail_limit`` bytes or more): cut them off at a line
        # end first. (A newline ends a line whatever splitlines' other separators.)
        end = len(text) - tail_limit
        cut = text.rfind("\n", 0, end) if end > 0 else -1
        if cut >= 0:
            text = text[cut + 1 :]
            self._tail.clear()
            self._tail_size = 0
        for whole in text.splitlines(keepends=True):
            line = whole
            size = len(line.encode("utf-8", "surrogatepass"))
            if size > tail_limit:  # one line longer than the whole tail: its end
                data = line.encode("utf-8", "surrogatepass")[-tail_limit:]
                line = data.decode("utf-8", "ignore")
                size = len(line.encode("utf-8", "surrogatepass"))
                self._tail.clear()
                self._tail_size = 0
            self._tail.append((line, size))
            self._tail_size += size
            while self._tail_size > tail_limit:
                _, dropped = self._tail.popleft()
                self._tail_size -= dropped

    def close(self) -> None:
        """Print the held-back tail."""
        for line, size in self._tail:
            self.write(line)
            self.printed_bytes += size
            self.printed_lines += 1
        self._tail.clear()
        self._tail_size = 0


def exit_status(result: CommandResult) -> int:
    if result.timed_out:
        return TIMED_OUT
    if result.exit_code is None:
        return FAILED
    return result.exit_code % 256


def run(args: argparse.Namespace) -> int:
    words = _parse_late_options(args)
    cwd = os.path.abspath(args.cwd) if args.cwd is not None else None
    #: The line saying the terminal's process exited (the command never ran, or the
    #: terminal ended under it), taken while its state is still mirrored.
    exited = ""

    async def body() -> int:
        from ahp.pty.localtty import pending_input

        line = command_line(words)
        try:
            command_text(line)  # (a control character: refused before connecting)
        except CommandLineError as exc:
            raise CommandFailed(str(exc)) from None
        if args.timeout is not None and not 0 < args.timeout < math.inf:  # (nan, inf)
            raise CommandFailed("--timeout must be a positive, finite number of seconds")
        args.max_output_bytes = output_limit(args.max_output_bytes)
        url, token = resolve_target(args.url, args.token)
        if pending_input(0):
            raise CommandFailed(STDIN_REFUSED)
        printer = None if args.json else OutputPrinter(args.max_output_bytes, _write_out)
        with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async with open_client(url, token, reconnect=True) as client:
                result, stopped_by = await _run_in(client, line, signals, printer)
        if result is None and stopped_by is None:  # (the hard limit: see HARD_TIMEOUT_MARGIN)
            what = "its terminal was closed" if args.terminal is None else "it still runs"
            note = f"timed out after {args.timeout:g} s; the command ignored Ctrl-C: {what}"
            if args.json:
                print(json.dumps({"status": "timed_out", "exit_code": None, "note": note}))
            print(f"ahp-terminals run: {note}", file=sys.stderr)
            return TIMED_OUT
        if stopped_by is not None:
            name = signal.Signals(stopped_by).name
            print(f"ahp-terminals run: {name}: the command was interrupted", file=sys.stderr)
            return 128 + stopped_by
        assert result is not None
        if printer is not None:
            if printer.truncated:
                dropped_bytes = max(0, result.total_bytes - printer.printed_bytes)
                dropped_lines = max(0, result.total_lines - printer.printed_lines)
                print(
                    f"ahp-terminals run: output truncated: {dropped_bytes} bytes in "
                    f"{dropped_lines} lines dropped, printed {printer.printed_bytes} bytes: "
                    f"the first ones as they came and the last {printer.tail_limit} at most "
                    f"(--max-output-bytes {args.max_output_bytes})",
                    file=sys.stderr,
                )
        else:
            # The result holds the whole output's head and tail (each larger than the
            # limit) and its exact size: what is printed is a suffix of the tail.
            printed = printed_output(result.output, args.max_output_bytes)
            printed_bytes = len(printed.text.encode("utf-8", "surrogatepass"))
            shown = attrs.evolve(
                result,
                output=printed.text,
                truncated=printed.truncated,
                omitted_bytes=result.total_bytes - printed_bytes,
                omitted_lines=result.total_lines - printed.text.count("\n"),
            )
            print(json.dumps(shown.to_json(), indent=2))
        if result.status == "refused":
            print(f"ahp-terminals run: refused: {printable(result.note)}", file=sys.stderr)
        elif result.timed_out:
            how = f"; {printable(result.note)}" if result.note else ""
            print(f"ahp-terminals run: timed out after {args.timeout:g} s{how}", file=sys.stderr)
        elif result.waiting_for_input:
            print("ahp-terminals run: the command is waiting for input", file=sys.stderr)
        elif result.status == "lost":
            print(f"ahp-terminals run: lost: {printable(result.note)}", file=sys.stderr)
        elif exited:
            # (Before the shell started the command: the collector's note says "not run".)
            how = (
                " before the command started: it did not run"
                if result.note.startswith("not run")
                else f": {printable(result.note) or 'the exit code is unknown'}"
            )
            print(f"ahp-terminals run: {exited}{how}", file=sys.stderr)
        elif result.exit_code is None:
            print("ahp-terminals run: the command's exit code is unknown", file=sys.stderr)
        return exit_status(result)

    async def _run_in(
        client: Client, line: str, signals: AsyncIterator[int], printer: OutputPrinter | None
    ) -> tuple[CommandResult | None, int | None]:
        """``(result, None)``, or ``(None, signum)`` when a stop signal ended it first,
        or ``(None, None)`` when the command outlived ``--timeout`` and its Ctrl-C grace
        (:data:`HARD_TIMEOUT_MARGIN`). With ``printer``, the output is printed as it
        comes (and what came, at the end or on a signal, before returning)."""
        from ahp.client.connection import RpcError
        from ahp.protocol.jsonrpc import ErrorCode

        if args.terminal is not None:
            uri = terminal_uri(args.terminal)
            try:
                await client.subscribe(uri)
            except RpcError as exc:
                if exc.code == ErrorCode.NOT_FOUND:
                    raise CommandFailed(f"no terminal {uri} (see `ahp-terminals ls URL`)") from None
                raise
            if client.terminal_state(uri).exited:
                raise CommandFailed(_exited_line(client, uri))
            created = False
        else:
            uri = f"ahp-terminal:/run-{secrets.token_hex(4)}"
            await client.create_terminal(uri, name=f"ahp run: {line}"[:80], cwd=cwd)
            created = True
        result: CommandResult | None = None
        stopped_by: int | None = None
        nonlocal exited
        before = _last_command_id(client, uri)
        hard = math.inf
        if args.timeout is not None:
            hard = trio.current_time() + args.timeout + INTERRUPT_GRACE + HARD_TIMEOUT_MARGIN
        try:
            with trio.CancelScope(deadline=hard):  # (the hard limit: HARD_TIMEOUT_MARGIN)
                async with trio.open_nursery() as nursery:

                    async def watch() -> None:
                        # The client reconnects by itself; the command is followed on
                        # over the new connection. One that does not come back ends it.
                        while True:
                            await client.wait_for(lambda: not client.connected)
                            if client.server_shut_down:
                                # (1001: it ends its terminals; no reconnect brings it back.)
                                seen = _command_seen(client, uri, before)
                                if seen == "ended":
                                    # The command's end came before the close (a drain
                                    # waits for it): its result follows, as usual.
                                    return
                                raise CommandFailed(
                                    SERVER_SHUT_DOWN if seen == "running" else SHUT_DOWN_BEFORE
                                )
                            with trio.move_on_after(RECONNECT_WINDOW):
                                await client.wait_for(lambda: client.connected)
                                continue
                            raise CommandFailed(
                                "connection lost while the command ran (no reconnect "
                                f"within {RECONNECT_WINDOW:g} s)"
                            )

                    async def stop_on_signal() -> None:
                        nonlocal stopped_by
                        async for signum in signals:
                            stopped_by = signum
                            # Cancelling run_command interrupts the command (Ctrl-C).
                            nursery.cancel_scope.cancel()
                            return

                    nursery.start_soon(watch)
                    nursery.start_soon(stop_on_signal)
                    options = RunOptions(
                        timeout=args.timeout,
                        max_output_bytes=min(args.max_output_bytes * RAW_FACTOR, MAX_BUDGET),
                    )
                    try:
                        if printer is None:
                            result = await run_command(client.terminal(uri), line, options)
                        else:
                            handle = await client.terminal(uri).start(line, options)
                            try:
                                result = await _stream(handle, printer)
                            finally:
                                printer.feed(handle.read_settled(final=True))
                                printer.close()
                    except TerminalExitedError:
                        # (Its shell exited at start-up: nothing was typed.)
                        raise CommandFailed(_exited_line(client, uri)) from None
                    if result.status == "lost" and client.server_shut_down:
                        raise CommandFailed(SERVER_SHUT_DOWN)
                    if result.shell_exited and result.exit_code is None:
                        exited = _exited_line(client, uri)
                    nursery.cancel_scope.cancel()
        finally:
            if created:
                with trio.CancelScope(shield=True):
                    await _dispose(client, uri)
        return result, stopped_by

    async def _dispose(client: Client, uri: str) -> None:
        """Dispose the terminal ``run`` created, over the connection or the next one
        the client opens within :data:`DISPOSE_TIMEOUT`; when it cannot, say on
        stderr that it was left on the server, and how to close it."""
        from ahp.client.connection import ClientError, ConnectionLost, RpcError
        from ahp.protocol.jsonrpc import ErrorCode

        if client.server_shut_down and not client.connected:
            return  # (it ends every terminal as it shuts down)
        why = ""
        with trio.move_on_after(DISPOSE_TIMEOUT) as waited:
            while True:
                try:
                    await client.dispose_terminal(uri)
                except RpcError as exc:
                    if exc.code == ErrorCode.NOT_FOUND:
                        return  # (gone already)
                    why = f"the server refused: {exc.message}"
                except ConnectionLost as exc:
                    if client.server_shut_down:
                        return  # (it ends every terminal as it shuts down: a drain's goodbye)
                    why = str(exc)
                    if client.lost is None:
                        # Dropped before the answer: ask again over the next connection.
                        await trio.sleep(RETRY_PAUSE)
                        continue
                except ClientError as exc:
                    why = str(exc)
                else:
                    return
                break
        if waited.cancelled_caught:
            what = "no answer" if client.connected else "no connection"
            why = f"{what} within {DISPOSE_TIMEOUT:g} s"
        name = uri.removeprefix("ahp-terminal:/")
        print(
            f"ahp-terminals run: the terminal {uri} was left on the server ({printable(why)}); "
            f"close it with: ahp-terminals rm URL {name}",
            file=sys.stderr,
        )

    return main("ahp-terminals run", body, failure=FAILED)


def _last_command_id(client: Client, uri: str) -> str | None:
    """The id of the last command in the mirror of ``uri`` (None: none, or not mirrored)."""
    try:
        content = client.terminal_state(uri).content
    except KeyError:
        return None
    for part in reversed(content):
        if isinstance(part, CommandPart):
            return part.commandId
    return None


def _command_seen(
    client: Client, uri: str, before: str | None
) -> Literal["ended", "running", "not started"]:
    """What the mirror of ``uri`` shows, as the connection closed, of the command
    ``run`` typed (a command after ``before``, the last one before it was typed):
    ``ended`` (it finished, or the terminal's process exited: the command ended the
    shell), ``running``, or ``not started`` (no such command yet). What arrived
    before the close is all in the mirror already, so the command's handle reaches
    the same end from the envelopes queued for it."""
    try:
        state = client.terminal_state(uri)
    except KeyError:
        return "not started"
    if state.exited:
        return "ended"
    for part in reversed(state.content):
        if isinstance(part, CommandPart):
            if part.commandId == before:
                break
            return "ended" if part.isComplete else "running"
    return "not started"


def _exited_line(client: Client, uri: str) -> str:
    """``the process of URI has exited`` (with its exit code when the mirror has it)."""
    try:
        code = client.terminal_state(uri).exitCode
    except KeyError:  # (no longer mirrored)
        code = None
    return f"the process of {uri} has exited" + ("" if code is None else f" (code {code})")


def _write_out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


async def _stream(handle: CommandHandle, printer: OutputPrinter) -> CommandResult:
    """Print ``handle``'s output as it settles until the command is over or waits for
    input; its result. Cancelled, or failing (standard output's reader gone: ``| head``),
    the command is interrupted (as ``run_command`` on cancellation) before it raises."""
    try:
        async with trio.open_nursery() as nursery:

            async def follow() -> None:
                while not handle.done:
                    await handle.wait_output(timeout=STREAM_POLL)
                    printer.feed(handle.read_settled())
                    await trio.lowlevel.checkpoint()

            nursery.start_soon(follow)
            result = await handle.wait()
            nursery.cancel_scope.cancel()
    except BaseException:
        if not handle.done:
            with trio.CancelScope(shield=True), trio.move_on_after(CANCEL_INTERRUPT_TIMEOUT):
                await handle.interrupt()
                # What the interrupt makes it print (^C, a message) belongs to the output.
                with trio.move_on_after(STREAM_POLL):
                    await handle.wait_done()
        raise
    return result
