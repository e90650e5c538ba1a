"""
Realtime events (`GET /v1/events`) as an iterator: `svc.events()`. It connects at once (a
refusal, such as a bad filter, is raised there; nothing that happens after it returns is
missed) and, when the connection drops, reconnects with `Last-Event-ID` so that no event is
missed or repeated. `close()` (or the end of a `with` block) ends it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Dict, Iterator, Optional, Sequence, Type

from ._http import Http, Stream, SvcError, check_str, check_str_list
from ._sse import SseMessage, sse_messages

__all__ = ["EventStream", "SvcEvent"]


@dataclass(frozen=True)
class SvcEvent:
    """One event of the org: the webhook envelope and the stream's `id`."""

    #: Its sequence in the platform's event stream: resume after it with `last_event_id`.
    id: str
    event: str
    org_id: str
    ts: str
    data: Dict[str, Any]


class EventStream:
    """The org's events as they happen: iterate over it; `close()` ends it."""

    def __init__(
        self,
        http: Http,
        events: Optional[Sequence[str]] = None,
        last_event_id: Optional[str] = None,
        reconnect: bool = True,
    ) -> None:
        check_str_list(events, "events", required=False)
        check_str(last_event_id, "last_event_id", required=False)
        self._http = http
        self._events = list(events) if events is not None else None
        self._reconnect = reconnect
        self._closed = False
        #: The `id` of the last event received (what a reconnection resumes after).
        self.last_event_id = last_event_id
        self._stream: Optional[Stream] = self._open()
        self._messages: Optional[Iterator[SseMessage]] = sse_messages(self._stream.chunks())

    def _open(self) -> Stream:
        return self._http.stream(
            "GET",
            "/v1/events",
            query={"events": ",".join(self._events) if self._events is not None else None},
            headers={"Accept": "text/event-stream", "Last-Event-ID": self.last_event_id},
            # The server writes a keep-alive comment every 15 s: a longer silence is a dead connection.
            timeout=max(self._http.timeout, 45.0),
        )

    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> SvcEvent:
        delay = 0.25
        while not self._closed:
            try:
                if self._messages is None:
                    self._stream = self._open()
                    self._messages = sse_messages(self._stream.chunks())
                    delay = 0.25
                for message in self._messages:
                    if message.id != "":
                        self.last_event_id = message.id
                    envelope = json.loads(message.data)
                    return SvcEvent(
                        message.id,
                        str(envelope.get("event", message.event)),
                        str(envelope.get("org_id", "")),
                        str(envelope.get("ts", "")),
                        envelope.get("data") or {},
                    )
            except SvcError as error:
                # A refusal (a bad filter, a revoked key) will not heal by retrying; a cut
                # connection or an outage (429, 5xx) may.
                if 400 <= error.status < 500 and error.status != 429:
                    self.close()
                    raise
            except ValueError:
                pass  # a message that is not JSON: the connection is restarted after the last good id
            if self._closed:
                break
            self._drop()
            if not self._reconnect:
                self.close()
                break
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
        raise StopIteration

    def _drop(self) -> None:
        if self._stream is not None:
            self._stream.close()
        self._stream = None
        self._messages = None

    def close(self) -> None:
        """Ends the stream: the connection is closed, the iterator finishes."""
        self._closed = True
        self._drop()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(
        self, kind: Optional[Type[BaseException]], error: Optional[BaseException], trace: Optional[TracebackType]
    ) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._drop()
        except Exception:
            pass
