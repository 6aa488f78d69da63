"""The command line: ``ahp-terminals <subcommand>`` (also ``python -m ahp``, with the
Python that has the package installed).

Why a thin module: each subcommand lives next to the layer it drives; this file
parses arguments and hands over, importing the heavy parts lazily: ``--help`` imports
none of them, and a subcommand only its own (a client command does not import the
server). Errors a person can cause (an unreachable URL, a wrong token, a busy
port) are reported as one line on stderr with a non-zero exit, never as a
traceback.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import shlex
import shutil
import socket
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from ahp import arguments
from ahp.printable import configure_logging
from ahp.version import __version__

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: Longest ``--drain-timeout`` (a day): longer is a typo, and Trio deadlines stay finite.
MAX_SECONDS: Final = 86400.0
#: Exit status for a command line that cannot be used (as argparse).
USAGE: Final = 2
#: Exit status when standard output's reader is gone (a shell's 128 + SIGPIPE).
SIGPIPE_STATUS: Final = 141


def _nice_option(p: argparse._ActionsContainer, flag: str, default: int, help: str) -> None:
    """A niceness option of ``serve`` (0-19)."""
    p.add_argument(
        flag,
        type=int,
        default=default,
        choices=range(20),
        metavar="N",
        help=f"{help} (0-19; default {default})",
    )


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser], help: str) -> None:
    p = sub.add_parser(
        "serve",
        help=help,
        description=(
            "Host terminals over the Agent Host Protocol. Prints one line with the connect "
            "URL (including the token) on stdout when ready; on a terminal, also the "
            "viewer page's URLs (full and read-only), quoted for shells. Logs go to stderr."
        ),
    )
    _serve_access(p.add_argument_group("listening and access"))
    _serve_terminals(p.add_argument_group("terminals"))
    _serve_records(p.add_argument_group("records and logs"))
    _serve_lifetime(p.add_argument_group("lifetime"))


def _serve_access(g: argparse._ArgumentGroup) -> None:
    from ahp.server.app import DEFAULT_PORT

    g.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    g.add_argument(
        "--port",
        type=arguments.port,
        default=DEFAULT_PORT,
        help=f"TCP port, 0-65535 (default {DEFAULT_PORT}; 0 = any free port)",
    )
    g.add_argument(
        "--unix", metavar="PATH", help="listen on a Unix socket (mode 0600) instead of TCP"
    )
    g.add_argument(
        "--token",
        type=arguments.token,
        help="access token (default: the content of the file $AHP_TOKEN_FILE names, else "
        "$AHP_TOKEN, else a random token; prefer the variables: an argument is visible in ps)",
    )
    g.add_argument(
        "--tls-cert",
        metavar="PEM",
        help="serve wss:// with this certificate chain (TCP only; the key may be in the file)",
    )
    g.add_argument("--tls-key", metavar="PEM", help="the certificate's private key")
    g.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow browser pages from this Origin (repeatable; default: refuse every Origin)",
    )
    g.add_argument(
        "--holder-only-input",
        action="store_true",
        help="take input (and signals) only from the client holding a terminal's claim "
        "(default: from every client with the token)",
    )
    g.add_argument(
        "--no-web",
        dest="web",
        action="store_false",
        help="do not serve the viewer page (default: served on the same port, at /)",
    )
    g.add_argument(
        "--read-token",
        type=arguments.token,
        help="the read-only token, for watching only (default: $AHP_READ_TOKEN, else a "
        "random token)",
    )


def _serve_terminals(g: argparse._ArgumentGroup) -> None:
    from ahp.engine.priority import FLOOD_NICE
    from ahp.reducers.scrollback import DEFAULT_SCROLLBACK
    from ahp.server.app import SERVE_CHILD_NICE
    from ahp.server.state import DEFAULT_MAX_TERMINALS

    g.add_argument(
        "--shell",
        type=_executable,
        help="shell for new terminals, a path or a name on $PATH (default: $SHELL, else "
        "/bin/sh; a $SHELL that names no executable: /bin/sh, with a warning)",
    )
    g.add_argument(
        "--cwd",
        type=_directory,
        metavar="PATH",
        help="where new terminals (and execs) start when the client does not say (default: "
        "$HOME; a $HOME that is no directory one can enter: the current directory, with a "
        "warning)",
    )
    g.add_argument(
        "--no-rc",
        action="store_true",
        help="start shells without the user's startup files (~/.bashrc, ~/.profile, "
        "~/.zshrc, config.fish): commands see this process's environment, e.g. a venv's "
        "python first on PATH; command detection still loads. The system-wide files are "
        "still read (bash: /etc/bash.bashrc, read with the file that loads command "
        "detection; zsh: /etc/zsh/zshenv and the like); fish reads none (--no-config)",
    )
    g.add_argument(
        "--scrollback",
        type=arguments.positive_int,
        metavar="CHARS",
        help=f"characters of output retained per terminal (default {DEFAULT_SCROLLBACK})",
    )
    g.add_argument(
        "--max-terminals",
        type=arguments.positive_int,
        default=DEFAULT_MAX_TERMINALS,
        metavar="N",
        help=f"terminals hosted at most; more are refused (default {DEFAULT_MAX_TERMINALS})",
    )
    _nice_option(
        g,
        "--child-nice",
        SERVE_CHILD_NICE,
        "run terminals' processes at niceness N: busy programs then leave the server its "
        "CPU when the machine is contended, and other clients' keystrokes their echo",
    )
    _nice_option(
        g,
        "--flood-nice",
        FLOOD_NICE,
        "while a terminal's output floods the server (over 512 KiB/s for 0.5 s) and "
        "someone typed in another terminal in the last 5 s, run the flooding terminal's "
        "session at autogroup nice N (several floods lower), until quiet for 1 s; 0: "
        "never. The server keeps up and the typist keeps their echo on a busy machine",
    )


def _serve_records(g: argparse._ArgumentGroup) -> None:
    from ahp.record.recorder import RECORD_MAX_BYTES

    g.add_argument(
        "--record",
        metavar="DIR",
        help="record every terminal into DIR, one asciicast v3 file each (play: "
        "ahp-terminals play FILE)",
    )
    g.add_argument(
        "--record-input",
        action="store_true",
        help="record input too (off by default: input may hold passwords)",
    )
    g.add_argument(
        "--record-max-bytes",
        type=arguments.positive_int,
        metavar="BYTES",
        help=f"size bound of each recording (default {RECORD_MAX_BYTES}); the recording "
        "stops there, saying so",
    )
    g.add_argument(
        "--audit-log",
        metavar="FILE",
        help="log privileged events (connections, terminals, claims, input sizes, signals) "
        "to FILE as JSON lines, rotated",
    )
    g.add_argument(
        "--audit-input",
        action="store_true",
        help="log the text of input in the audit log, not only its size",
    )
    g.add_argument(
        "--wire-log",
        metavar="DIR",
        help="log every JSON-RPC message into DIR as JSONL with VS Code's _ahpLog field "
        "(rotated at 75 MiB x 5, tokens redacted)",
    )


def _serve_lifetime(g: argparse._ArgumentGroup) -> None:
    from ahp.server.drain import DEFAULT_DRAIN_TIMEOUT

    g.add_argument(
        "--drain-timeout",
        type=_seconds,
        default=DEFAULT_DRAIN_TIMEOUT,
        metavar="SECONDS",
        help="on SIGTERM, refuse new terminals and let running commands finish for this "
        f"long before disposing everything (default {DEFAULT_DRAIN_TIMEOUT:g}; 0: at once, "
        "as on SIGINT)",
    )
    g.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="stderr log level",
    )


def _seconds(text: str) -> float:
    value = arguments.number(text, float, "a number of seconds")
    if not 0 <= value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_SECONDS:g} seconds")
    return value


def _executable(text: str) -> str:
    """``--shell``: an executable file (a path, or a name found on ``$PATH``), made absolute."""
    found = shutil.which(text)
    if found is None:
        raise argparse.ArgumentTypeError(f"no executable {text!r} (a path, or a name on $PATH)")
    return os.path.abspath(found)


def _directory(text: str) -> str:
    """``--cwd``: a directory this process can enter, made absolute."""
    path = os.path.abspath(text)
    if not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"no directory {text!r}")
    if not os.access(path, os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot enter {text!r} (permission denied)")
    return path


def terminal_defaults(
    shell: str | None, cwd: str | None, env: Mapping[str, str]
) -> tuple[str | None, str | None, list[str]]:
    """``serve``'s shell and directory for new terminals, from ``--shell``/``--cwd``
    (checked already) or the environment, and a warning for each fallback: a
    ``$SHELL`` that names no executable gives ``/bin/sh``; a ``$HOME`` that is no
    directory this process can enter gives the current directory (``/`` if that is
    gone too). ``None`` leaves the choice to each terminal's launch (``$SHELL``,
    ``$HOME``), as before."""
    warnings: list[str] = []
    named = env.get("SHELL")
    if shell is None and named and shutil.which(named, path=env.get("PATH")) is None:
        shell = "/bin/sh"
        warnings.append(f"$SHELL {named!r} names no executable: new terminals run /bin/sh")
    if cwd is None:
        home = os.path.expanduser("~")
        if not (os.path.isabs(home) and os.path.isdir(home) and os.access(home, os.X_OK)):
            try:
                cwd = os.getcwd()
            except OSError:  # (deleted under us)
                cwd = "/"
            warnings.append(
                f"$HOME {home!r} is not a directory this user can enter: new terminals "
                f"start in {cwd} (--cwd to choose)"
            )
    return shell, cwd, warnings


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every subcommand whole, or, given the ``command`` about
    to run, that one whole and the others by name and help line alone (each whole one
    imports its module: the server, the client, MCP; a client command then starts in
    about half the time)."""
    parser = argparse.ArgumentParser(
        prog="ahp-terminals",
        description="Host terminals for AI agents over the Agent Host Protocol (AHP).",
    )
    parser.add_argument("--version", action="version", version=f"ahp-terminals {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module, help in _COMMANDS:
        if command is not None and name != command:
            sub.add_parser(name, help=help)
        elif module is None:
            _add_serve(sub, help)
        else:
            importlib.import_module(module).add_parser(sub, help)
    return parser


#: The subcommands, in the order ``--help`` lists them: name, the module that adds its
#: parser (``add_parser(sub, help)``, registering ``set_defaults(handler=run)``; its
#: ``run(args) -> int``; None: ``serve``, here) and its help line.
_COMMANDS: Final[tuple[tuple[str, str | None, str], ...]] = (
    ("serve", None, "run the sidecar: host terminals for AHP clients over WebSocket"),
    (
        "bench",
        "ahp.bench.command",
        "measure throughput, echo latency and memory against the pty and peers",
    ),
    (
        "attach",
        "ahp.client.commands.attach",
        "attach this terminal to a remote terminal (detach with Ctrl-])",
    ),
    (
        "exec",
        "ahp.client.commands.exec",
        "run one command on the server without a terminal (stdin closed)",
    ),
    ("ls", "ahp.client.commands.ls", "list the terminals of a server"),
    (
        "run",
        "ahp.client.commands.run",
        "run one command in a remote terminal and print its output",
    ),
    ("rm", "ahp.client.commands.rm", "close terminals of a server (their processes are ended)"),
    (
        "mcp",
        "ahp.mcp.command",
        "serve terminals as MCP tools on stdio (for Claude Code, Codex, Cursor, …)",
    ),
    (
        "play",
        "ahp.record.play",
        "replay a terminal recording (asciicast v3, as serve --record writes)",
    ),
)


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (its first word that is not an option), if known."""
    names = {name for name, _, _ in _COMMANDS}
    for word in argv:
        if not word.startswith("-"):
            return word if word in names else None
    return None


def _serve(args: argparse.Namespace) -> int:
    import trio

    from ahp.record import RecordOptions
    from ahp.server.app import (
        ServeOptions,
        Sidecar,
        TLSSetupError,
        TokenFileError,
        run_sidecar,
        take_environment_token,
        tls_context,
    )

    configure_logging(args.log_level, LOG_FORMAT)
    # A token read from a file (a mounted secret) is not printed: the operator has it,
    # and stdout is a container's log.
    from_file = bool(os.environ.get("AHP_TOKEN_FILE")) and not args.token
    try:
        env_token = take_environment_token()  # (also out of the terminals' environment)
    except TokenFileError as exc:
        print(f"ahp-terminals serve: {exc}", file=sys.stderr)
        return USAGE
    read_token = args.read_token or os.environ.get("AHP_READ_TOKEN") or None
    if read_token is not None and read_token == (args.token or env_token):
        print(
            "ahp-terminals serve: the read-only token must differ from the token "
            "(--read-token or $AHP_READ_TOKEN equals --token, $AHP_TOKEN or the token file's)",
            file=sys.stderr,
        )
        return USAGE
    if args.tls_key and not args.tls_cert:
        print("ahp-terminals serve: --tls-key needs --tls-cert", file=sys.stderr)
        return USAGE
    if args.tls_cert and args.unix:
        print(
            "ahp-terminals serve: --tls-cert is for TCP; a Unix socket is protected by its mode",
            file=sys.stderr,
        )
        return USAGE
    try:
        tls = tls_context(args.tls_cert, args.tls_key) if args.tls_cert else None
    except TLSSetupError as exc:  # (names the file and the reason)
        print(f"ahp-terminals serve: {exc}", file=sys.stderr)
        return USAGE
    if args.unix is None:
        problem = _address_problem(args.host)
        if problem is not None:
            # Before anything is logged: the whole failure is this one line.
            print(f"ahp-terminals serve: cannot listen on {args.host}: {problem}", file=sys.stderr)
            return 1
    try:
        record = RecordOptions(
            record_input=args.record_input,
            **({"max_bytes": args.record_max_bytes} if args.record_max_bytes else {}),
        )
    except ValueError as exc:
        print(f"ahp-terminals serve: {exc}", file=sys.stderr)
        return USAGE
    options = ServeOptions(
        host=args.host,
        port=args.port,
        unix=args.unix,
        token=args.token or env_token,
        allow_origins=frozenset(args.allow_origin),
        tls=tls,
        max_terminals=args.max_terminals,
        holder_only_input=args.holder_only_input,
        web=args.web,
        read_token=args.read_token,
        child_nice=args.child_nice,
        flood_nice=args.flood_nice,
        record_dir=args.record,
        record=record,
        audit_log=args.audit_log,
        audit_input=args.audit_input,
        wire_log=args.wire_log,
        drain_timeout=args.drain_timeout,
    )

    listening = False
    where = args.unix or (f"[{args.host}]" if ":" in args.host else args.host) + f":{args.port}"

    def ready(sidecar: Sidecar) -> None:
        nonlocal listening
        listening = True
        if sys.stdout.isatty():
            print(ready_lines(sidecar, with_tokens=not from_file), flush=True)
        elif from_file or not _regular_file(sys.stdout):
            # The one line programs read (a pipe, a socket: a program, a container's log).
            print(sidecar.url.split("?", 1)[0] if from_file else sidecar.url, flush=True)
        else:
            # Into a file (nohup, `> log`): that line, then the page's URLs (the read-only
            # token was printed nowhere). Stdout only: the logs on stderr stay token-free.
            rest = ready_lines(sidecar, quote=False).split("\n")[1:]
            print("\n".join([sidecar.url, *rest]), flush=True)
        shown = args.unix or f"{args.host}:{sidecar.port}"
        logging.getLogger("ahp.server").info("listening on %s", shown)

    shell, cwd, warnings = terminal_defaults(args.shell, args.cwd, os.environ)
    for warning in warnings:
        logging.getLogger("ahp.server").warning("%s", warning)
    try:
        return trio.run(
            lambda: run_sidecar(
                options,
                shell=shell,
                cwd=cwd,
                scrollback=args.scrollback,
                user_rc=not args.no_rc,
                on_ready=ready,
            )
        )
    except BaseException as exc:
        leaves = _leaves(exc)
        if any(isinstance(leaf, KeyboardInterrupt) for leaf in leaves):
            return 130  # Ctrl-C before the signal handler was installed
        failure = next((leaf for leaf in leaves if isinstance(leaf, OSError)), None)
        if failure is None:
            raise
        why = failure.strerror or str(failure)
        if listening or type(failure).__name__ == "RecordSetupError":
            print(f"ahp-terminals serve: {why}", file=sys.stderr)
        else:
            if failure.errno == errno.EADDRINUSE and args.unix is None:
                why += (
                    " (another program, perhaps another `ahp-terminals serve`, listens there): "
                    "choose another --port, or --port 0 for any free one"
                )
            print(f"ahp-terminals serve: cannot listen on {where}: {why}", file=sys.stderr)
        return 1


def _regular_file(stream: Any) -> bool:
    """Whether ``stream`` writes to a regular file (not a pipe, socket or terminal)."""
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False


def ready_lines(sidecar: Any, *, with_tokens: bool = True, quote: bool = True) -> str:
    """What ``serve`` shows when ready: the URLs, each quoted for shells (a ``?``
    unquoted is a glob in zsh) unless ``quote`` is false. Without the tokens (a token
    from a file is never printed), the connect and viewer URLs are bare (the viewer's
    line says to add the token); the read-only URL is printed all the same (its token
    is not the file's: a person has no other way to learn a random one)."""
    url, page = sidecar.url, sidecar.page_url
    shown = shlex.quote if quote else str
    if not with_tokens:
        url = url.split("?", 1)[0]
        page = page.split("#", 1)[0] if page is not None else None
    lines = [f"connect:   {shown(url)}"]
    if page is not None:
        add = "" if with_tokens else "  (add #tkn= and the token in $AHP_TOKEN_FILE)"
        lines.append(f"viewer:    {shown(page)}{add}")
    if sidecar.read_only_url is not None:
        lines.append(f"read-only: {shown(sidecar.read_only_url)}")
    return "\n".join(lines)


def _address_problem(host: str) -> str | None:
    """Why ``host`` cannot be listened on here (unknown name, not this machine's), or None.

    A trial ``bind`` to port 0 of each address the name resolves to, closed at
    once; the real listeners are opened later (a port in use is found then).
    """
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return exc.strerror or str(exc)
    problem = "no address"
    for family, kind, proto, _, address in infos:
        try:
            with socket.socket(family, kind, proto) as trial:
                trial.bind(address)
        except OSError as exc:
            problem = exc.strerror or str(exc)
        else:
            return None
    return problem


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, or ``[exc]``."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(_command_in(words) or "")
    args = parser.parse_args(words)
    if args.command is None:
        parser.print_help(sys.stderr)
        return USAGE
    if args.command == "serve":
        return _serve(args)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """What a command says when its standard output's reader went away (``| head``):
    nothing, as ``cat`` says nothing; its exit status is the one a shell shows for a
    program ended by ``SIGPIPE``. Standard output is pointed at ``/dev/null`` first, so
    that the interpreter's last flush at exit does not report the pipe again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
    return SIGPIPE_STATUS
