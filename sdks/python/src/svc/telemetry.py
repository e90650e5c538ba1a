"""
A sandbox's log and metrics (`sandbox.logs()`, `sandbox.follow_logs()`, `sandbox.metrics()`):
the log as text or its lines as they are written, and the samples taken every 5 s while it runs.
"""

from __future__ import annotations

import datetime
import time
from typing import Generator, List, Optional, Union

from ._http import Http, Stream, SvcError, invalid
from ._sse import sse_messages
from .types import MetricSample

__all__ = ["Since", "follow_logs", "logs_text", "metric_samples"]

#: A `datetime` (naive: UTC), an ISO 8601 time, or a duration back from now ("15m", "2h", "1d").
Since = Union[datetime.datetime, str, None]


def _since(since: Since) -> Optional[str]:
    if since is None:
        return None
    if isinstance(since, datetime.datetime):
        aware = since if since.tzinfo is not None else since.replace(tzinfo=datetime.timezone.utc)
        return aware.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
    if isinstance(since, str) and since != "":
        return since
    invalid("since", "must be a datetime, an ISO 8601 time or a duration such as 15m")
    return None


def logs_text(http: Http, path: str, since: Since = None) -> str:
    """The log so far: one line each, `<ts> <source>: <text>`."""
    return http.request("GET", path, query={"since": _since(since)}).body.decode("utf-8", "replace")


def follow_logs(
    http: Http, path: str, since: Since = None, timeout: Optional[float] = None, reconnect: bool = True
) -> Generator[str, None, None]:
    """
    The log's lines (without their line end): those stored, then new ones as they are written.
    Dropping the iterator (or `.close()`) closes the connection. `timeout`: the longest wait for
    the next line (default none: a quiet sandbox may write nothing for long). A dropped
    connection (or an outage: 429, 5xx) is followed by a new one resuming after the last line
    received (`Last-Event-ID`), unless `reconnect` is false; the sandbox gone (404) ends it.
    """
    last_id: Optional[str] = None

    def open_stream() -> Stream:
        return http.stream(
            "GET",
            path,
            # `since` only on the first connection: a resume starts after the last line seen.
            query={"follow": "true", "since": _since(since) if last_id is None else None},
            headers={"Accept": "text/event-stream", "Last-Event-ID": last_id},
            timeout=timeout if timeout is not None else 24 * 3600.0,
        )

    # The first connection at once: a refusal is the caller's to see now.
    first: Optional[Stream] = open_stream()

    def lines() -> Generator[str, None, None]:
        nonlocal first, last_id
        delay = 0.25
        while True:
            stream: Optional[Stream] = None
            try:
                stream = first if first is not None else open_stream()
                first = None
                delay = 0.25
                for message in sse_messages(stream.chunks()):
                    if message.event != "log":
                        continue
                    if message.id != "":
                        last_id = message.id
                    yield message.data
            except SvcError as error:
                if error.status == 404:
                    return
                # A refusal (a revoked key) will not heal by retrying; a cut connection or an outage may.
                if 400 <= error.status < 500 and error.status != 429:
                    raise
            finally:
                if stream is not None:
                    stream.close()
            if not reconnect:
                return
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    return lines()


def metric_samples(http: Http, path: str, since: Since = None) -> List[MetricSample]:
    """The samples, oldest first."""
    samples: List[MetricSample] = http.json("GET", path, query={"since": _since(since)})["samples"]
    return samples
