"""The viewer page in a real browser: headless Chromium over the DevTools protocol.

Each case serves a real host (bash terminals on real ptys) with ``serve_host`` on port
0, opens the page the server prints (the token in its fragment) in one browser shared by
the module (:mod:`tests.cdp`), and checks what a person would see: the page's own text
(xterm.js's DOM), its lists and buttons. Python clients (``ahp.client``) play the agent
and the other viewers. The module skips only when ``/usr/bin/chromium`` is missing
(``.ci/run`` installs it).
"""

from __future__ import annotations

import json
import re
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
from ahp.protocol import ClientClaim, SessionClaim, TerminalClaimed
from ahp.protocol.dialect import Dialect, state_json
from ahp.protocol.state import ROOT_URI
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
        assert self.sidecar.page_url is not None
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


async def open_page(browser: Browser, url: str | None) -> Page:
    assert url is not None
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
        ws_origin = s.origin.replace("http://", "ws://")
        assert [u for u in urls if u.startswith("ws")] == [ws_origin + "/"], urls
        assert all(u.startswith((s.origin + "/", ws_origin + "/")) for u in urls), urls
        # The token was never in a request line (the fragment stays in the browser; the
        # WebSocket offers it as a subprotocol).
        assert s.sidecar.token is not None
        assert not [u for u in urls if s.sidecar.token in u], urls
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


async def agent_terminal(agent: Any, uri: str = "ahp-terminal:/work") -> None:
    """A terminal held by the agent's session (as a tool call holds one)."""
    await agent.create_terminal(uri, claim=AGENT, name=uri.rsplit("/", 1)[1])


async def test_the_commands_panel_lists_a_finished_command_with_its_exit_code(
    chromium: ChromiumProcess,
) -> None:
    async with (
        served() as s,
        open_browser(chromium) as browser,
        connect(s.sidecar.url, client_id="agent") as agent,
    ):
        await agent_terminal(agent)
        page = await open_page(browser, s.sidecar.page_url)
        await page.wait_for("window.ahpViewer.current === 'ahp-terminal:/work'")
        work = agent.terminal("ahp-terminal:/work")
        first = await work.run("echo first-output; (exit 3)", timeout=WAIT)
        assert first.exit_code == 3
        await work.run("seq 1 300", timeout=WAIT)  # (scrolls the first one off the screen)
        failed = await page.wait_for(
            "(() => { const b = document.querySelector('#commands button[data-exit-code=\"3\"]');"
            " return b && b.innerText; })()"
        )
        assert "echo first-output; (exit 3)" in failed and "exit 3" in failed
        ok = await page.wait_for(
            "(() => { const b = document.querySelector('#commands button[data-exit-code=\"0\"]');"
            " return b && b.innerText; })()"
        )
        assert "seq 1 300" in ok and "✓" in ok
        # A running command is marked as running.
        await agent.send_input("ahp-terminal:/work", "sleep 30\r")
        running = await page.wait_for(
            "(() => { const b = document.querySelector('#commands button[data-running=\"true\"]');"
            " return b && b.innerText; })()"
        )
        assert "sleep 30" in running and "running" in running
        # Clicking the first command scrolls to its output.
        assert "first-output" not in await page.evaluate(rows_text())
        await page.evaluate(
            "document.querySelector('#commands button[data-exit-code=\"3\"]').click()"
        )
        await page.wait_for(f"{rows_text()}.includes('first-output')")
        await agent.send_input("ahp-terminal:/work", "\x03")


async def focus_terminal(page: Page) -> None:
    await page.evaluate("window.ahpViewer.term.focus()")


async def test_keystrokes_go_nowhere_while_the_agent_holds_it_and_reach_the_pty_after_take_over(
    chromium: ChromiumProcess,
) -> None:
    async with (
        served() as s,
        open_browser(chromium) as browser,
        connect(s.sidecar.url, client_id="agent") as agent,
    ):
        await agent_terminal(agent)
        terminal = s.host.get("ahp-terminal:/work")
        page = await open_page(browser, s.sidecar.page_url)
        await page.wait_for("window.ahpViewer.current === 'ahp-terminal:/work'")
        await page.wait_for(f"{rows_text()}.includes('$')")  # the prompt
        await focus_terminal(page)
        await page.type_text("echo typed-while-watching\r")
        notice = await page.wait_for("document.getElementById('notice').textContent")
        assert "Watching" in notice
        assert not await page.evaluate("document.getElementById('take-over').hidden")
        await page.evaluate("document.getElementById('take-over').click()")
        held = await page.wait_for(
            "document.getElementById('term-meta').textContent.includes('held by you')"
        )
        assert held
        client_id = await page.evaluate("window.ahpViewer.clientId")
        assert terminal.state.claim == ClientClaim(clientId=client_id)
        # The pty's size follows its new holder (the page's window), not 80x24.
        cols = await page.wait_for(
            "window.ahpViewer.term.cols !== 80 && window.ahpViewer.term.cols"
        )
        await page.wait_for(
            f"window.ahpViewer.client.state(window.ahpViewer.current).cols === {cols}"
        )
        assert terminal.state.cols == cols
        await focus_terminal(page)
        await page.type_text("echo typed-after-$((6*7))\r")
        await page.wait_for(f"{rows_text()}.includes('typed-after-42')")
        assert "typed-while-watching" not in terminal.state.text()
        # A reload of the tab keeps what the page holds and what it replaced (the page
        # showed neither "Take over" nor "Give back" after one).
        await page.send("Page.reload", {})
        await page.wait_for("window.ahpViewer && window.ahpViewer.current === 'ahp-terminal:/work'")
        await page.wait_for(
            "document.getElementById('term-meta').textContent.includes('held by you')"
        )
        # "Give back" restores the claim it replaced: the agent's session.
        assert not await page.evaluate("document.getElementById('give-back').hidden")
        await page.evaluate("document.getElementById('give-back').click()")
        await page.wait_for(
            "document.getElementById('term-meta').textContent"
            ".includes('session ahp-session:/agent-1')"
        )
        given_back = terminal.state  # read again: mypy keeps the claim narrowed from above
        assert given_back.claim == SessionClaim(session=AGENT["session"], chat=AGENT["chat"])


async def test_a_watching_page_never_resizes_the_pty(chromium: ChromiumProcess) -> None:
    async with served() as s, open_browser(chromium) as browser:
        terminal = await s.host.create_terminal("ahp-terminal:/wide", claim=None, cols=200, rows=50)
        page = await browser.new_page(width=700, height=500)  # a small window
        assert s.sidecar.page_url is not None
        await page.goto(s.sidecar.page_url)
        await page.wait_for("window.ahpViewer && window.ahpViewer.current === 'ahp-terminal:/wide'")
        # It shows the holder's size, zoomed out to fit, and leaves the pty alone.
        await page.wait_for(
            "window.ahpViewer.term.cols === 200 && window.ahpViewer.term.rows === 50"
        )
        zoom = await page.evaluate("Number(document.getElementById('screen').style.zoom || 1)")
        assert 0.5 <= zoom < 1
        await term_output(terminal, page, "still-200")
        assert (terminal.state.cols, terminal.state.rows) == (200, 50)


async def term_output(terminal: Any, page: Page, word: str) -> None:
    await terminal.send_input(f"echo {word}\r")
    await page.wait_for(f"{rows_text()}.includes('{word}')")


def normalised(state: dict[str, Any]) -> dict[str, Any]:
    """A terminal state as both sides can be compared (JSON, absent keys dropped)."""
    out: dict[str, Any] = json.loads(json.dumps(state))
    return out


async def test_two_pages_and_a_python_client_converge(chromium: ChromiumProcess) -> None:
    uri = "ahp-terminal:/shared"
    async with (
        served() as s,
        open_browser(chromium) as browser,
        connect(s.sidecar.url, client_id="py") as python,
    ):
        await python.create_terminal(uri, name="shared")
        one = await open_page(browser, s.sidecar.page_url)
        two = await open_page(browser, s.sidecar.page_url)
        for page in (one, two):
            await page.wait_for(f"window.ahpViewer.current === '{uri}'")
        await python.terminal(uri).run("echo from-python", timeout=WAIT)
        # Page one takes over (from the Python client, which holds it: refused), then
        # the Python client lets go and page one takes over and types.
        await one.evaluate("document.getElementById('take-over').click()")
        await one.wait_for("document.getElementById('notice').textContent.includes('refused')")
        await python.dispatch(uri, TerminalClaimed(claim=ClientClaim(clientId="")))
        await one.wait_for(
            "document.getElementById('term-meta').textContent.includes('held by nobody')"
        )
        await one.evaluate("document.getElementById('take-over').click()")
        await one.wait_for(
            "document.getElementById('term-meta').textContent.includes('held by you')"
        )
        await focus_terminal(one)
        await one.type_text("echo from-page-$((1+1))\r")
        await python.wait_for(
            lambda: "from-page-2\r\n" in python.terminal_state(uri).text(), timeout=WAIT
        )
        await python.terminal(uri).run("true", timeout=WAIT)
        # Output may still arrive (a prompt redrawn after the resize): wait until the
        # server, the Python client and both pages hold one and the same state.
        states: list[dict[str, Any]] = []
        with trio.move_on_after(WAIT):
            while True:
                states = [
                    normalised(state_json(s.host.get(uri).state, Dialect.V1)),
                    normalised(state_json(python.terminal_state(uri), Dialect.V1)),
                ]
                for page in (one, two):
                    script = f"window.ahpViewer.client.state('{uri}')"
                    states.append(normalised(await page.evaluate(script) or {}))
                if all(state == states[0] for state in states):
                    break
                await trio.sleep(0.05)
        assert states[1] == states[0]
        assert states[2] == states[0]
        assert states[3] == states[0]
        assert "from-page-2" in json.dumps(states[0]) and "from-python" in json.dumps(states[0])


async def test_the_page_recovers_after_the_server_closes_its_socket(
    chromium: ChromiumProcess,
) -> None:
    async with served() as s, open_browser(chromium) as browser:
        terminal = await s.host.create_terminal("ahp-terminal:/one", name="one")
        hub = s.host.hub
        before = set(hub.subscribers(ROOT_URI))
        page = await open_page(browser, s.sidecar.page_url)
        await page.wait_for("window.ahpViewer.current === 'ahp-terminal:/one'")
        await term_output(terminal, page, "before-drop")
        (outbox,) = set(hub.subscribers(ROOT_URI)) - before
        outbox.close()  # the server closes the page's connection; its record stays
        await terminal.send_input("echo after-$((2*21))\r")
        await page.wait_for("window.ahpViewer.client.connections === 2")
        await page.wait_for(f"{rows_text()}.includes('after-42')")
        client_id = await page.evaluate("window.ahpViewer.clientId")
        record = s.sidecar.state.clients.get(client_id)
        assert record is not None and record.connections == 1  # resumed, not a new one
        # Replayed: nothing lost, nothing twice (once the last output arrived).
        text = ""
        with trio.move_on_after(WAIT):
            while True:
                text = await page.evaluate("window.ahpViewer.text()")
                if text == terminal.state.text():
                    break
                await trio.sleep(0.05)
        assert text == terminal.state.text()
        assert text.count("after-42") == 1


async def test_the_page_comes_back_to_a_restarted_server(chromium: ChromiumProcess) -> None:
    async with open_host(shell="/bin/bash") as host, open_browser(chromium) as browser:
        terminal = await host.create_terminal("ahp-terminal:/one", name="one")
        async with trio.open_nursery() as first:
            sidecar = await first.start(serve_host, host, ServeOptions(port=0))
            page = await open_page(browser, sidecar.page_url)
            await term_output(terminal, page, "first-server")
            first.cancel_scope.cancel()  # every socket closed (1001), every record gone
        await page.wait_for("window.ahpViewer.client.status !== 'open'")
        await terminal.send_input("echo while-away\r")
        async with trio.open_nursery() as second:
            again = ServeOptions(
                port=sidecar.port, token=sidecar.token, read_token=sidecar.read_token
            )
            await second.start(serve_host, host, again)
            await page.wait_for("window.ahpViewer.client.connections === 2")
            await page.wait_for(f"{rows_text()}.includes('while-away')")
            second.cancel_scope.cancel()


CAST = (
    "\n".join(
        [
            json.dumps(
                {
                    "version": 3,
                    "term": {"cols": 60, "rows": 8, "type": "xterm-256color"},
                    "title": "demo",
                }
            ),
            json.dumps([0.05, "o", "$ echo played back\r\n"]),
            json.dumps([0.05, "o", "played-back-from-the-cast\r\n"]),
            json.dumps([0.05, "x", "0"]),
        ]
    )
    + "\n"
)


async def test_a_recording_plays_in_the_page(chromium: ChromiumProcess, tmp_path: Path) -> None:
    (tmp_path / "demo.cast").write_text(CAST)
    async with served(record_dir=str(tmp_path)) as s, open_browser(chromium) as browser:
        page = await browser.new_page()
        await page.send(
            "Page.addScriptToEvaluateOnNewDocument",
            {"source": VIOLATIONS},
        )
        assert s.sidecar.page_url is not None
        await page.goto(s.sidecar.page_url)
        await page.wait_for(
            "document.querySelector('#recordings button[data-recording=\"demo.cast\"]') !== null"
        )
        await page.evaluate(
            "document.querySelector('#recordings button[data-recording=\"demo.cast\"]').click()"
        )
        await page.wait_for(
            "document.getElementById('player').innerText.includes('played-back-from-the-cast')"
        )
        assert await page.evaluate("window.__violations") == []
        # Back to live: the terminal view returns.
        await page.evaluate("document.getElementById('back-to-live').click()")
        await page.wait_for("!document.getElementById('screen').hidden")
        urls = page.request_urls()
        ws_origin = s.origin.replace("http://", "ws://")
        assert all(u.startswith((s.origin + "/", ws_origin + "/")) for u in urls), urls
        assert s.sidecar.token is not None
        assert not [u for u in urls if s.sidecar.token in u], urls


#: Installed before the page's scripts (DevTools scripts are not subject to its CSP).
VIOLATIONS = (
    "window.__violations = [];"
    "document.addEventListener('securitypolicyviolation',"
    " e => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));"
)


async def test_the_read_only_form_cannot_take_over(chromium: ChromiumProcess) -> None:
    async with (
        served() as s,
        open_browser(chromium) as browser,
        connect(s.sidecar.url, client_id="agent") as agent,
    ):
        await agent_terminal(agent)
        terminal = s.host.get("ahp-terminal:/work")
        assert s.sidecar.read_only_url is not None
        page = await open_page(browser, s.sidecar.read_only_url)
        await page.wait_for("window.ahpViewer.current === 'ahp-terminal:/work'")
        assert await page.evaluate("window.ahpViewer.readOnly") is True
        assert not await page.evaluate("document.getElementById('access').hidden")
        assert await page.evaluate("document.getElementById('take-over').hidden")
        await agent.send_input("ahp-terminal:/work", "echo agent-was-here\r")
        await page.wait_for(f"{rows_text()}.includes('agent-was-here')")
        # Even a page that tries (its own script, bypassing the UI) is refused.
        await page.evaluate(
            "window.ahpViewer.client.dispatch('ahp-terminal:/work',"
            " {type: 'terminal/claimed',"
            "  claim: {kind: 'client', clientId: window.ahpViewer.clientId}})"
        )
        await page.evaluate(
            "window.ahpViewer.client.dispatch('ahp-terminal:/work',"
            " {type: 'terminal/input', data: 'echo forced-input\\r'})"
        )
        await agent.send_input("ahp-terminal:/work", "echo agent-again\r")
        await page.wait_for(f"{rows_text()}.includes('agent-again')")
        assert isinstance(terminal.state.claim, SessionClaim)
        assert "forced-input" not in terminal.state.text()
        # The page's keystrokes say why they go nowhere; recordings need the full token.
        await focus_terminal(page)
        await page.type_text("x")
        notice = await page.wait_for("document.getElementById('notice').textContent")
        assert "Read-only" in notice
        note = await page.wait_for("document.getElementById('recordings-note').textContent")
        assert "full token" in note


async def test_chromium_lets_self_cover_the_pages_websocket(
    chromium: ChromiumProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why the policy names ws:// explicitly: CSP 3 lets 'self' match ws: of the same
    host (Chromium does, as this shows); older engines did not."""
    from ahp.server import web

    original = web.content_security_policy
    monkeypatch.setattr(web, "content_security_policy", lambda host, tls=False: original(None))
    async with served() as s, open_browser(chromium) as browser:
        page = await browser.new_page()
        await page.send("Page.addScriptToEvaluateOnNewDocument", {"source": VIOLATIONS})
        assert s.sidecar.page_url is not None
        await page.goto(s.sidecar.page_url)
        await page.wait_for("window.ahpViewer && window.ahpViewer.client.status === 'open'")
        assert await page.evaluate("window.__violations") == []


async def test_a_page_that_falls_behind_takes_a_fresh_snapshot(chromium: ChromiumProcess) -> None:
    async with served() as s, open_browser(chromium) as browser:
        terminal = await s.host.create_terminal("ahp-terminal:/flood", name="flood")
        page = await open_page(browser, s.sidecar.page_url)
        await term_output(terminal, page, "ready")
        await page.evaluate("window.ahpViewer.setWriteBound(2000)")  # (instead of 8 Mi)
        await terminal.send_input("seq 1 40000; echo flood-$((3*7))-done\r")
        await page.wait_for("window.ahpViewer.resyncs >= 1")
        await page.wait_for(f"{rows_text()}.includes('flood-21-done')")
        # Whatever it dropped, it ends with the server's state.
        text = ""
        with trio.move_on_after(WAIT):
            while True:
                text = await page.evaluate("window.ahpViewer.text()")
                if text == terminal.state.text():
                    break
                await trio.sleep(0.05)
        assert text == terminal.state.text()


async def test_screen_reader_mode_puts_the_text_in_an_accessibility_tree(
    chromium: ChromiumProcess,
) -> None:
    async with served() as s, open_browser(chromium) as browser:
        terminal = await s.host.create_terminal("ahp-terminal:/a11y", name="a11y")
        page = await open_page(browser, s.sidecar.page_url)
        await page.evaluate("document.getElementById('screen-reader').click()")
        await term_output(terminal, page, "read-me-aloud")
        tree = await page.wait_for(
            "(() => { const t = document.querySelector('#screen .xterm-accessibility-tree');"
            " return t && t.innerText.includes('read-me-aloud') && t.innerText; })()"
        )
        assert "read-me-aloud" in tree
        await page.evaluate("document.getElementById('screen-reader').click()")  # (and off)


async def test_a_recording_made_by_serve_record_plays_in_the_page(
    chromium: ChromiumProcess, tmp_path: Path
) -> None:
    async with served(record_dir=str(tmp_path)) as s, open_browser(chromium) as browser:
        terminal = await s.host.create_terminal("ahp-terminal:/rec", name="rec")
        await terminal.run("echo recorded-$((5*5))", timeout=WAIT)
        page = await open_page(browser, s.sidecar.page_url)
        name = await page.wait_for(
            "(() => { const b = document.querySelector('#recordings button[data-recording]');"
            " return b && b.dataset.recording; })()"
        )
        assert name.endswith("-rec.cast") and (tmp_path / name).exists()
        await page.evaluate(
            f"document.querySelector('#recordings button[data-recording=\"{name}\"]').click()"
        )
        await page.wait_for("document.getElementById('player').innerText.includes('recorded-25')")


async def test_a_disposed_terminal_leaves_the_page(chromium: ChromiumProcess) -> None:
    async with (
        served() as s,
        open_browser(chromium) as browser,
        connect(s.sidecar.url, client_id="agent") as agent,
    ):
        await agent.create_terminal("ahp-terminal:/a", name="a")
        page = await open_page(browser, s.sidecar.page_url)
        await page.wait_for("window.ahpViewer.current === 'ahp-terminal:/a'")
        await agent.create_terminal("ahp-terminal:/b", name="b")
        await page.wait_for("document.querySelectorAll('#terminals button[data-uri]').length === 2")
        await agent.dispose_terminal("ahp-terminal:/a")
        # The page drops it and opens the one left.
        await page.wait_for("window.ahpViewer.current === 'ahp-terminal:/b'")
        notice = await page.evaluate("document.getElementById('notice').textContent")
        assert "disposed" in notice
        assert await page.evaluate("document.querySelectorAll('#terminals button').length") == 1


async def test_a_long_title_and_an_encoded_cwd_show_as_a_person_reads_them(
    chromium: ChromiumProcess, tmp_path: Path
) -> None:
    # A 3,000-character title (any program sets one) made the page 46,719 px wide and
    # pushed "Take over" off it; the cwd showed percent-encoded ("my%20dir/caf%C3%A9").
    cwd = tmp_path / "my dir" / "café"
    cwd.mkdir(parents=True)
    async with (
        served() as s,
        open_browser(chromium) as browser,
        connect(s.sidecar.url, client_id="agent") as agent,
    ):
        await agent.create_terminal("ahp-terminal:/work", claim=AGENT, name="work", cwd=str(cwd))
        await agent.send_input("ahp-terminal:/work", "printf '\\033]0;%03000d\\007' 7\r")
        page = await open_page(browser, s.sidecar.page_url)
        await page.wait_for("window.ahpViewer.current === 'ahp-terminal:/work'")
        await page.wait_for("document.getElementById('term-title').textContent.length >= 3000")
        meta = await page.wait_for(
            "document.getElementById('term-meta').textContent.includes('café') &&"
            " document.getElementById('term-meta').textContent"
        )
        assert "my dir/café" in meta and "%20" not in meta, meta
        right = await page.evaluate(
            "document.getElementById('take-over').getBoundingClientRect().right"
        )
        width = await page.evaluate("document.documentElement.clientWidth")
        scroll = await page.evaluate("document.documentElement.scrollWidth")
        assert 0 < right <= width and scroll <= width, (right, width, scroll)


async def test_the_commands_panel_lists_the_newest_commands_and_counts_the_rest(
    chromium: ChromiumProcess,
) -> None:
    # The panel was rebuilt whole at every command: 3,000 commands stalled the page.
    async with (
        served() as s,
        open_browser(chromium) as browser,
        connect(s.sidecar.url, client_id="agent") as agent,
    ):
        await agent_terminal(agent)
        page = await open_page(browser, s.sidecar.page_url)
        await page.wait_for("window.ahpViewer.current === 'ahp-terminal:/work'")
        await agent.send_input("ahp-terminal:/work", "true\r" * 209 + "echo last-one\r")
        note = await page.wait_for(
            "(() => { const n = document.getElementById('earlier-commands');"
            " return n && n.textContent.startsWith('10 ') && n.textContent; })()",
        )
        assert note == "10 earlier commands not listed", note
        listed = await page.evaluate("document.querySelectorAll('#commands button').length")
        assert listed == 200
        newest = await page.wait_for(
            "(() => { const b = [...document.querySelectorAll('#commands button')].at(-1);"
            " return b && b.innerText.includes('echo last-one') && b.innerText; })()"
        )
        assert "echo last-one" in newest


async def test_recordings_of_terminals_created_in_quick_succession_are_all_listed(
    chromium: ChromiumProcess, tmp_path: Path
) -> None:
    # The list reloaded at most every 2 s and dropped the reload asked for within them:
    # a terminal created right after another was never listed.
    async with served(record_dir=str(tmp_path)) as s, open_browser(chromium) as browser:
        await s.host.create_terminal("ahp-terminal:/first", name="first")
        page = await open_page(browser, s.sidecar.page_url)
        await page.wait_for("document.querySelector('#recordings button[data-recording]') !== null")
        for name in ("second", "third"):
            await s.host.create_terminal(f"ahp-terminal:/{name}", name=name)
        names = await page.wait_for(
            "(() => { const n = [...document.querySelectorAll('#recordings button')]"
            ".map(b => b.dataset.recording); return n.length >= 3 && n; })()"
        )
        assert sorted(n.rsplit("-", 1)[1] for n in names) == [
            "first.cast",
            "second.cast",
            "third.cast",
        ]


async def test_a_page_with_a_refused_token_says_so(chromium: ChromiumProcess) -> None:
    # The server answered every upgrade 403; the page said "disconnected: reconnecting"
    # for ever (a browser hides why an upgrade failed).
    async with served() as s, open_browser(chromium) as browser:
        assert s.sidecar.page_url is not None and s.sidecar.token is not None
        page = await browser.new_page()
        await page.goto(s.sidecar.page_url.replace(s.sidecar.token, "not-the-token"))
        badge = await page.wait_for(
            "(() => { const t = document.getElementById('connection').textContent;"
            " return t.startsWith('refused') && t; })()"
        )
        assert badge == (
            "refused: this server does not accept the page's token (#tkn= or #ro= in its address)"
        )
        # Probe P: the bare page URL (serve with $AHP_TOKEN_FILE prints it) said the same,
        # though the page had no token; it now says what to add.
        bare = await browser.new_page()
        await bare.goto(s.sidecar.page_url.split("#", 1)[0])
        badge = await bare.wait_for(
            "(() => { const t = document.getElementById('connection').textContent;"
            " return t.startsWith('refused') && t; })()"
        )
        assert badge == (
            "refused: this page has no token: "
            "add #tkn=TOKEN (or #ro=READ-ONLY-TOKEN) to its address"
        )
        # The page's own token is told apart, full or read-only, by the same endpoint.
        for url, kind in ((s.sidecar.page_url, "full"), (s.sidecar.read_only_url, "read-only")):
            good = await browser.new_page()
            assert url is not None
            await good.goto(url)
            await good.wait_for("window.ahpViewer && window.ahpViewer.client.status === 'open'")
            answer = await good.evaluate(
                "fetch('/api/access', {headers: {Authorization: "
                "`Bearer ${JSON.parse(sessionStorage.getItem('ahp-access')).token}`}})"
                ".then(r => r.json()).then(j => j.access)"
            )
            assert answer == kind


async def test_a_page_whose_scripts_fail_to_load_says_so(chromium: ChromiumProcess) -> None:
    # A module whose import is cut off runs nothing: the badge said "connecting…" for
    # ever (probe K, a slow link). The browser itself refuses the request here.
    async with served() as s, open_browser(chromium) as browser:
        assert s.sidecar.page_url is not None
        page = await browser.new_page()
        await page.send("Network.enable")
        await page.send("Network.setBlockedURLs", {"urls": ["*/static/vendor/xterm/xterm.mjs"]})
        await page.goto(s.sidecar.page_url)
        badge = await page.wait_for(
            "(() => { const t = document.getElementById('connection').textContent;"
            " return t.startsWith('failed') && t; })()"
        )
        assert badge == "failed: the page's scripts did not load (reload to try again)"
        assert await page.evaluate("window.ahpViewerStarted === undefined")
        # The same page with its scripts: the check stays silent.
        good = await open_page(browser, s.sidecar.page_url)
        assert await good.evaluate("document.getElementById('connection').textContent") == "live"


# -- terminal queries: the page answers live ones when it may type, never history's --------

#: What a TUI asks its terminal at start: DA1, CPR, the background colour (OSC 11), DA2,
#: DECRQM, DECRQSS, the foreground colour, and DECSET 1004 (xterm.js reports the focus
#: at once). xterm.js 6 answers each of them through ``onData``, as it does keystrokes.
QUERIES = (
    r"\033[c\033[6n\033]11;?\007\033[>c\033[?2004$p\033P$qm\033\\"
    r"\033]10;?\033\\\033[?1004h\033[5n\033[?1004l"
)


def page_input(log: Path, client_id: str) -> str:
    """Everything the page typed into its terminals, as the audit log holds it."""
    typed = ""
    if log.exists():
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "input" and event.get("by") == client_id:
                typed += event.get("text") or ""
    return typed


async def wait_for_input(log: Path, client_id: str, part: str) -> str:
    with trio.fail_after(WAIT):
        while True:
            typed = page_input(log, client_id)
            if part in typed:
                return typed
            await trio.sleep(0.05)


async def take_over(page: Page) -> None:
    await page.evaluate("document.getElementById('take-over').click()")
    await page.wait_for("document.getElementById('term-meta').textContent.includes('held by you')")


async def test_a_holding_page_types_nothing_for_the_queries_in_a_terminals_history(
    chromium: ChromiumProcess, tmp_path: Path
) -> None:
    # xterm.js answered the queries it parsed in the snapshot (vim, fzf, ipython ask at
    # start) through onData, and a holding page sent the answers as input: "^[[?1;2c"
    # typed at the prompt, or into the program running.
    log = tmp_path / "audit.log"
    async with (
        served(audit_log=str(log), audit_input=True) as s,
        open_browser(chromium) as browser,
        connect(s.sidecar.url, client_id="agent") as agent,
    ):
        await agent_terminal(agent)
        work = agent.terminal("ahp-terminal:/work")
        await work.run(f"printf '{QUERIES}'; echo asked-$((6*7))", timeout=WAIT)
        await work.run("seq 1 30000", timeout=WAIT)  # (a history that takes a while to draw)
        await work.run(f"printf '{QUERIES}'; echo asked-$((6*7))-again", timeout=WAIT)
        page = await open_page(browser, s.sidecar.page_url)
        await page.wait_for(f"{rows_text()}.includes('asked-42-again')")
        # Watching, it says nothing about keystrokes: none were pressed.
        assert await page.evaluate("document.getElementById('notice').textContent") == ""
        await take_over(page)
        client_id = await page.evaluate("window.ahpViewer.clientId")
        # Reloaded, the page holds the terminal while it writes the history again; what
        # is typed at once (maybe while the history is still drawn) reaches the shell.
        await page.send("Page.reload", {})
        await page.wait_for("window.ahpViewer && window.ahpViewer.current === 'ahp-terminal:/work'")
        await page.wait_for(
            "document.getElementById('term-meta').textContent.includes('held by you')"
        )
        await focus_terminal(page)
        await page.type_text("echo typed-$((7*6))\r")
        typed = await wait_for_input(log, client_id, "\r")
        assert typed == "echo typed-$((7*6))\r", typed
        await page.wait_for(f"{rows_text()}.includes('typed-42')")
        # xterm.js did answer the history's questions (9 answers each time): the page
        # sent none.
        answers = await page.evaluate("window.ahpViewer.queryAnswers")
        assert answers["sent"] == 0 and answers["dropped"] >= 18, answers
        # Switching terminals and back writes the history again: still nothing typed.
        await agent.create_terminal("ahp-terminal:/other", name="other")
        await page.evaluate("window.ahpViewer.openTerminal('ahp-terminal:/other')")
        await page.wait_for("window.ahpViewer.current === 'ahp-terminal:/other'")
        await page.evaluate("window.ahpViewer.openTerminal('ahp-terminal:/work')")
        await page.wait_for(f"{rows_text()}.includes('typed-42')")
        await focus_terminal(page)
        await page.type_text("echo after-$((2+3))\r")
        await page.wait_for(f"{rows_text()}.includes('after-5')")
        typed = await wait_for_input(log, client_id, "3))\r")
        assert typed == "echo typed-$((7*6))\recho after-$((2+3))\r", typed
        assert await page.evaluate("document.getElementById('notice').textContent") == ""


async def test_a_watching_page_is_silent_when_a_live_program_asks(
    chromium: ChromiumProcess,
) -> None:
    # xterm.js's answer to a live query looked like a keystroke: a watching page showed
    # "Watching: keystrokes go nowhere" though nobody pressed a key.
    async with (
        served() as s,
        open_browser(chromium) as browser,
        connect(s.sidecar.url, client_id="agent") as agent,
    ):
        await agent_terminal(agent)
        page = await open_page(browser, s.sidecar.page_url)
        await page.wait_for("window.ahpViewer.current === 'ahp-terminal:/work'")
        await page.wait_for(f"{rows_text()}.includes('$')")
        await agent.send_input("ahp-terminal:/work", f"printf '{QUERIES}'; echo asked-$((6*7))\r")
        await page.wait_for(f"{rows_text()}.includes('asked-42')")
        await agent.send_input("ahp-terminal:/work", "echo later-$((1+1))\r")
        await page.wait_for(f"{rows_text()}.includes('later-2')")
        assert await page.evaluate("document.getElementById('notice').textContent") == ""
        answers = await page.evaluate("window.ahpViewer.queryAnswers")
        assert answers == {"sent": 0, "dropped": 9}, answers
        # A key pressed still says where it goes.
        await focus_terminal(page)
        await page.type_text("x")
        notice = await page.wait_for("document.getElementById('notice').textContent")
        assert "Watching" in notice


async def test_a_holding_page_answers_a_live_query_once(
    chromium: ChromiumProcess, tmp_path: Path
) -> None:
    # The program waits for the answer now: the page that may type gives it, once; a
    # second page, watching, does not.
    log = tmp_path / "audit.log"
    async with (
        served(audit_log=str(log), audit_input=True) as s,
        open_browser(chromium) as browser,
        connect(s.sidecar.url, client_id="agent") as agent,
    ):
        await agent_terminal(agent)
        holder = await open_page(browser, s.sidecar.page_url)
        watcher = await open_page(browser, s.sidecar.page_url)
        for page in (holder, watcher):
            await page.wait_for("window.ahpViewer.current === 'ahp-terminal:/work'")
        await take_over(holder)
        await watcher.wait_for(
            "document.getElementById('term-meta').textContent.includes('held by client')"
        )
        holder_id = await holder.evaluate("window.ahpViewer.clientId")
        watcher_id = await watcher.evaluate("window.ahpViewer.clientId")
        program = (
            "printf '\\033[6n'; IFS= read -rs -t 20 -d R ans;"
            ' echo "got:${ans#?}:$((40+2))"; echo end-$((6*7))\r'
        )
        await agent.send_input("ahp-terminal:/work", program)
        # (Read from the agent's mirror: a page in a background tab may not draw.)
        pattern = re.compile(r"got:\[(\d+);(\d+):42\r\n")
        await agent.wait_for(
            lambda: pattern.search(agent.terminal_state("ahp-terminal:/work").text()) is not None,
            timeout=WAIT,
        )
        got = pattern.search(agent.terminal_state("ahp-terminal:/work").text())
        assert got is not None
        answer = await wait_for_input(log, holder_id, "R")
        assert answer == f"\x1b[{got[1]};{got[2]}R", answer
        # Nothing more was typed: a second answer would be at the prompt now.
        await agent.send_input("ahp-terminal:/work", "echo marker-$((2*21))\r")
        await agent.wait_for(
            lambda: "marker-42\r\n" in agent.terminal_state("ahp-terminal:/work").text(),
            timeout=WAIT,
        )
        assert page_input(log, holder_id) == answer
        assert page_input(log, watcher_id) == ""
        await watcher.wait_for(  # (parsed by the watcher too: a background tab is slower)
            "window.ahpViewer.text().includes('marker-42') && window.ahpViewer.pendingWrites === 0"
        )
        for page in (holder, watcher):
            assert await page.evaluate("document.getElementById('notice').textContent") == ""
        assert await holder.evaluate("window.ahpViewer.queryAnswers") == {"sent": 1, "dropped": 0}
        assert await watcher.evaluate("window.ahpViewer.queryAnswers") == {"sent": 0, "dropped": 1}
