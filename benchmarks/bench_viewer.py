"""What a person sees in the viewer page, timed in headless Chromium (issue 21).

    python benchmarks/bench_viewer.py [--loads 10] [--keys 40] [--lines 200000]

One host (bash) and sidecar in the process, one Chromium (``tests/cdp.py``). Measured in
the page itself (``performance.now()``), so no clock is shared between processes:

- **load**: from navigation to the terminal's snapshot parsed by xterm.js (the page
  loaded, its WebSocket initialized, the terminal subscribed), ``--loads`` fresh tabs;
- **keystroke echo**: the page holds the terminal, dispatches ``echo kN`` + Enter and
  waits until xterm.js has written the output line (``--keys`` round trips: page →
  server → pty → bash → server → page → xterm.js parse);
- **flood**: ``seq 1 LINES`` typed by the page, until the last number is in xterm.js's
  buffer (the server's bytes, the page's parse and render).

Figures are medians and the 90th percentile; on a shared 2-core machine they vary with
the load, so read them as orders of magnitude.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ahp.engine import open_host
from ahp.server import ServeOptions, serve_host
from tests.cdp import ChromiumProcess, open_browser


def _quantiles(values: list[float]) -> str:
    values = sorted(values)
    p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
    return f"median {statistics.median(values):.1f} ms, p90 {p90:.1f} ms (n={len(values)})"


async def main(loads: int, keys: int, lines: int, chromium: ChromiumProcess) -> None:
    async with open_host(shell="/bin/bash") as host, trio.open_nursery() as nursery:
        sidecar = await nursery.start(serve_host, host, ServeOptions(port=0))
        assert sidecar.page_url is not None
        await host.create_terminal("ahp-terminal:/bench", name="bench")
        async with open_browser(chromium) as browser:
            load_ms: list[float] = []
            for _ in range(loads):
                page = await browser.new_page()
                await page.goto(sidecar.page_url)
                load_ms.append(
                    await page.wait_for("window.ahpViewer && window.ahpViewer.firstDrawAt")
                )
                await page.close()
            page = await browser.new_page()
            await page.goto(sidecar.page_url)
            await page.wait_for("window.ahpViewer && window.ahpViewer.current !== null")
            await page.evaluate("document.getElementById('take-over').click()")
            await page.wait_for(
                "document.getElementById('term-meta').textContent.includes('held by you')"
            )
            await page.send("Page.bringToFront")
            echo = await page.evaluate(
                f"""(async () => {{
                  const v = window.ahpViewer, uri = v.current, out = [];
                  const tail = (n) => {{ const b = v.term.buffer.active; let s = '\\n';
                    const end = b.baseY + b.cursorY;  // (the screen may be taller than its text)
                    for (let i = Math.max(0, end - n); i <= end; i++)
                      s += b.getLine(i).translateToString(true) + '\\n';
                    return s; }};
                  // Resolves once xterm.js has parsed output holding the line.
                  const shown = (line, n) => new Promise((resolve) => {{
                    const done = v.term.onWriteParsed(() => {{
                      if (tail(n).includes('\\n' + line + '\\n')) {{ done.dispose(); resolve(); }}
                    }});
                  }});
                  for (let i = 0; i < {keys}; i++) {{
                    const want = 'k' + i + '-' + (i * 7);
                    const seen = shown(want, 30);
                    const t0 = performance.now();
                    v.client.dispatch(uri, {{type: 'terminal/input',
                                             data: 'echo k' + i + '-$((' + i + '*7))\\r'}});
                    await seen;
                    out.push(performance.now() - t0);
                  }}
                  const seen = shown('flood-done', 40);
                  const t0 = performance.now();
                  v.client.dispatch(uri, {{type: 'terminal/input',
                                           data: 'seq 1 {lines}; echo flood-done\\r'}});
                  await seen;
                  return [out, performance.now() - t0]; }})()"""
            )
            echo, flood = echo
        nursery.cancel_scope.cancel()
    size = sum(len(str(n)) + 1 for n in range(1, lines + 1))
    print(f"load to live:      {_quantiles(load_ms)}")
    print(f"keystroke echo:    {_quantiles(echo)}")
    print(f"flood:             seq 1 {lines} ({size / 1e6:.2f} MB) in {flood:.0f} ms")
    print(f"assets:            {_asset_bytes() / 1024:.0f} KiB (page, scripts, styles)")


def _asset_bytes() -> int:
    root = Path(__file__).resolve().parents[1] / "ahp" / "web" / "static"
    suffixes = (".html", ".js", ".mjs", ".css", ".svg")
    return sum(p.stat().st_size for p in root.rglob("*") if p.suffix in suffixes)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loads", type=int, default=10)
    parser.add_argument("--keys", type=int, default=40)
    parser.add_argument("--lines", type=int, default=200_000)
    args = parser.parse_args()
    os.environ.setdefault("SHELL", "/bin/bash")
    browser = ChromiumProcess()
    try:
        trio.run(main, args.loads, args.keys, args.lines, browser)
    finally:
        browser.close()
