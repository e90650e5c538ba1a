"""
`sbx.terminal()`: a PTY in a sandbox over the `/terminal` WebSocket, with a WebSocket client
written on the standard library (RFC 6455: the handshake, masked client frames, fragmented and
control frames). Binary frames are the terminal's bytes both ways; text frames are JSON control
messages, `{"type": "resize", "cols", "rows"}` out and `{"type": "exit", "code"}` in. The key
travels in `?token=`, the one place the API accepts it in a URL.

Unlike a browser's WebSocket, the handshake's answer is read here: a refusal (401, 403, 404,
409 when the sandbox is not running) is raised as the API's own SvcError.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import ssl
import struct
import threading
from types import TracebackType
from typing import Iterator, List, Optional, Type, Union

from ._http import Http, SvcError, check_int, error_of_body, unreachable

__all__ = ["Terminal"]

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_CONT, _TEXT, _BINARY, _CLOSE, _PING, _PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def _mask(payload: bytes, key: bytes) -> bytes:
    n = len(payload)
    if n == 0:
        return payload
    repeated = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(n, "big")


class Terminal:
    """
    An open terminal: `write` keys, `resize`, `read` (or iterate over) its output bytes, `wait`
    for the shell's exit code, `close`. Use it as a context manager to close it at the end.
    """

    def __init__(self, sock: socket.socket, buffered: bytes) -> None:
        self._sock = sock
        self._buffer = bytearray(buffered)
        self._send_lock = threading.Lock()
        self._closed = False
        #: The shell's exit code once the server said it.
        self.exit_code: Optional[int] = None
        #: The close frame's code and reason once the connection closed.
        self.close_code: Optional[int] = None
        self.close_reason = ""
        #: What `wait` read.
        self.output: List[bytes] = []

    # -----------------------------------------------------------------------------------------
    # Frames

    def _send(self, opcode: int, payload: bytes) -> None:
        n = len(payload)
        header = bytes([0x80 | opcode])
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack("!Q", n)
        key = os.urandom(4)
        with self._send_lock:
            try:
                self._sock.sendall(header + key + _mask(payload, key))
            except OSError as error:
                raise SvcError(0, "terminal_closed", f"the terminal's connection is closed: {error!r}") from None

    def _recv_exact(self, n: int) -> bytes:
        # Bytes received stay in the buffer across a timeout: the next read resumes the frame.
        while len(self._buffer) < n:
            piece = self._sock.recv(max(65536, n - len(self._buffer)))
            if not piece:
                raise ConnectionResetError("the connection closed")
            self._buffer += piece
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    def _frame(self) -> "tuple[bool, int, bytes]":
        first, second = self._recv_exact(2)
        n = second & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", self._recv_exact(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", self._recv_exact(8))
        key = self._recv_exact(4) if second & 0x80 else b""
        payload = self._recv_exact(n)
        return bool(first & 0x80), first & 0x0F, _mask(payload, key) if key else payload

    # -----------------------------------------------------------------------------------------
    # The terminal

    def write(self, data: Union[str, bytes]) -> None:
        """Sends keys (text as UTF-8, or bytes) to the terminal."""
        if not isinstance(data, (str, bytes)):
            raise SvcError(0, "invalid_argument", "data: must be str or bytes")
        self._send(_BINARY, data.encode("utf-8") if isinstance(data, str) else data)

    def resize(self, cols: int, rows: int) -> None:
        """Tells the PTY its new size."""
        check_int(cols, "cols", low=1)
        check_int(rows, "rows", low=1)
        self._send(_TEXT, json.dumps({"type": "resize", "cols": cols, "rows": rows}).encode())

    def read(self, timeout: Optional[float] = None) -> bytes:
        """
        The terminal's next bytes as they come; b"" once the connection closed (then `exit_code`
        says how the shell ended). `timeout`: a SvcError `timeout` when nothing came within it.
        """
        if self._closed:
            return b""
        self._sock.settimeout(timeout)
        message = bytearray()
        message_opcode = 0
        try:
            while True:
                fin, opcode, payload = self._frame()
                if opcode == _PING:
                    self._send(_PONG, payload)
                    continue
                if opcode == _PONG:
                    continue
                if opcode == _CLOSE:
                    if len(payload) >= 2:
                        (self.close_code,) = struct.unpack("!H", payload[:2])
                        self.close_reason = payload[2:].decode("utf-8", "replace")
                    self._finish(reply=True)
                    return b""
                if opcode != _CONT:
                    message_opcode = opcode
                message += payload
                if not fin:
                    continue
                if message_opcode == _TEXT:
                    try:
                        control = json.loads(message.decode("utf-8"))
                    except ValueError:
                        control = None  # not a control message of the contract: ignored
                    if isinstance(control, dict) and control.get("type") == "exit" and isinstance(control.get("code"), int):
                        self.exit_code = control["code"]
                    message = bytearray()
                    continue
                if message:
                    return bytes(message)
        except socket.timeout:
            raise SvcError(0, "timeout", f"no terminal output within {timeout:g} s") from None
        except OSError:
            self._finish(reply=False)
            return b""

    def __iter__(self) -> Iterator[bytes]:
        while True:
            data = self.read()
            if data == b"":
                return
            yield data

    def wait(self, timeout: Optional[float] = 300.0) -> int:
        """
        Reads on until the shell ends; its exit code. The output read meanwhile is appended to
        `output` (use `read` to see it as it comes). `timeout`: the longest silence waited
        through (a SvcError `timeout`). A SvcError `terminal_closed` if the connection closed
        before the shell exited.
        """
        for data in self._drain(timeout):
            self.output.append(data)
        if self.exit_code is None:
            raise SvcError(
                0,
                "unauthenticated" if self.close_code == 4401 else "terminal_closed",
                f"the terminal closed before its shell exited ({self.close_code or 'no code'} {self.close_reason})".strip(),
                {"close_code": self.close_code, "reason": self.close_reason},
            )
        return self.exit_code

    def _drain(self, timeout: Optional[float]) -> Iterator[bytes]:
        while True:
            data = self.read(timeout)
            if data == b"":
                return
            yield data

    def _finish(self, reply: bool) -> None:
        if self._closed:
            return
        self._closed = True
        if reply:
            try:
                self._send(_CLOSE, struct.pack("!H", 1000))
            except SvcError:
                pass
        self._sock.close()

    def close(self) -> None:
        """Closes it (the shell is ended by the server)."""
        if self._closed:
            return
        try:
            self._send(_CLOSE, struct.pack("!H", 1000) + b"closed by the client")
        except SvcError:
            pass
        self._closed = True
        self._sock.close()

    def __enter__(self) -> Terminal:
        return self

    def __exit__(
        self, kind: Optional[Type[BaseException]], error: Optional[BaseException], trace: Optional[TracebackType]
    ) -> None:
        self.close()


def open_terminal(http: Http, sandbox_id: str, cols: int, rows: int, timeout: Optional[float]) -> Terminal:
    """Opens a terminal in a sandbox; the handshake's refusal is raised as the API's SvcError."""
    check_int(cols, "cols", low=1)
    check_int(rows, "rows", low=1)
    target, host = http.socket_url("/terminal", {"sandbox_id": sandbox_id, "cols": cols, "rows": rows})
    wait = timeout if timeout is not None else http.timeout
    try:
        sock: socket.socket = socket.create_connection((http.host, http.port), timeout=wait)
        if http.scheme == "https":
            context = http.ssl_context or ssl.create_default_context()
            sock = context.wrap_socket(sock, server_hostname=http.host)
    except OSError as error:
        raise unreachable(http.api_url, error) from None
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET {target} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nUser-Agent: svc-sdk-python\r\n\r\n"
    )
    try:
        sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            piece = sock.recv(65536)
            if not piece:
                raise ConnectionResetError("the connection closed during the handshake")
            head += piece
            if len(head) > 1 << 20:
                raise ConnectionResetError("the handshake's answer is too long")
        head, rest = head.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        if status != 101:
            length = int(headers.get("content-length", "0") or 0)
            while len(rest) < length:
                piece = sock.recv(65536)
                if not piece:
                    break
                rest += piece
            sock.close()
            raise error_of_body(status, rest[:length] if length else rest)
        accept = base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()
        if headers.get("sec-websocket-accept") != accept:
            sock.close()
            raise SvcError(0, "unexpected_response", "the terminal's handshake answer is not a WebSocket's")
    except socket.timeout:
        sock.close()
        raise SvcError(0, "timeout", f"the terminal did not open within {wait:g} s") from None
    except (OSError, ValueError, IndexError) as error:
        sock.close()
        raise SvcError(0, "network_error", f"the terminal's handshake failed: {error!r}") from None
    return Terminal(sock, rest)
