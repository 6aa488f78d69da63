"""Did the shell take the Ctrl-C? The answer a command's collector waits for.

Why a module of its own: a Ctrl-C typed at a shell (the timeout's, an agent's
interrupt, the one that clears fish's kept line) is not taken the moment it is sent.
It may still be on its way (the kernel's buffer, a shell not yet scheduled), or held:
bash, interrupted at its first prompt while its line editor is not blocked reading,
echoes ``^C``, redraws the line and keeps the interrupt pending until the next key,
which it then drops with whatever it had read (the command typed next would lose its
first keys). Telling "taken" from "not yet" needs what the shell printed since the
Ctrl-C, how long it has read in quiet since, and Ctrl-Cs sent again: that state and
its rules are :class:`InterruptAnswer`'s, apart from the collector
(:class:`~ahp.agent.collector.Collector`) that follows the whole command and asks it.

Ownership: one per collector, fed and asked by that collector's tasks only (one Trio
run, no lock). Its only I/O is the Ctrl-C it sends again, through the terminal's
port (:meth:`~ahp.agent.port.TerminalPort.send_input`).
"""

from __future__ import annotations

from typing import Final

import attrs
import trio

from ahp.agent.port import TerminalPort
from ahp.agent.prestart import MAX_PRE_START, prompt_after

__all__ = ["INTERRUPT_RESENDS", "SILENT_RESEND_AFTER", "TAKE_WAIT", "InterruptAnswer"]

#: After a Ctrl-C, how long the shell may be seen reading in quiet without having
#: shown that it took it (a new line and a prompt) before the command is ended
#: anyway: a shell that ignores SIGINT, or a prompt that looks like none.
TAKE_WAIT: Final = 3.0
#: How many more Ctrl-Cs a shell seen reading, that has not shown it took the first,
#: is sent (see :meth:`InterruptAnswer.took`).
INTERRUPT_RESENDS: Final = 2
#: A shell that said nothing at all after a Ctrl-C and has read in quiet this long is
#: sent another too (bash can hold one without a word); long enough that an answer
#: still on its way is not taken for the answer to the next one.
SILENT_RESEND_AFTER: Final = 1.0


@attrs.define
class InterruptAnswer:
    """What the shell said after the latest Ctrl-C, and how long it has read in quiet
    since without showing it took it."""

    port: TerminalPort
    #: What the terminal printed after the latest Ctrl-C, before the command's start
    #: (its tail): whether the shell took it (:meth:`took`).
    after_ask: str = ""
    #: When the shell was first seen reading in quiet after a Ctrl-C it has not shown
    #: it took (``None``: not so at the last look).
    untaken: float | None = None
    #: Ctrl-Cs sent again because the shell had not shown it took the first.
    resent: int = 0
    #: Something was printed after a Ctrl-C (any: :attr:`after_ask` is reset on a resend).
    said_after_ask: bool = False

    def heard(self, data: str) -> None:
        """Output that arrived after the (latest) Ctrl-C, before the command's start
        (its tail): the shell's answer to it."""
        self.after_ask = (self.after_ask + data[-MAX_PRE_START:])[-MAX_PRE_START:]
        if data:
            self.said_after_ask = True

    def prompt_seen(self, prompt: str) -> bool:
        """The shell answered the (latest) Ctrl-C with a new line and ``prompt`` (or
        one like it: :func:`~ahp.agent.prestart.prompt_after`)."""
        return prompt_after(self.after_ask, prompt)

    async def took(self, prompt: str) -> bool:
        """The shell, seen reading in quiet after a Ctrl-C, took it: its answer (the
        output since the latest Ctrl-C) starts a new line and ends at ``prompt`` or
        one like it (:func:`~ahp.agent.prestart.prompt_after`); or it has read in
        quiet for :data:`TAKE_WAIT` since without one (it ignores SIGINT; its prompt
        looks like none; it held every Ctrl-C resent).

        Until then the Ctrl-C may still be on its way, or held (see the module's
        docstring). A shell that answered so (output, but no new prompt) and reads
        in quiet is sent one more Ctrl-C, at most :data:`INTERRUPT_RESENDS` times:
        bash takes both at once, and a Ctrl-C at a shell's own prompt only drops the
        line it interrupted. A shell that said nothing is resent one only after
        :data:`SILENT_RESEND_AFTER` of quiet reading (bash can hold one without a
        word), so that an answer still on its way is not taken for the answer to the
        next one: a Ctrl-C in flight when the next command is typed is the very
        hazard. The answer to a resent one is looked for from scratch."""
        answer = self.after_ask
        if prompt_after(answer, prompt):
            return True
        now = trio.current_time()
        if self.untaken is None:
            self.untaken = now
        quiet = now - self.untaken
        if self.resent < INTERRUPT_RESENDS and (answer or quiet >= SILENT_RESEND_AFTER):
            self.resent += 1
            self.after_ask = ""
            self.untaken = None
            await self.port.send_input("\x03")
            return False
        return quiet >= TAKE_WAIT

    async def took_unseen(self) -> bool:
        """Detected mode, the command started, a Ctrl-C sent, and the shell's prompt
        never seen (:func:`~ahp.agent.evidence.prompt_unseen`: bash's stderr is not
        the terminal): its line editor reads in quiet, nothing at all printed since
        the Ctrl-C, for :data:`SILENT_RESEND_AFTER`; then it is sent one more Ctrl-C
        (a Ctrl-C bash held, see :meth:`took`, is taken with it: the next command
        keeps its first keys), and after as long again in quiet, it took them.
        Anything printed since the Ctrl-C (a trap's words: ``trap 'echo hi' INT``
        keeps a ``read`` reading) and this never concludes."""
        if self.said_after_ask:
            return False
        now = trio.current_time()
        if self.untaken is None:
            self.untaken = now
        if now - self.untaken < SILENT_RESEND_AFTER:
            return False
        if self.resent < 1:
            self.resent += 1
            self.untaken = None
            await self.port.send_input("\x03")
            return False
        return True
