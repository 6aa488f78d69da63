"""Environment defaults that keep an agent's terminal from waiting on a person.

Why: an agent's command that opens a pager (``git log``, ``man``), asks for
credentials (``git clone`` of a private repository) or opens a package
installer's dialog waits for keystrokes nobody will type, and the agent sees
only a command that never ends. Terminals created by :mod:`ahp.engine` get
:data:`NONINTERACTIVE_ENV` unless created with ``interactive=True``; a
caller's own ``env`` wins over each of them. The command's own prompts are still
caught by waiting-for-input detection (:mod:`ahp.agent`).

Pure data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["NONINTERACTIVE_ENV"]

#: Set in non-interactive (agent) terminals. Each entry, and why:
NONINTERACTIVE_ENV: Final[Mapping[str, str]] = {
    # Pagers print and exit instead of waiting for "q".
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "SYSTEMD_PAGER": "cat",
    "GH_PAGER": "cat",
    "AWS_PAGER": "",
    # git fails instead of asking for a user name / password on the terminal, and
    # keeps the proposed message instead of opening an editor (merge, rebase).
    "GIT_TERMINAL_PROMPT": "0",
    "GCM_INTERACTIVE": "never",
    "GIT_EDITOR": "true",
    # apt / dpkg: no debconf dialogs; pip: no prompts; the GitHub CLI: no prompts.
    "DEBIAN_FRONTEND": "noninteractive",
    "PIP_NO_INPUT": "1",
    "GH_PROMPT_DISABLED": "1",
}
