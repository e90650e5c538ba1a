"""
A sandbox's background processes (`sbx.processes`): commands that outlive the request that
started them, their kept output (the last 1 MiB of each stream) read or followed as an iterator,
their stdin, signals. Also the parser of the output events that streamed exec shares.
"""

from __future__ import annotations

import base64
import codecs
import json
import time
from dataclasses import dataclass
from typing import Any, Dict, Generator, Iterator, List, Optional, Sequence, Union

from ._http import Body, Http, Stream, SvcError, check_int, check_str, check_str_map, drop_none, invalid, segment
from ._sse import sse_messages
from .types import ProcessRecord

__all__ = ["OutputChunk", "Process", "ProcessLogs", "Processes"]

SIGNALS = ("INT", "TERM", "KILL", "HUP")


@dataclass(frozen=True)
class OutputChunk:
    """
    One piece of a command's output as it was written (`type` "stdout" or "stderr", its bytes in
    `data`), then its "exit" (the last: `exit_code`, `duration_ms`, and for a background process
    `reason`: exited, killed, sandbox_stopped).
    """

    type: str
    data: bytes = b""
    exit_code: Optional[int] = None
    duration_ms: Optional[int] = None
    reason: Optional[str] = None

    @property
    def text(self) -> str:
        """The bytes as UTF-8 (a character cut between chunks is replaced: join `data` to avoid that)."""
        return self.data.decode("utf-8", "replace")


def command(cmd: Union[str, Sequence[str]], path: str = "cmd") -> List[str]:
    """argv of a command: a list as is, a string run as `sh -c`."""
    if isinstance(cmd, str):
        if cmd == "":
            invalid(path, "must not be empty")
        return ["sh", "-c", cmd]
    if not isinstance(cmd, (list, tuple)) or not all(isinstance(a, str) for a in cmd):
        invalid(path, "must be a string (a shell line) or a list of strings (argv)")
    if len(cmd) == 0 or cmd[0] == "":
        invalid(path, "must name the program to run")
    return list(cmd)


def output_of(stream: Stream) -> Generator[OutputChunk, None, None]:
    """
    The output events of a stream (server-sent `stdout`/`stderr`/`exit`) as they are asked for: a
    slow consumer slows the stream. An `error` event is raised as a SvcError. Closing the
    iterator (leaving a `for` loop and dropping it, or `.close()`) closes the connection.
    """
    try:
        for message in sse_messages(stream.chunks()):
            try:
                data: Dict[str, Any] = json.loads(message.data)
            except ValueError:
                raise SvcError(0, "unexpected_response", f"an output event that is not JSON: {message.data[:200]}") from None
            if message.event in ("stdout", "stderr"):
                yield OutputChunk(message.event, base64.b64decode(str(data.get("data", ""))))
            elif message.event == "exit":
                reason = data.get("reason")
                yield OutputChunk(
                    "exit",
                    exit_code=int(data["exit_code"]),
                    duration_ms=int(data.get("duration_ms") or 0),
                    reason=reason if reason in ("exited", "killed", "sandbox_stopped") else None,
                )
            elif message.event == "error":
                raise SvcError(
                    0,
                    str(data.get("code") or "unavailable"),
                    str(data.get("error") or "the output stream ended with an error"),
                )
    finally:
        stream.close()


@dataclass(frozen=True)
class ProcessLogs:
    """The output kept so far, as text, and the exit when it has exited."""

    stdout: str
    stderr: str
    exit: Optional[OutputChunk]


class Process:
    """A background process: its record as of the last answer, and what can be done with it."""

    def __init__(self, processes: Processes, record: ProcessRecord) -> None:
        self._processes = processes
        self.record = record

    def __repr__(self) -> str:
        return f"Process(pid={self.pid}, state={self.state!r})"

    @property
    def pid(self) -> int:
        return self.record["pid"]

    @property
    def state(self) -> str:
        """As of the last answer: `refresh()` asks again."""
        return self.record["state"]

    @property
    def exit_code(self) -> Optional[int]:
        return self.record["exit_code"]

    def refresh(self) -> Process:
        self.record = self._processes.get(self.pid).record
        return self

    def kill(self, signal: str = "TERM") -> None:
        """Sends a signal (default TERM; KILL ends it and everything it started)."""
        self._processes.kill(self.pid, signal)

    def wait(self, timeout: float = 300.0) -> Process:
        """Returns once it has exited, with its record (`exit_code`, `reason`)."""
        self.record = self._processes.wait(self.pid, timeout=timeout).record
        return self

    def output(self, follow: bool = False, timeout: Optional[float] = None) -> Generator[OutputChunk, None, None]:
        return self._processes.output(self.pid, follow=follow, timeout=timeout)

    def logs(self) -> ProcessLogs:
        return self._processes.logs(self.pid)

    def write_stdin(self, data: Union[str, bytes], close: bool = False) -> None:
        self._processes.write_stdin(self.pid, data, close=close)

    def close_stdin(self) -> None:
        self._processes.close_stdin(self.pid)


class Processes:
    """`sbx.processes`: the background processes of one sandbox."""

    def __init__(self, http: Http, sandbox_id: str) -> None:
        self._http = http
        self._sandbox_id = sandbox_id

    def _path(self, suffix: str = "") -> str:
        return f"/v1/sandboxes/{segment(self._sandbox_id)}/processes{suffix}"

    def start(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        cwd: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        stdin: Optional[bool] = None,
    ) -> Process:
        """
        Starts a background process in the (running) sandbox; it outlives the call. `cmd` is argv
        or a shell line (run as `sh -c`). 409 `conflict` unless the sandbox is running. `stdin`:
        keep its stdin open for `write_stdin` (default: it reads end of file).
        """
        check_str(cwd, "cwd", required=False, absolute=True)
        check_str_map(env, "env")
        if stdin is not None and not isinstance(stdin, bool):
            invalid("stdin", "must be a bool")
        body = drop_none({"cmd": command(cmd), "cwd": cwd, "env": env, "stdin": stdin})
        return Process(self, self._http.json("POST", self._path(), json=body))

    def list(self) -> List[Process]:
        """The running ones and those that exited lately, newest first."""
        answer = self._http.json("GET", self._path())
        return [Process(self, record) for record in answer["processes"]]

    def get(self, pid: int) -> Process:
        check_int(pid, "pid")
        return Process(self, self._http.json("GET", self._path(f"/{segment(pid)}")))

    def kill(self, pid: int, signal: str = "TERM") -> None:
        """Sends a signal (default TERM; KILL ends it and everything it started). 409 once it has exited."""
        check_int(pid, "pid")
        if signal not in SIGNALS:
            invalid("signal", f"must be one of {', '.join(SIGNALS)}")
        self._http.request("POST", self._path(f"/{segment(pid)}/signal"), json={"signal": signal})

    def output(self, pid: int, follow: bool = False, timeout: Optional[float] = None) -> Generator[OutputChunk, None, None]:
        """
        Its output as it was written: what is kept so far, then (with `follow`) what comes, until
        it exits; the last chunk is its `exit` when it has exited. Read only as fast as you consume
        it. `timeout`: the longest wait for the next piece (default: the client's timeout, and
        none when following, since a process may be silent for as long as it likes).
        """
        check_int(pid, "pid")
        stream = self._http.stream(
            "GET",
            self._path(f"/{segment(pid)}/output"),
            query={"follow": "true" if follow else None},
            headers={"Accept": "text/event-stream"},
            timeout=timeout if timeout is not None or not follow else 24 * 3600.0,
        )
        return output_of(stream)

    def logs(self, pid: int) -> ProcessLogs:
        """The output kept so far (the last 1 MiB of each stream), as text."""
        decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in ("stdout", "stderr")}
        text = {"stdout": "", "stderr": ""}
        exit_chunk: Optional[OutputChunk] = None
        for chunk in self.output(pid):
            if chunk.type == "exit":
                exit_chunk = chunk
            else:
                text[chunk.type] += decoders[chunk.type].decode(chunk.data)
        return ProcessLogs(
            text["stdout"] + decoders["stdout"].decode(b"", final=True),
            text["stderr"] + decoders["stderr"].decode(b"", final=True),
            exit_chunk,
        )

    def wait(self, pid: int, timeout: float = 300.0) -> Process:
        """
        Returns once it has exited, with its record: the followed output's end says so at once
        (its bytes are skipped); if that stream breaks, the record is polled.
        """
        deadline = time.monotonic() + timeout
        try:
            for chunk in self.output(pid, follow=True, timeout=timeout):
                if chunk.type == "exit":
                    break
        except SvcError as error:
            # A refusal (no such process, another org's sandbox) is the answer; a cut stream is not.
            if 400 <= error.status < 500:
                raise
        delay = 0.1
        while True:
            current = self.get(pid)
            if current.state == "exited":
                return current
            if time.monotonic() + delay > deadline:
                raise SvcError(0, "timeout", f"process {pid} has not exited after {timeout:g} s")
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def write_stdin(self, pid: int, data: Union[str, bytes], close: bool = False) -> None:
        """Writes to its stdin (started with `stdin=True`); `close` then ends it (end of file)."""
        check_int(pid, "pid")
        if not isinstance(data, (str, bytes)):
            invalid("data", "must be str or bytes")
        body: Body = data
        self._http.request(
            "POST",
            self._path(f"/{segment(pid)}/stdin"),
            query={"close": "true" if close else None},
            body=body,
            headers={"Content-Type": "application/octet-stream"},
        )

    def close_stdin(self, pid: int) -> None:
        """Ends its stdin (end of file)."""
        self.write_stdin(pid, b"", close=True)
