"""
The transport every resource shares: one configured client of the API (`Http`), the error every
call raises (`SvcError`), and the small helpers the resources check their arguments with. Nothing
here knows a route.

Connections: one `http.client` connection per thread, kept alive and reused by the next call of
that thread (a connection the server closed while idle is noticed before reuse, and a request
that finds it cut is sent once more on a new one). Streams (streamed exec, process output, the
events) take a connection of their own for as long as they are read.
"""

from __future__ import annotations

import email.utils
import http.client
import json as jsonlib
import os
import select
import socket
import ssl
import threading
import time
import urllib.parse
import weakref
from dataclasses import dataclass, field
from typing import IO, Any, Dict, Iterator, List, Mapping, NoReturn, Optional, Tuple, Union

__all__ = ["DEFAULT_API_URL", "SvcError"]

#: Where the API is when neither `api_url` nor `SVC_API_URL` say.
DEFAULT_API_URL = "http://127.0.0.1:8080"
VERSION = "0.1.0"

#: A request body: bytes, text (sent as UTF-8), or a binary file object (streamed).
Body = Union[bytes, bytearray, memoryview, str, IO[bytes]]
QueryValue = Union[str, int, bool, None]


class SvcError(Exception):
    """
    Every failure of a call. `status` is the HTTP status of the API's answer, or 0 when there was
    no answer to give one: `network_error` (the API could not be reached, or the connection was
    cut), `timeout`, `invalid_argument` (refused before sending), `sandbox_error` /
    `template_failed` (what was waited for ended in failure), `unexpected_response` (an answer
    that is not the API's JSON).
    """

    status: int
    code: str
    message: str
    details: Dict[str, Any]

    def __init__(self, status: int, code: str, message: str, details: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = dict(details or {})

    @property
    def issues(self) -> List[Dict[str, str]]:
        """`issues` of an `invalid_request`: each invalid field of the request at once."""
        issues = self.details.get("issues")
        return list(issues) if isinstance(issues, list) else []

    def __str__(self) -> str:
        return f"{self.code} ({self.status}): {self.message}" if self.status else f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"SvcError(status={self.status!r}, code={self.code!r}, message={self.message!r})"


def unreachable(api_url: str, error: BaseException) -> SvcError:
    """The SvcError `network_error` of a request that could not reach the API at `api_url`."""
    return SvcError(0, "network_error", f"cannot reach {api_url}: {error!r}")


def error_of_body(status: int, body: bytes, reason: str = "") -> SvcError:
    """The SvcError of a non-2xx answer: `{error, code, ...details}` when it is the API's JSON."""
    try:
        parsed: Any = jsonlib.loads(body.decode("utf-8"))
    except ValueError:
        parsed = None  # Not the API's JSON (a proxy's page): its start is the message.
    if isinstance(parsed, dict) and isinstance(parsed.get("code"), str):
        details = {k: v for k, v in parsed.items() if k not in ("error", "code")}
        message = parsed.get("error")
        return SvcError(status, parsed["code"], message if isinstance(message, str) else parsed["code"], details)
    text = body[:300].decode("utf-8", "replace").strip()
    return SvcError(
        status,
        f"http_{status}",
        f"HTTP {status} {reason}: the answer is not the API's JSON: {text}" if text else f"HTTP {status} {reason}".strip(),
    )


def invalid(path: str, message: str) -> NoReturn:
    """Refuses an argument before anything is sent (status 0, the API's `issues` shape)."""
    raise SvcError(0, "invalid_argument", f"{path}: {message}", {"issues": [{"path": path, "message": message}]})


def check_str(value: object, path: str, *, required: bool = True, absolute: bool = False) -> None:
    if value is None and not required:
        return
    if not isinstance(value, str) or (required and value == ""):
        invalid(path, f"must be a non-empty string, not {type(value).__name__}")
    if absolute and not value.startswith("/"):
        invalid(path, "must be an absolute path")


def check_int(value: object, path: str, *, required: bool = True, low: Optional[int] = None) -> None:
    if value is None and not required:
        return
    # bool is an int in Python; the API's integers are not booleans.
    if not isinstance(value, int) or isinstance(value, bool):
        invalid(path, f"must be an integer, not {type(value).__name__}")
    if low is not None and value < low:
        invalid(path, f"must be at least {low}")


def check_mapping(value: object, path: str) -> None:
    if value is not None and not isinstance(value, Mapping):
        invalid(path, f"must be a mapping, not {type(value).__name__}")


def check_str_map(value: object, path: str) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        invalid(path, "must map strings to strings")


def check_str_list(value: object, path: str, *, required: bool = True) -> None:
    if value is None and not required:
        return
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        invalid(path, "must be a list of strings")


def segment(value: Union[str, int]) -> str:
    """A path segment, escaped."""
    return urllib.parse.quote(str(value), safe="")


def drop_none(values: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


@dataclass
class Answer:
    """A whole (2xx) answer."""

    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        if self.status == 204 or self.body == b"":
            return None
        try:
            return jsonlib.loads(self.body.decode("utf-8"))
        except ValueError:
            raise SvcError(
                self.status,
                "unexpected_response",
                f"the API's answer is not JSON ({self.headers.get('content-type', 'no content type')}): "
                + self.body[:200].decode("utf-8", "replace"),
                {"content_type": self.headers.get("content-type", "")},
            ) from None


@dataclass
class Stream:
    """A streamed (2xx) answer on a connection of its own; `close()` ends it."""

    response: http.client.HTTPResponse
    connection: http.client.HTTPConnection
    closed: bool = field(default=False)

    def chunks(self) -> Iterator[bytes]:
        """The body's pieces as they arrive; a cut connection is a SvcError `network_error`."""
        try:
            while True:
                piece = self.response.read1(65536)
                if not piece:
                    return
                yield piece
        except socket.timeout:
            raise SvcError(0, "timeout", "no data on the stream within the timeout") from None
        except (http.client.HTTPException, OSError, ValueError) as error:
            if self.closed:
                return
            raise SvcError(0, "network_error", f"the stream was cut: {error!r}") from None

    def close(self) -> None:
        self.closed = True
        self.connection.close()


_CUT = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


class Http:
    """One configured client of the API; the resources share it (and it is safe across threads)."""

    def __init__(
        self,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_retry_wait: float = 60.0,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        url = api_url or os.environ.get("SVC_API_URL") or DEFAULT_API_URL
        key = api_key if api_key is not None else os.environ.get("SVC_API_KEY")
        if not isinstance(url, str):
            invalid("api_url", "must be a string")
        if key is None or key == "":
            raise SvcError(0, "missing_api_key", "No API key: pass api_key= or set SVC_API_KEY")
        if not isinstance(key, str):
            invalid("api_key", "must be a string")
        parts = urllib.parse.urlsplit(url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            invalid("api_url", f"must be an http:// or https:// URL, not {url!r}")
        check_int(max_retries, "max_retries", low=0)
        for name, value in (("timeout", timeout), ("max_retry_wait", max_retry_wait)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                invalid(name, "must be a positive number of seconds")
        self.api_url = url.rstrip("/")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self.ssl_context = ssl_context
        self.__key = key
        self._local = threading.local()
        # Every live thread's kept-alive connection, so that `close()` ends them all (weakly: a
        # finished thread's connection goes with its thread-local storage).
        self._connections: "weakref.WeakSet[http.client.HTTPConnection]" = weakref.WeakSet()
        self._connections_lock = threading.Lock()

    def __repr__(self) -> str:
        # Never the key.
        return f"Http(api_url={self.api_url!r})"

    # -----------------------------------------------------------------------------------------
    # Connections

    def new_connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=self.ssl_context or ssl.create_default_context()
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _pooled(self, timeout: Optional[float]) -> Tuple[http.client.HTTPConnection, bool]:
        """This thread's kept-alive connection (made if need be) and whether it was used before."""
        conn: Optional[http.client.HTTPConnection] = getattr(self._local, "connection", None)
        if conn is not None and conn.sock is not None:
            # An idle connection that is readable was closed by the server (or holds garbage).
            readable, _, _ = select.select([conn.sock], [], [], 0)
            if readable:
                conn.close()
        if conn is None:
            conn = self.new_connection(timeout)
            self._local.connection = conn
            with self._connections_lock:
                self._connections.add(conn)
            # Closed when its thread is gone (rather than left to the garbage collector).
            weakref.finalize(threading.current_thread(), conn.close)
        reused = conn.sock is not None
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn, reused

    def close(self) -> None:
        """Closes the kept-alive connections of every thread (a later call opens another)."""
        with self._connections_lock:
            for conn in list(self._connections):
                conn.close()

    # -----------------------------------------------------------------------------------------
    # Requests

    def url(self, path: str, query: Optional[Mapping[str, QueryValue]] = None) -> str:
        pairs = [(k, ("true" if v else "false") if isinstance(v, bool) else str(v)) for k, v in (query or {}).items() if v is not None]
        return self.prefix + path + ("?" + urllib.parse.urlencode(pairs) if pairs else "")

    def _headers(self, extra: Optional[Mapping[str, Optional[str]]]) -> Dict[str, str]:
        headers = {
            "Authorization": f"Bearer {self.__key}",
            "User-Agent": f"svc-sdk-python/{VERSION}",
            "Accept": "application/json",
        }
        for k, v in (extra or {}).items():
            if v is not None:
                headers[k] = v
        return headers

    @staticmethod
    def _encode(json: Any, body: Optional[Body], headers: Dict[str, str]) -> Optional[Union[bytes, IO[bytes]]]:
        if json is not None:
            headers["Content-Type"] = "application/json"
            try:
                return jsonlib.dumps(json, separators=(",", ":"), allow_nan=False).encode("utf-8")
            except (TypeError, ValueError) as error:
                invalid("body", f"cannot be sent as JSON: {error}")
        if body is None:
            return None
        if isinstance(body, str):
            return body.encode("utf-8")
        if isinstance(body, (bytearray, memoryview)):
            return bytes(body)
        if isinstance(body, bytes):
            return body
        if hasattr(body, "read"):
            try:
                size = os.fstat(body.fileno()).st_size - body.tell()
                headers["Content-Length"] = str(size)
            except (OSError, AttributeError, ValueError):
                headers["Transfer-Encoding"] = "chunked"
            return body
        invalid("data", f"must be bytes, str or a binary file object, not {type(body).__name__}")

    def _retry_delay(self, status: int, headers: http.client.HTTPMessage, attempt: int) -> float:
        value = headers.get("retry-after")
        if value is not None:
            try:
                return max(0.0, float(value))
            except ValueError:
                try:
                    when: float = email.utils.parsedate_to_datetime(value).timestamp()
                    return max(0.0, when - time.time())
                except (TypeError, ValueError):
                    pass  # neither seconds nor a date: the usual backoff
        return min(0.5 * 2.0**attempt, 8.0)

    def _backed_off(self, status: int, headers: http.client.HTTPMessage, attempt: int) -> bool:
        """
        Whether an answer of `status` is to be asked again after `attempt` retries: a 429 or 503
        within `max_retries`, whose delay is within `max_retry_wait` (slept here before it says so).
        """
        if status not in (429, 503) or attempt >= self.max_retries:
            return False
        delay = self._retry_delay(status, headers, attempt)
        if delay > self.max_retry_wait:
            return False
        time.sleep(delay)
        return True

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, QueryValue]] = None,
        json: Any = None,
        body: Optional[Body] = None,
        headers: Optional[Mapping[str, Optional[str]]] = None,
        timeout: Optional[float] = None,
    ) -> Answer:
        """The whole answer when it is 2xx; a raised SvcError otherwise. 429 and 503 are retried."""
        all_headers = self._headers(headers)
        data = self._encode(json, body, all_headers)
        replayable = not hasattr(data, "read")
        url = self.url(path, query)
        wait = timeout if timeout is not None else self.timeout
        attempt = 0
        while True:
            status, reason, answer_headers, content = self._send(method, url, data, all_headers, wait, replayable)
            if replayable and self._backed_off(status, answer_headers, attempt):
                attempt += 1
                continue
            if status >= 400 or status < 200:
                raise error_of_body(status, content, reason)
            return Answer(status, answer_headers, content)

    def _send(
        self,
        method: str,
        url: str,
        data: Optional[Union[bytes, IO[bytes]]],
        headers: Dict[str, str],
        timeout: float,
        replayable: bool,
    ) -> Tuple[int, str, http.client.HTTPMessage, bytes]:
        for fresh_try in (False, True):
            conn, reused = self._pooled(timeout)
            try:
                conn.request(method, url, body=data, headers=headers, encode_chunked="Transfer-Encoding" in headers)
                response = conn.getresponse()
                content = response.read()
            except _CUT as error:
                conn.close()
                # A kept-alive connection the server closed just as it was reused: once more on a
                # new one (the request did not reach the server).
                if reused and replayable and not fresh_try:
                    continue
                raise SvcError(0, "network_error", f"{method} {self.api_url}: the connection was cut: {error!r}") from None
            except socket.timeout:
                conn.close()
                raise SvcError(0, "timeout", f"{method} {url.split('?')[0]}: no answer within {timeout:g} s") from None
            except (OSError, http.client.HTTPException) as error:
                conn.close()
                raise unreachable(self.api_url, error) from None
            if response.will_close:
                conn.close()
            return response.status, response.reason, response.headers, content
        raise AssertionError("unreachable")

    def json(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, QueryValue]] = None,
        json: Any = None,
        headers: Optional[Mapping[str, Optional[str]]] = None,
        timeout: Optional[float] = None,
    ) -> Any:
        """The answer's JSON (None for 204); an answer that is not JSON is a SvcError `unexpected_response`."""
        return self.request(method, path, query=query, json=json, headers=headers, timeout=timeout).json()

    def stream(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, QueryValue]] = None,
        json: Any = None,
        headers: Optional[Mapping[str, Optional[str]]] = None,
        timeout: Optional[float] = None,
    ) -> Stream:
        """A streamed answer on a new connection (its own, until closed); non-2xx raised as for `request`."""
        all_headers = self._headers(headers)
        data = self._encode(json, None, all_headers)
        url = self.url(path, query)
        attempt = 0
        while True:
            conn = self.new_connection(timeout if timeout is not None else self.timeout)
            try:
                conn.request(method, url, body=data, headers=all_headers)
                response = conn.getresponse()
            except socket.timeout:
                conn.close()
                raise SvcError(0, "timeout", f"{method} {path}: no answer within the timeout") from None
            except (OSError, http.client.HTTPException) as error:
                conn.close()
                raise unreachable(self.api_url, error) from None
            if 200 <= response.status < 300:
                return Stream(response, conn)
            try:
                content = response.read()
            except (OSError, http.client.HTTPException):
                content = b""
            finally:
                conn.close()
            if self._backed_off(response.status, response.headers, attempt):
                attempt += 1
                continue
            raise error_of_body(response.status, content, response.reason)

    def socket_url(self, path: str, query: Mapping[str, QueryValue]) -> Tuple[str, str]:
        """(the request target with the key in `?token=`, the Host) of a WebSocket: the API takes `?token=` on /terminal only."""
        target = self.url(path, {**query, "token": self.__key})
        default = 443 if self.scheme == "https" else 80
        return target, self.host if self.port == default else f"{self.host}:{self.port}"


def sleep_until(deadline: float, delay: float) -> None:
    time.sleep(max(0.0, min(delay, deadline - time.monotonic())))
