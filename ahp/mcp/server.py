"""``python -m ahp mcp``: the terminals as MCP tools, over stdio, on Trio.

Why this shape:

* **The official SDK's low-level server** (``mcp.server.Server``), not its
  decorator layer (``MCPServer``): the tools' JSON schemas and descriptions are
  written by hand for a model to read (:mod:`ahp.mcp.tools`), and errors are
  tool results with ``isError`` — which the low-level handlers give directly,
  without deriving schemas from Python signatures.
* **The output once per answer.** By default an answer is text only (no output
  schema, no ``structuredContent``): clients disagree on which of the two they
  give the model (some only the text, some only the structured content when
  there is one, some both), and only a text-only answer reaches every model
  exactly once (``docs/mcp.md`` has the evidence). ``--structured`` is for
  programs: the tools declare output schemas, the facts and the output travel
  in ``structuredContent``, and the text is the answer's first line.
* **Trio through anyio's Trio backend.** The SDK is written against anyio, so
  its server, session and stdio transport run unchanged inside ``trio.run``;
  ``tests/test_mcp.py`` drives both the low-level server and ``MCPServer`` on
  Trio to show it. One part does not fit: the SDK reads stdin and writes
  stdout in worker threads that cannot be cancelled, so stopping the server on
  a signal hung while the client held stdin open, or stopped reading stdout.
  We keep the SDK's transport and pass it a Trio reader of stdin and a writer
  of stdout of our own instead (see :mod:`ahp.mcp.stdio`). The reader also
  answers the lines the SDK would drop without an answer (not JSON, not a
  valid request, a lone surrogate: :mod:`ahp.mcp.screen`), through the SDK's
  write stream.
* **Errors that say why.** The SDK answers a request before ``initialize``, and one
  whose params it cannot validate, with one -32602 "Invalid request parameters" and
  no data. A server middleware (the SDK's ``Server.middleware`` seam, no fork:
  :func:`explain_errors`) keeps the code and adds the cause.
* **One engine, two audiences.** By default the process hosts its own engine
  (:func:`ahp.open_host`); ``--serve`` also serves that host over AHP so a
  person can ``python -m ahp attach`` to the terminal the agent is using, and
  ``--connect URL`` drives an existing sidecar's terminals through
  :mod:`ahp.client` instead of hosting any.

Lifetime: the server runs until the client closes our stdin, or SIGINT/SIGTERM;
then every terminal it hosts is disposed (hang-up, grace, kill, reaped). At the
end of stdin the requests already read are finished and answered first, for
:data:`~ahp.mcp.stdio.EOF_GRACE` seconds at most; a tool call still running then is
stopped (:class:`Calls`: a ``run_command``'s command gets a Ctrl-C) and answered
as stopped; what is queued for stdout then gets :data:`DRAIN_TIMEOUT`. A signal
stops at once: no answer is waited for, and a write the client does not read is
abandoned. Nothing but MCP messages is written to stdout; logs and the
``--serve`` URL go to stderr.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ahp.mcp.backend import Backend, ClientBackend, HostBackend
from ahp.mcp.stdio import (
    AnswersCounted,
    InFlight,
    ScreenedLines,
    StdoutWriter,
    claim_stdin,
    claim_stdout,
)
from ahp.mcp.toolbox import Toolbox
from ahp.mcp.tools import TOOLS, ToolSpec
from ahp.version import __version__

if TYPE_CHECKING:
    import mcp_types
    from mcp.server import Server, ServerRequestContext

    from ahp.server.app import ServeOptions, Sidecar

__all__ = ["INSTRUCTIONS", "Calls", "McpOptions", "build_server", "run_mcp", "serve_stdio"]

log = logging.getLogger("ahp.mcp")

#: Seconds allowed to reach a sidecar for ``--connect`` (TCP, upgrade, initialize).
CONNECT_TIMEOUT: Final = 15.0
#: Seconds a request to a ``--connect`` sidecar waits for its answer (create, dispose,
#: subscribe, ``pty: false`` runs): a sidecar that is up but frozen (stopped, its
#: connection open) held the tool call for ever; past it the call is a tool error and the
#: next call may try again. As long as ``LOST_AFTER``, the patience for a sidecar that
#: went away. A subscribe whose snapshot (a terminal's whole scrollback) takes longer to
#: arrive fails too: 4 MiB, the default scrollback, needs 140 KiB/s.
REQUEST_TIMEOUT: Final = 30.0

#: Seconds between progress notifications during a long tool call.
PROGRESS_INTERVAL: Final = 3.0

#: Seconds, once the transport has ended at stdin's end, for the answers still queued for
#: stdout to be written; a client that does not read them then is not waited for.
DRAIN_TIMEOUT: Final = 5.0

#: The answer to a tool call stopped because the server is shutting down.
STOPPED: Final = (
    "stopped after {seconds:g} s: the client closed the server's stdin, and this call was "
    "still running when the server shut down (a command run_command was running was sent "
    "Ctrl-C; the terminals close with the server)"
)

#: Told to the model once, at initialization.
INSTRUCTIONS: Final = (
    "Terminals on the user's machine: each is a persistent bash shell on a real pty; state "
    "(cwd, environment, running servers) persists between calls. run_command runs a command "
    "line and returns its exit code and rendered output; it returns early when the command "
    "waits for input (answer with send_input) or is still running after yield_after seconds "
    "(follow with read_output / wait_command, stop with interrupt / kill_command). Each later "
    "answer about a command shows only the output new since the previous one (full=true for "
    "all of it). Run long-lived processes (dev servers, watchers) in their own named terminal. "
    "A person may be watching the terminals live."
)


@attrs.frozen
class McpOptions:
    """How ``python -m ahp mcp`` gets its terminals."""

    #: Drive this sidecar's terminals instead of hosting our own.
    connect: str | None = None
    #: Or several sidecars' at once (``--connect`` repeated; :mod:`ahp.mcp.fleet`).
    connect_many: tuple[str, ...] = ()
    token: str | None = None
    #: Also serve our own host over AHP (ignored with ``connect``).
    serve: ServeOptions | None = None
    shell: str | None = None
    scrollback: int | None = None
    #: Where new terminals start (None: the home directory of the terminals' host).
    cwd: str | None = None
    #: Called once the ``serve`` listener is up (the CLI prints the URL on stderr).
    on_serving: Callable[[Sidecar], None] | None = None
    #: Answer with ``structuredContent`` and output schemas (for programs), not text.
    structured: bool = False


def _tool(spec: ToolSpec, *, structured: bool) -> mcp_types.Tool:
    import mcp_types

    schema = spec.output_schema if structured else None
    return mcp_types.Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description,
        input_schema=dict(spec.input_schema),
        output_schema=dict(schema) if schema is not None else None,
        annotations=mcp_types.ToolAnnotations(
            title=spec.title,
            read_only_hint=spec.read_only,
            destructive_hint=spec.destructive,
            open_world_hint=False,
        ),
    )


class Calls:
    """The tool calls running now, so that the end of stdin can stop them and still answer.

    A call runs in a cancel scope of its own (:meth:`running`); :meth:`stop` cancels
    every one, and those started later at once. The handler turns its own scope's
    cancellation into an answer (:data:`STOPPED`); a cancellation from outside (a
    signal, the client cancelling the request) goes on as before.
    """

    def __init__(self) -> None:
        self._scopes: set[trio.CancelScope] = set()
        self.stopped = False

    @contextmanager
    def running(self) -> Iterator[trio.CancelScope]:
        scope = trio.CancelScope()
        if self.stopped:
            scope.cancel()
        self._scopes.add(scope)
        try:
            with scope:
                yield scope
        finally:
            self._scopes.discard(scope)

    def stop(self) -> None:
        self.stopped = True
        for scope in self._scopes:
            scope.cancel()


def build_server(
    toolbox: Toolbox, *, structured: bool = False, calls: Calls | None = None
) -> Server[Any]:
    """The SDK low-level server with the tools of ``toolbox``.

    ``structured``: declare output schemas and answer with ``structuredContent`` (and
    the answer's first line as text) instead of the text alone. ``calls``: where the
    running tool calls are kept (:class:`Calls`)."""
    import mcp_types
    from mcp.server import Server

    tools = [_tool(spec, structured=structured) for spec in TOOLS]
    calls = calls if calls is not None else Calls()

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        started = trio.current_time()
        with calls.running() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_report_progress, ctx, params.name)
                output = await toolbox.call(params.name, params.arguments)
                nursery.cancel_scope.cancel()
        if scope.cancelled_caught:
            stopped = STOPPED.format(seconds=round(trio.current_time() - started))
            return mcp_types.CallToolResult(
                content=[mcp_types.TextContent(type="text", text=stopped)], is_error=True
            )
        if structured and output.data is not None and not output.is_error:
            data = output.data if not output.notes else {**output.data, "notes": output.notes}
            return mcp_types.CallToolResult(
                content=[mcp_types.TextContent(type="text", text=output.summary)],
                structured_content=data,
                is_error=False,
            )
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(type="text", text=output.text)],
            is_error=output.is_error,
        )

    server: Server[Any] = Server(
        "ahp-terminals",
        version=__version__,
        title="Terminals (ahp-terminals)",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    server.middleware.append(explain_errors)
    return server


#: The SDK's one message for every malformed request and for a request before
#: ``initialize`` (with ``data: ""``), replaced by :func:`explain_errors`.
_SDK_INVALID_PARAMS: Final = "Invalid request parameters"
#: Parameter problems named in one error, at most; and characters of the message.
_MAX_PROBLEMS: Final = 4
_MAX_PROBLEM_CHARS: Final = 600


async def explain_errors(
    ctx: ServerRequestContext[Any], call_next: Callable[[Any], Awaitable[Any]]
) -> Any:
    """Server middleware (the SDK's own seam: ``Server.middleware``): say what is wrong.

    The SDK answers a request whose params fail its validation, and any request before
    ``initialize``, with the same -32602 "Invalid request parameters" and ``data: ""``
    (it keeps pydantic's text, which quotes the input, off the wire). A client, or a
    person reading its log, cannot tell from that what to change. This keeps the code
    and puts the reason in the message and in ``data``: which parameter is wrong and
    what was expected (pydantic's location and message, never the input's value), or
    that the session is not initialized yet. Notifications are left alone (nothing
    answers them)."""
    from mcp.shared.exceptions import MCPError
    from pydantic import ValidationError

    if ctx.request_id is None:
        return await call_next(ctx)
    try:
        return await call_next(ctx)
    except ValidationError as exc:
        reason = _validation_reason(exc)
        raise MCPError(
            code=_INVALID_PARAMS, message=f"{_SDK_INVALID_PARAMS}: {reason}", data=reason
        ) from None
    except MCPError as exc:
        error = exc.error
        if error.code != _INVALID_PARAMS or error.message != _SDK_INVALID_PARAMS or error.data:
            raise
        # The SDK's pre-initialize gate (its validation failures arrive as ValidationError).
        reason = (
            f"the session is not initialized: {ctx.method!r} needs an 'initialize' request "
            "first (then the 'notifications/initialized' notification)"
        )
        raise MCPError(
            code=_INVALID_PARAMS, message=f"{_SDK_INVALID_PARAMS}: {reason}", data=reason
        ) from None


#: JSON-RPC's "invalid params" code.
_INVALID_PARAMS: Final = -32602


def _validation_reason(exc: Any) -> str:
    """``params.name: Input should be a valid string; params.arguments: Input should be
    a valid dictionary`` from a pydantic ``ValidationError`` (locations and messages only)."""
    problems = []
    for error in exc.errors(include_url=False, include_input=False)[:_MAX_PROBLEMS]:
        loc = [str(part) for part in error.get("loc", ())]
        if loc[:1] != ["params"]:  # (the SDK validates the whole request, or the params)
            loc.insert(0, "params")
        problems.append(f"{'.'.join(loc)}: {error['msg']}")
    more = exc.error_count() - len(problems)
    if more > 0:
        problems.append(f"{more} more")
    text = "; ".join(problems) or "the request's params do not fit its method"
    return text if len(text) <= _MAX_PROBLEM_CHARS else text[: _MAX_PROBLEM_CHARS - 1] + "…"


async def _report_progress(ctx: ServerRequestContext[Any], tool: str) -> None:
    """Every :data:`PROGRESS_INTERVAL` s of a call, a progress notification (seconds
    so far), so that a client which resets its timeout on progress keeps waiting.
    Sends nothing when the client gave no progress token; stops at the first failure."""
    started = trio.current_time()
    while True:
        await trio.sleep(PROGRESS_INTERVAL)
        elapsed = trio.current_time() - started
        try:
            await ctx.session.report_progress(round(elapsed, 1), message=f"{tool}: {elapsed:.0f} s")
        except Exception:  # the client went away: the call itself will notice
            log.debug("progress report failed", exc_info=True)
            return


async def serve_stdio(toolbox: Toolbox, *, structured: bool = False) -> None:
    """Serve MCP on this process's stdin/stdout until the client closes stdin; then
    answer the requests already read (see the module docstring) and return."""
    from mcp.server.stdio import stdio_server

    calls = Calls()
    server = build_server(toolbox, structured=structured, calls=calls)
    in_flight = InFlight()
    stdin = claim_stdin()
    lines = ScreenedLines(stdin, in_flight=in_flight, at_end=lambda: in_flight.settle(calls.stop))
    stdout: StdoutWriter | None = None
    try:
        stdout = claim_stdout()
        # The SDK types its stdin and stdout as anyio files; it only iterates the one line
        # by line, and writes (and flushes) each message to the other.
        async with stdio_server(stdin=lines, stdout=stdout) as (read_stream, write_stream):  # type: ignore[arg-type]
            # Our answers to lines the SDK would drop go through its own writer.
            lines.answer_into(write_stream.clone())
            answers = AnswersCounted(write_stream, in_flight)
            await server.run(read_stream, answers, server.create_initialization_options())
        with trio.move_on_after(DRAIN_TIMEOUT) as drain:
            await stdout.drain()
        if drain.cancelled_caught:
            log.warning("stdout: the client did not read the last answers for %g s", DRAIN_TIMEOUT)
    finally:
        lines.close()
        stdin.release()
        if stdout is not None:
            stdout.release()


@asynccontextmanager
async def open_backend(options: McpOptions) -> AsyncIterator[Backend]:
    """The terminals' source: our own host (and its AHP listener), or a sidecar client."""
    if options.connect_many:
        from ahp.client.fleet import connect_many
        from ahp.mcp.fleet import FleetBackend

        async with connect_many(
            options.connect_many,
            token=options.token,
            connect_timeout=CONNECT_TIMEOUT,
            request_timeout=REQUEST_TIMEOUT,
        ) as fleet:
            yield FleetBackend(fleet)
        return
    if options.connect is not None:
        from ahp.client.connection import connect

        async with connect(
            options.connect,
            token=options.token,
            connect_timeout=CONNECT_TIMEOUT,
            request_timeout=REQUEST_TIMEOUT,
        ) as client:
            yield ClientBackend(client)
        return
    from ahp.engine import open_host
    from ahp.server.app import serve_host

    scrollback: dict[str, Any] = {}
    if options.scrollback is not None:
        scrollback["scrollback"] = options.scrollback
    async with open_host(shell=options.shell, **scrollback) as host, trio.open_nursery() as nursery:
        if options.serve is not None:
            sidecar = await nursery.start(serve_host, host, options.serve)
            if options.on_serving is not None:
                options.on_serving(sidecar)
        yield HostBackend(host)
        nursery.cancel_scope.cancel()


async def run_mcp(options: McpOptions) -> int:
    """The ``mcp`` command: serve until stdin closes or a signal, then clean up; exit status."""
    # Terminals inherit our environment: the sidecar token is not theirs to see.
    env_token = os.environ.pop("AHP_TOKEN", None) or None
    if options.serve is not None:
        options = attrs.evolve(
            options, serve=attrs.evolve(options.serve, token=options.serve.token or env_token)
        )
    elif options.connect is not None or options.connect_many:
        options = attrs.evolve(options, token=options.token or env_token)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with open_backend(options) as backend, trio.open_nursery() as nursery:

            async def stop_on_signal() -> None:
                async for signum in signals:
                    log.info("%s: shutting down", signal.Signals(signum).name)
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(stop_on_signal)
            await serve_stdio(
                Toolbox(backend, default_cwd=options.cwd), structured=options.structured
            )
            log.info("the client closed stdin: shutting down")
            nursery.cancel_scope.cancel()
    return 0
