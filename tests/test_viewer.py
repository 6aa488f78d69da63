"""The viewer page in a real browser: headless Chromium over the DevTools protocol.

Each case serves a real host (bash terminals on real ptys) with ``serve_host`` on port
0, opens the page the server prints (the token in its fragment) in one browser shared by
the module (:mod:`tests.cdp`), and checks what a person would see: the page's own text
(xterm.js's DOM), its lists and buttons. Python clients (``ahp.client``) play the agent
and the other viewers. The module skips only when ``/usr/bin/chromium`` is missing
(``.ci/run`` installs it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs
import pytest
import trio

from ahp.client import connect
from ahp.engine import Host, open_host
from ahp.server import ServeOptions, Sidecar, serve_host
from tests.cdp import Browser, ChromiumProcess, Page, chromium_available, open_browser

pytestmark = pytest.mark.skipif(
    not chromium_available(), reason="headless Chromium is not installed: apt-get install chromium"
)

#: Generous bound for one condition in the page (a loaded 2-core machine).
WAIT = 30.0
#: The agent's claim (a session's, as an agent host's tool call holds a terminal).
AGENT: dict[str, Any] = {
    "kind": "session",
    "session": "ahp-session:/agent-1",
    "chat": "ahp-chat:/agent-1/main",
}
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def chromium() -> Iterator[ChromiumProcess]:
    process = ChromiumProcess()
    try:
        yield process
    finally:
        process.close()


@attrs.frozen
class Served:
    host: Host
    sidecar: Sidecar

    @property
    def origin(self) -> str:
        parts = urlsplit(self.sidecar.page_url)
        return f"{parts.scheme}://{parts.netloc}"


@asynccontextmanager
async def served(**options: Any) -> AsyncIterator[Served]:
    async with open_host(shell="/bin/bash") as host, trio.open_nursery() as nursery:
        sidecar = await nursery.start(serve_host, host, ServeOptions(port=0, **options))
        try:
            yield Served(host, sidecar)
        finally:
            nursery.cancel_scope.cancel()


async def open_page(browser: Browser, url: str) -> Page:
    page = await browser.new_page()
    await page.goto(url)
    await page.wait_for("window.ahpViewer && window.ahpViewer.client.status === 'open'")
    return page


def rows_text() -> str:
    """JavaScript: the terminal's text as the DOM holds it (xterm.js's rows)."""
    return "document.querySelector('#screen .xterm-rows').innerText"


async def test_page_loads_from_its_own_server_only(chromium: ChromiumProcess) -> None:
    async with served() as s, open_browser(chromium) as browser:
        term = await s.host.create_terminal("ahp-terminal:/one", name="one")
        page = await open_page(browser, s.sidecar.page_url)
        await page.wait_for("document.querySelector('#terminals button[data-uri]') !== null")
        await term.send_input("echo ready-$((40+2))\r")
        await page.wait_for(f"{rows_text()}.includes('ready-42')")
        urls = page.request_urls()
        assert urls, "no request recorded"
        assert all(u.startswith(s.origin + "/") for u in urls), urls
        # The token was never in a request line (the fragment stays in the browser).
        assert s.sidecar.token is not None
        assert not [u for u in urls if s.sidecar.token in u and not u.startswith("ws")], urls
        assert await page.evaluate("location.hash") == ""  # taken out of the address bar
        assert await page.evaluate("window.ahpViewer.readOnly") is False


async def test_output_typed_by_a_python_client_appears_in_the_page(
    chromium: ChromiumProcess,
) -> None:
    async with (
        served() as s,
        open_browser(chromium) as browser,
        connect(s.sidecar.url, client_id="agent") as agent,
    ):
        await agent.create_terminal("ahp-terminal:/work", claim=AGENT, name="work")
        page = await open_page(browser, s.sidecar.page_url)
        await page.wait_for("window.ahpViewer.current === 'ahp-terminal:/work'")
        await agent.send_input("ahp-terminal:/work", "printf 'from %s\\n' python-client\r")
        await page.wait_for(f"{rows_text()}.includes('from python-client')")
        # The catalogue shows who holds it and that it runs.
        entry = await page.evaluate(
            "document.querySelector('#terminals button[data-uri=\"ahp-terminal:/work\"]').innerText"
        )
        assert "work" in entry and "running" in entry and "session ahp-session:/agent-1" in entry
