"""Issue 22, item 4: the client's receive path after the split (session + transport).

One process: an in-process sidecar and one ``ahp.client`` on loopback; the terminal
prints 2,000,000 lines (``seq``, about 15 MB) and the client's mirror follows until the
end marker. Time it as a whole process against a tree from before the split, the two
alternated, e.g.::

    git archive 0bc5e88 ahp | tar -x -C /tmp/f22-old
    b=benchmarks/bench_client_split.py
    for i in 1 2 3 4 5 6 7; do
        /usr/bin/time -f "B %e s %U+%S cpu" env PYTHONPATH=/tmp/f22-old python $b
        /usr/bin/time -f "A %e s %U+%S cpu" env PYTHONPATH=. python $b
    done
"""

import trio

import ahp
from ahp.client import connect
from ahp.server import ServeOptions, serve_host

LINES = 2_000_000
URI = "ahp-terminal:/b"


async def main() -> None:
    async with ahp.open_host(shell="/bin/bash") as host, trio.open_nursery() as nursery:
        sidecar = await nursery.start(serve_host, host, ServeOptions(port=0, token="t"))
        async with connect(sidecar.url) as client:
            await client.create_terminal(URI)
            # (The marker is split in the command line so that its echo does not match.)
            await client.send_input(URI, f"seq 1 {LINES}; echo DO''NE\r")
            await client.wait_for(
                lambda: "DONE" in client.terminal_state(URI).tail(200), timeout=300
            )
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main)
