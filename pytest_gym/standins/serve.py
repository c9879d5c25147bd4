"""Serve one stand-in HTTP server until SIGTERM or Ctrl-C, telling its launcher the port it bound.

The port goes to a file, written atomically, once the socket listens: the launcher waits for that file.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any


def write_port_file(path: str, port: int) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(str(port))
    os.replace(tmp, path)


def serve(server: ThreadingHTTPServer, port_file: str | None, banner: str, name: str, stats: Callable[[], Any]) -> int:
    """Serve until SIGTERM/Ctrl-C; print ``banner`` once listening and ``stats()`` when stopped."""
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    if port_file:
        write_port_file(port_file, server.server_address[1])
    print(banner, flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        print(f"{name} stopped; stats: {json.dumps(stats())}", flush=True)
    return 0
