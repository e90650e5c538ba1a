"""
A server-sent events parser (the WHATWG rules the API's streams need: `id`, `event`, `data`
lines, comments, CRLF, CR or LF line ends), fed bytes as they arrive.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from typing import Iterable, Iterator, List, Optional

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class SseMessage:
    #: The last `id` field seen on the stream (it carries over, as in browsers), "" before any.
    id: str
    #: The `event` field, "message" when the message had none.
    event: str
    #: The `data` lines joined with "\n".
    data: str


class SseParser:
    """Feed text in, take whole messages out; a message ends at a blank line."""

    def __init__(self) -> None:
        self._buffer = ""
        self._id = ""
        self._event = ""
        self._data: List[str] = []
        self._has_data = False

    def push(self, chunk: str) -> List[SseMessage]:
        self._buffer += chunk
        out: List[SseMessage] = []
        while True:
            match = _LINE_END.search(self._buffer)
            # A lone "\r" at the end may be the first half of "\r\n": wait for more.
            if match is None or (match.group() == "\r" and match.start() == len(self._buffer) - 1):
                return out
            line = self._buffer[: match.start()]
            self._buffer = self._buffer[match.end() :]
            message = self._line(line)
            if message is not None:
                out.append(message)

    def _line(self, line: str) -> Optional[SseMessage]:
        if line == "":
            if not self._has_data:
                self._event = ""
                return None
            message = SseMessage(self._id, self._event or "message", "\n".join(self._data))
            self._event, self._data, self._has_data = "", [], False
            return message
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None


def sse_messages(chunks: Iterable[bytes]) -> Iterator[SseMessage]:
    """The messages of a body's pieces as they arrive."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    parser = SseParser()
    for chunk in chunks:
        yield from parser.push(decoder.decode(chunk))
    yield from parser.push(decoder.decode(b"", final=True))
