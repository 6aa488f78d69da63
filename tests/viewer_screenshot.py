"""Take the screenshot of the viewer page in docs/viewer.png (not a test).

    python -m tests.viewer_screenshot docs/viewer.png

A real host (bash terminals), an agent holding one terminal through a session claim and
running a few commands, the page open on it in headless Chromium (:mod:`tests.cdp`).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import trio

from ahp.client import connect
from ahp.engine import open_host
from ahp.server import ServeOptions, serve_host
from tests.cdp import ChromiumProcess, open_browser

AGENT = {"kind": "session", "session": "ahp-session:/agent-1", "chat": "ahp-chat:/agent-1/main"}
COMMANDS = (
    "cd /tmp/ahp-demo",
    "ls",
    "python3 -c 'print(sum(range(1, 101)))'",
    "grep -n TODO notes.txt",
    "git status --short 2>/dev/null || echo 'not a git repository'",
)


def demo_directory() -> None:
    demo = Path("/tmp/ahp-demo")
    demo.mkdir(exist_ok=True)
    (demo / "notes.txt").write_text("ship the viewer\nwrite the docs\n")
    (demo / "build.sh").write_text("#!/bin/sh\necho building\n")


async def main(out: Path, chromium: ChromiumProcess) -> None:
    with tempfile.TemporaryDirectory() as records:
        async with (
            open_host(shell="/bin/bash") as host,
            trio.open_nursery() as nursery,
        ):
            options = ServeOptions(port=0, record_dir=records)
            sidecar = await nursery.start(serve_host, host, options)
            async with connect(sidecar.url, client_id="agent") as agent:
                await agent.create_terminal(
                    "ahp-terminal:/agent-build", claim=AGENT, name="agent: build", cols=100
                )
                await host.create_terminal("ahp-terminal:/scratch", name="scratch")
                work = agent.terminal("ahp-terminal:/agent-build")
                for line in COMMANDS:
                    await work.run(line, timeout=30)
                await agent.send_input("ahp-terminal:/agent-build", "sleep 600\r")
                async with open_browser(chromium) as browser:
                    page = await browser.new_page(width=1400, height=820)
                    assert sidecar.page_url is not None
                    await page.goto(sidecar.page_url)
                    await page.wait_for(
                        "document.querySelectorAll('#commands button[data-running=\"true\"]')"
                        ".length === 1"
                    )
                    await page.wait_for(
                        "document.querySelector('#recordings button[data-recording]') !== null"
                    )
                    await trio.sleep(0.5)  # (fonts and the last paint)
                    await page.screenshot(out)
                await agent.send_input("ahp-terminal:/agent-build", "\x03")
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/viewer.png").resolve()
    os.environ.setdefault("PS1", "$ ")
    demo_directory()
    browser = ChromiumProcess()
    try:
        trio.run(main, target, browser)
    finally:
        browser.close()
    print(target)
