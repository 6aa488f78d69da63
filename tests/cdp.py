"""A small Chrome DevTools protocol client for the browser tests (no selenium/playwright).

Why ours: the page tests need a real browser and only a handful of DevTools commands
(open a tab, evaluate, type, record network requests, take a screenshot); Debian's
``chromium`` and trio-websocket (a dependency already) are all it takes.

:class:`ChromiumProcess` is synchronous (a module-scoped fixture starts one browser for
every test of a module: each test runs its own Trio loop, so an async fixture could not
outlive one test). Its DevTools endpoint is read from the ``DevToolsActivePort`` file
Chromium writes into its fresh profile directory. :func:`open_browser` connects to it
inside a test; each :class:`Page` is one tab with a flattened session. Every wait has a
deadline; events are kept per page in a bounded list (:data:`MAX_EVENTS`).
"""

from __future__ import annotations

import base64
import itertools
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import orjson
import trio
from trio_websocket import WebSocketConnection, open_websocket_url

CHROMIUM: Final = "/usr/bin/chromium"
#: Seconds a browser gets to start, a command to answer, a condition to hold.
START_TIMEOUT: Final = 60.0
COMMAND_TIMEOUT: Final = 30.0
#: DevTools events kept per page (the oldest are dropped past it).
MAX_EVENTS: Final = 10_000
FLAGS: Final = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
    "--window-size=1400,900",
)


def chromium_available() -> bool:
    return os.path.exists(CHROMIUM) and shutil.which(CHROMIUM) is not None


class ChromiumProcess:
    """One headless Chromium with a new profile directory; :meth:`close` ends it."""

    def __init__(self) -> None:
        self.profile = tempfile.mkdtemp(prefix="ahp-chromium-")
        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        active = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if active.exists():
                lines = active.read_text().split("\n")
                if len(lines) >= 2 and lines[1].strip():
                    break
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("chromium wrote no DevToolsActivePort in time")
            time.sleep(0.05)
        self.ws_url = f"ws://127.0.0.1:{lines[0].strip()}{lines[1].strip()}"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


class CdpError(Exception):
    pass


class Browser:
    """A DevTools connection to the browser; commands are answered by id."""

    def __init__(self, ws: WebSocketConnection) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[trio.Event, list[Any]]] = {}
        self.pages: dict[str, Page] = {}

    async def _read(self) -> None:
        while True:
            message = orjson.loads(await self.ws.get_message())
            if "id" in message:
                waiter = self._waiting.pop(message["id"], None)
                if waiter is not None:
                    waiter[1].append(message)
                    waiter[0].set()
                continue
            page = self.pages.get(message.get("sessionId", ""))
            if page is not None:
                page.events.append(message)
                if len(page.events) > MAX_EVENTS:
                    del page.events[0]
                page.changed.set()
                page.changed = trio.Event()

    async def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> Any:
        msg_id = next(self._ids)
        message: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        done, slot = trio.Event(), list[Any]()
        self._waiting[msg_id] = (done, slot)
        await self.ws.send_message(orjson.dumps(message).decode())
        with trio.fail_after(COMMAND_TIMEOUT):
            await done.wait()
        answer = slot[0]
        if "error" in answer:
            raise CdpError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    async def new_page(self, *, width: int = 1400, height: int = 900) -> Page:
        target = await self.send("Target.createTarget", {"url": "about:blank"})
        target_id = target["targetId"]
        attached = await self.send(
            "Target.attachToTarget", {"targetId": target_id, "flatten": True}
        )
        page = Page(self, target_id, attached["sessionId"])
        self.pages[page.session] = page
        await page.send("Page.enable")
        await page.send("Runtime.enable")
        await page.send("Network.enable")
        await page.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        return page


class Page:
    """One tab: evaluate, wait for a condition, type, look at its events."""

    def __init__(self, browser: Browser, target_id: str, session: str) -> None:
        self.browser = browser
        self.target_id = target_id
        self.session = session
        self.events: list[dict[str, Any]] = []
        self.changed = trio.Event()

    async def send(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return await self.browser.send(method, params, self.session)

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", {"url": url})

    async def evaluate(self, expression: str) -> Any:
        result = await self.send(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": True, "returnByValue": True},
        )
        if "exceptionDetails" in result:
            raise CdpError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = COMMAND_TIMEOUT) -> Any:
        """Evaluate ``expression`` until it is truthy (re-checked every 50 ms: the page's
        state changes without telling us); its value."""
        with trio.fail_after(timeout):
            while True:
                try:
                    value = await self.evaluate(expression)
                except CdpError:
                    value = None  # (the page may still be loading)
                if value:
                    return value
                await trio.sleep(0.05)

    async def type_text(self, text: str) -> None:
        """Type into the focused element key by key, as a keyboard would (each key's
        keydown carries its text; ``\r`` is the Enter key)."""
        for ch in text:
            down: dict[str, Any] = {"type": "keyDown", "text": ch, "unmodifiedText": ch, "key": ch}
            if ch == "\r":
                down |= {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13}
            await self.send("Input.dispatchKeyEvent", down)
            await self.send("Input.dispatchKeyEvent", {"type": "keyUp", "key": down["key"]})

    def request_urls(self) -> list[str]:
        """Every URL the page asked for (requests, WebSockets), without fragments."""
        urls = []
        for event in self.events:
            if event.get("method") == "Network.requestWillBeSent":
                urls.append(event["params"]["request"]["url"])
            elif event.get("method") == "Network.webSocketCreated":
                urls.append(event["params"]["url"])
        return urls

    async def screenshot(self, path: Path) -> None:
        shot = await self.send("Page.captureScreenshot", {"format": "png"})
        await trio.Path(path).write_bytes(base64.b64decode(shot["data"]))

    async def close(self) -> None:
        self.browser.pages.pop(self.session, None)
        await self.browser.send("Target.closeTarget", {"targetId": self.target_id})


@asynccontextmanager
async def open_browser(chromium: ChromiumProcess) -> AsyncIterator[Browser]:
    """A DevTools connection to ``chromium`` for one test; its pages are closed after."""
    async with (
        open_websocket_url(chromium.ws_url, max_message_size=64 * 2**20) as ws,
        trio.open_nursery() as nursery,
    ):
        browser = Browser(ws)
        nursery.start_soon(browser._read)
        try:
            yield browser
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                for page in list(browser.pages.values()):
                    await page.close()
            nursery.cancel_scope.cancel()
