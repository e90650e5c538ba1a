"""
What the tests share: the client of the stack they run against (SVC_API_URL, SVC_API_KEY: the
vitest file test/PythonSdk.test.ts starts a real API, runtime and sandbox host and sets them),
and a small HTTP server on loopback standing in for what may sit between a client and the API
(a proxy answering an HTML error page, a load balancer asking to retry later).
"""

from __future__ import annotations

import http.server
import os
import socket
import threading
import unittest
import urllib.parse
import uuid
from typing import Callable, List, Optional, Tuple

from svc import Svc


def client(**options: object) -> Svc:
    if not os.environ.get("SVC_API_URL") or not os.environ.get("SVC_API_KEY"):
        raise unittest.SkipTest("SVC_API_URL and SVC_API_KEY name the stack to test against")
    return Svc(**options)  # type: ignore[arg-type]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


#: An answer of the stand-in server: (status, headers, body).
Reply = Tuple[int, List[Tuple[str, str]], bytes]


class StandIn:
    """
    A threaded HTTP/1.1 server on 127.0.0.1 whose answers a test scripts (`handler` gets the
    method and path, returns the reply). It records each request and the client port it came
    from (one port per connection).
    """

    def __init__(self, handler: Callable[[str, str], Reply]) -> None:
        self.requests: List[Tuple[str, str, int]] = []
        self.headers: List[dict[str, str]] = []
        self.clients: List[Svc] = []
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                stand_in.requests.append((self.command, self.path, self.client_address[1]))
                stand_in.headers.append({k.lower(): v for k, v in self.headers.items()})
                status, headers, body = handler(self.command, self.path)
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _answer

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # A client that gave up (the timeout test) leaves a broken pipe: not this test's concern.
        self.server.handle_error = lambda request, address: None  # type: ignore[assignment]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def client(self, **options: object) -> Svc:
        """A client of the stand-in (closed with it)."""
        svc = Svc(self.url, "svc_live_secret_value", **options)  # type: ignore[arg-type]
        self.clients.append(svc)
        return svc

    def connections(self) -> int:
        return len({port for _, _, port in self.requests})

    def close(self) -> None:
        for svc in self.clients:
            svc.close()
        self.server.shutdown()
        self.server.server_close()


def json_reply(status: int, body: bytes, extra: Optional[List[Tuple[str, str]]] = None) -> Reply:
    return status, [("Content-Type", "application/json")] + (extra or []), body


class CuttingProxy:
    """
    A TCP relay on 127.0.0.1 to the stack's API whose open connections a test can cut at once
    (`cut()`: both sockets shut), as a dropped network or a restarted load balancer would.
    """

    def __init__(self, target_url: str) -> None:
        parsed = urllib.parse.urlsplit(target_url)
        self._target = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self._sockets: List[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client_socket, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            with self._lock:
                self._sockets += [client_socket, upstream]
            for source, sink in ((client_socket, upstream), (upstream, client_socket)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._listener.close()
        self.cut()
