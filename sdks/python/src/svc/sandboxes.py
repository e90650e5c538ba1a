"""
`svc.sandboxes` and the `Sandbox` object: create (returning once running), get, list; a
sandbox's commands (exec, whole or streamed), files, processes, terminal, lifecycle and settings.
"""

from __future__ import annotations

import codecs
import os
import tarfile
import threading
import time
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Callable, Dict, Generator, Iterator, List, Mapping, Optional, Sequence, Type, TypedDict, TypeVar, Union

from ._sse import sse_messages
from ._http import (
    Body,
    Http,
    SvcError,
    check_int,
    check_mapping,
    check_str,
    check_str_list,
    check_str_map,
    drop_none,
    invalid,
    segment,
)
from .contexts import CodeContext, Contexts
from .processes import OutputChunk, Processes, command, output_of
from .telemetry import Since, follow_logs, logs_text, metric_samples
from .types import (
    ExecResult,
    FileEntry,
    FileInfo,
    FileWatchEvent,
    MetricSample,
    PreviewToken,
    SandboxRecord,
    SandboxStats,
    Template,
)

if TYPE_CHECKING:
    from .resources import Templates
    from .terminal import Terminal

from json import loads as jsonlib_loads

__all__ = ["Files", "Sandbox", "SandboxPage", "Sandboxes"]

#: How long a wait lasts by default (s).
DEFAULT_WAIT = 300.0


class _Keep:
    """A setting left as it is (`set_timeout`): distinct from None, which removes it."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Any = _Keep()

STATES = ("pending", "starting", "running", "stopping", "stopped", "deleting", "deleted", "error")


A = TypeVar("A")


def poll(read: Callable[[], A], done: Callable[[A], bool], timeout: float, what: str) -> A:
    """Reads until `done` says so; the delay grows from 50 ms to 1 s."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        value = read()
        if done(value):
            return value
        if time.monotonic() + delay > deadline:
            raise SvcError(0, "timeout", f"{what} after {timeout:g} s")
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


class Files:
    """`sbx.files`: the sandbox's files (paths are absolute, inside the sandbox)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    def write(self, path: str, data: Body) -> None:
        """Writes a file (replacing it once every byte arrived); `data` is bytes, text (UTF-8) or a binary file object."""
        check_str(path, "path", absolute=True)
        self._sandbox._http.request(
            "PUT",
            self._sandbox._path("/files"),
            query={"path": path},
            body=data,
            headers={"Content-Type": "application/octet-stream"},
            timeout=max(self._sandbox._http.timeout, 600.0),
        )

    def read(self, path: str) -> bytes:
        """A file's bytes. A folder is a SvcError `not_a_file` (see `list`)."""
        check_str(path, "path", absolute=True)
        answer = self._sandbox._http.request("GET", self._sandbox._path("/files"), query={"path": path})
        if answer.headers.get("content-type", "").startswith("application/json"):
            raise SvcError(0, "not_a_file", f"{path} is a folder: use files.list")
        return answer.body

    def read_text(self, path: str) -> str:
        """A file's text (UTF-8)."""
        return self.read(path).decode("utf-8")

    def list(self, path: str) -> List[FileEntry]:
        """A folder's entries. A file is a SvcError `not_a_folder`."""
        check_str(path, "path", absolute=True)
        answer = self._sandbox._http.request("GET", self._sandbox._path("/files"), query={"path": path})
        if not answer.headers.get("content-type", "").startswith("application/json"):
            raise SvcError(0, "not_a_folder", f"{path} is a file: use files.read")
        entries: List[FileEntry] = answer.json()["entries"]
        return entries

    def stat(self, path: str) -> FileInfo:
        """The entry at `path` (a final symlink not followed: `target` is its target)."""
        check_str(path, "path", absolute=True)
        info: FileInfo = self._sandbox._http.json("GET", self._sandbox._path("/files/stat"), query={"path": path})
        return info

    def mkdir(self, path: str, *, parents: bool = True, mode: Optional[str] = None) -> FileInfo:
        """Makes a folder (with its parents unless `parents=False`: then an existing one is a SvcError `conflict`)."""
        check_str(path, "path", absolute=True)
        check_str(mode, "mode", required=False)
        if not isinstance(parents, bool):
            invalid("parents", "must be a bool")
        body = drop_none({"path": path, "parents": parents, "mode": mode})
        info: FileInfo = self._sandbox._http.json("POST", self._sandbox._path("/files/mkdir"), json=body)
        return info

    def move(self, source: str, target: str, *, overwrite: bool = False) -> FileInfo:
        """Renames `source` to `target`; an existing `target` is a SvcError `conflict` unless `overwrite=True`."""
        check_str(source, "source", absolute=True)
        check_str(target, "target", absolute=True)
        if not isinstance(overwrite, bool):
            invalid("overwrite", "must be a bool")
        body = {"from": source, "to": target, "overwrite": overwrite}
        info: FileInfo = self._sandbox._http.json("POST", self._sandbox._path("/files/move"), json=body)
        return info

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Removes the entry (a symlink, not its target); a folder with entries needs `recursive=True` (else `conflict`)."""
        check_str(path, "path", absolute=True)
        if not isinstance(recursive, bool):
            invalid("recursive", "must be a bool")
        self._sandbox._http.request(
            "DELETE", self._sandbox._path("/files"), query={"path": path, "recursive": "true" if recursive else "false"}
        )

    def upload(self, source: Union[str, "os.PathLike[str]", IO[bytes]], remote_path: str, *, gzip: bool = False) -> None:
        """
        Uploads a local folder (a path), or a tar (`gzip=True`: a tar.gz) read from a binary file
        object, to `remote_path`, extracted there (made with its parents; merged into an existing
        folder). Streamed: the folder is written as a tar while it is sent, never held whole.
        """
        check_str(remote_path, "remote_path", absolute=True)
        headers = {"Content-Type": "application/gzip" if gzip else "application/x-tar"}
        timeout = max(self._sandbox._http.timeout, 3600.0)
        if not isinstance(source, (str, os.PathLike)):
            self._sandbox._http.request(
                "PUT", self._sandbox._path("/files/archive"), query={"path": remote_path}, body=source,
                headers=headers, timeout=timeout,
            )
            return
        folder = os.fspath(source)
        if not os.path.isdir(folder):
            invalid("source", f"{folder} is not a folder")
        read_end, write_end = os.pipe()
        failure: List[BaseException] = []

        def write() -> None:
            try:
                with os.fdopen(write_end, "wb") as out, tarfile.open(fileobj=out, mode="w|") as archive:
                    for name in sorted(os.listdir(folder)):
                        archive.add(os.path.join(folder, name), arcname=name)
            except BaseException as error:  # noqa: BLE001 - raised below, in the caller's thread
                failure.append(error)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        try:
            with os.fdopen(read_end, "rb") as body:
                self._sandbox._http.request(
                    "PUT", self._sandbox._path("/files/archive"), query={"path": remote_path}, body=body,
                    headers={**headers, "Content-Type": "application/x-tar"}, timeout=timeout,
                )
        finally:
            writer.join()
        if failure and not isinstance(failure[0], BrokenPipeError):
            raise failure[0]

    def download(self, remote_path: str, local_path: str) -> int:
        """
        Downloads the folder at `remote_path` into the local folder `local_path` (made), extracted
        as it arrives; names that would land outside it are refused (SvcError `invalid_archive`).
        Returns the number of entries.
        """
        check_str(remote_path, "remote_path", absolute=True)
        os.makedirs(local_path, exist_ok=True)
        root = os.path.realpath(local_path)
        stream = self._sandbox._http.stream(
            "GET", self._sandbox._path("/files/archive"), query={"path": remote_path, "format": "tar"},
            timeout=max(self._sandbox._http.timeout, 3600.0),
        )
        count = 0
        try:
            with tarfile.open(fileobj=stream.response, mode="r|") as archive:
                for member in archive:
                    target = os.path.realpath(os.path.join(root, member.name))
                    if member.name.startswith("/") or (target != root and not target.startswith(root + os.sep)):
                        raise SvcError(0, "invalid_archive", f"the archive names {member.name!r}, outside the folder")
                    if not (member.isfile() or member.isdir() or member.issym()):
                        continue
                    if member.issym():
                        if os.path.lexists(target):
                            os.remove(target)
                        os.symlink(member.linkname, target)
                    else:
                        archive.extract(member, root, set_attrs=False)
                    count += 1
        finally:
            stream.close()
        return count

    def watch(self, path: str, *, recursive: bool = True) -> Generator[FileWatchEvent, None, None]:
        """
        The changes under `path` as they happen (`{type, path, is_dir, from?}`), until the watch
        ends (`overflow` last when this reader fell behind, or the sandbox stopped). Leaving the
        loop closes it.
        """
        check_str(path, "path", absolute=True)
        stream = self._sandbox._http.stream(
            "GET", self._sandbox._path("/files/watch"),
            query={"path": path, "recursive": "true" if recursive else "false"},
            headers={"Accept": "text/event-stream"}, timeout=None,
        )
        try:
            for message in sse_messages(stream.chunks()):
                event: FileWatchEvent = jsonlib_loads(message.data)
                yield event
        finally:
            stream.close()


class Sandbox:
    """
    A sandbox: its record as of the last answer, and what can be done with it. As a context
    manager (`with svc.sandboxes.create() as sbx:`) it is deleted at the end of the block.
    """

    def __init__(self, http: Http, templates: Templates, record: SandboxRecord) -> None:
        self._http = http
        self._templates = templates
        self.record = record
        #: Its background processes.
        self.processes = Processes(http, record["id"])
        #: Its files.
        self.files = Files(self)
        #: Its code contexts: stateful interpreters (`contexts.create()`, then `context.run(code)`).
        self.contexts = Contexts(http, record["id"])
        self._default_contexts: Dict[str, CodeContext] = {}

    def run_code(self, code: str, language: str = "python", timeout_ms: Optional[int] = None) -> Dict[str, Any]:
        """
        Runs code in this object's own context of `language` (created on first use, again if it
        died), so state persists between calls: the run's answer (`results`, `stdout`, `stderr`,
        `error`...).
        """
        context = self._default_contexts.get(language)
        if context is None or context.refresh().state == "dead":
            context = self._default_contexts[language] = self.contexts.create(language)
        return context.run(code, timeout_ms)

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, name={self.name!r}, state={self.state!r})"

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self, kind: Optional[Type[BaseException]], error: Optional[BaseException], trace: Optional[TracebackType]
    ) -> None:
        try:
            self.delete()
        except SvcError as failure:
            if failure.status != 404:
                raise

    @property
    def id(self) -> str:
        return self.record["id"]

    @property
    def name(self) -> str:
        return self.record["name"]

    @property
    def state(self) -> str:
        """As of the last answer: `refresh()` asks again."""
        return self.record["state"]

    def _path(self, suffix: str = "") -> str:
        return f"/v1/sandboxes/{segment(self.id)}{suffix}"

    def refresh(self) -> Sandbox:
        """Reads the record again."""
        self.record = self._http.json("GET", self._path())
        return self

    def wait_for(self, states: Union[str, Sequence[str]], timeout: float = DEFAULT_WAIT) -> Sandbox:
        """
        Returns once the sandbox is in one of `states`; an `error` state (or `deleted`, unless
        waited for) is raised as a SvcError `sandbox_error`. It polls the record (50 ms growing to 1 s).
        """
        wanted = [states] if isinstance(states, str) else list(states)
        for state in wanted:
            if state not in STATES:
                invalid("states", f"{state!r} is not a sandbox state")
        def settled(sandbox: Sandbox) -> bool:
            return sandbox.state in wanted or sandbox.state in ("error", "deleted")

        poll(
            self.refresh,
            settled,
            timeout,
            f"sandbox {self.id} is not {' or '.join(wanted)}",
        )
        if self.state not in wanted:
            message = f"sandbox {self.id} is {self.state}"
            if self.record.get("errorMessage"):
                message += f": {self.record['errorMessage']}"
            raise SvcError(0, "sandbox_error", message, {"sandbox": self.record})
        return self

    @staticmethod
    def _exec_body(
        cmd: Union[str, Sequence[str]],
        cwd: Optional[str],
        env: Optional[Mapping[str, str]],
        stdin: Optional[str],
        timeout_ms: Optional[int],
    ) -> Dict[str, Any]:
        check_str(cwd, "cwd", required=False, absolute=True)
        check_str_map(env, "env")
        if stdin is not None and not isinstance(stdin, str):
            invalid("stdin", "must be a string")
        check_int(timeout_ms, "timeout_ms", required=False, low=1)
        return drop_none({"cmd": command(cmd), "cwd": cwd, "env": env, "stdin": stdin, "timeout_ms": timeout_ms})

    def exec(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        on_stdout: Optional[Callable[[str], None]] = None,
        on_stderr: Optional[Callable[[str], None]] = None,
    ) -> ExecResult:
        """
        Runs a command and waits for it. `cmd` is argv (`["ls", "-la"]`) or a shell line
        (`"ls -la | wc -l"`, run as `sh -c`). A non-zero exit is a result, not an error.
        `timeout_ms`: at most this long (default 60000, up to 600000), then it is killed.
        `on_stdout` / `on_stderr`: called with each piece of output as it is written (streamed).
        """
        body = self._exec_body(cmd, cwd, env, stdin, timeout_ms)
        wait = max(self._http.timeout, (timeout_ms or 60_000) / 1000 + 30)
        if on_stdout is None and on_stderr is None:
            result: ExecResult = self._http.json("POST", self._path("/exec"), json=body, timeout=wait)
            return result
        decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in ("stdout", "stderr")}
        out = {"stdout": "", "stderr": ""}
        for chunk in self._exec_stream(body, wait):
            if chunk.type == "exit":
                return {
                    "exit_code": chunk.exit_code or 0,
                    "duration_ms": chunk.duration_ms or 0,
                    "stdout": out["stdout"] + decoders["stdout"].decode(b"", final=True),
                    "stderr": out["stderr"] + decoders["stderr"].decode(b"", final=True),
                    "truncated": False,
                }
            text = decoders[chunk.type].decode(chunk.data)
            out[chunk.type] += text
            callback = on_stdout if chunk.type == "stdout" else on_stderr
            if callback is not None and text:
                callback(text)
        raise SvcError(0, "network_error", "the command's stream ended before its exit")

    def exec_stream(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Optional[str] = None,
        timeout_ms: Optional[int] = None,
    ) -> Generator[OutputChunk, None, None]:
        """
        Runs a command and yields its output as it is written (`stdout`/`stderr` chunks of bytes),
        then its `exit`: an iterator read only as fast as it is consumed. Closing it early
        (`.close()`, or leaving the loop and dropping it) closes the stream (the command runs on
        to its end or its `timeout_ms`).
        """
        body = self._exec_body(cmd, cwd, env, stdin, timeout_ms)
        return self._exec_stream(body, max(self._http.timeout, (timeout_ms or 60_000) / 1000 + 30))

    def _exec_stream(self, body: Dict[str, Any], timeout: float) -> Generator[OutputChunk, None, None]:
        stream = self._http.stream(
            "POST", self._path("/exec"), json=body, headers={"Accept": "text/event-stream"}, timeout=timeout
        )
        return output_of(stream)

    def terminal(self, cols: int = 80, rows: int = 24, timeout: Optional[float] = None) -> Terminal:
        """
        An interactive terminal (a PTY running a shell) in the running sandbox, over the /terminal
        WebSocket: `write`, `resize`, `read`, `close`, `wait` (the shell's exit code).
        """
        from .terminal import open_terminal

        return open_terminal(self._http, self.id, cols, rows, timeout)

    def delete(self, wait: bool = False, timeout: float = DEFAULT_WAIT) -> Sandbox:
        """Deletes it and its children; `wait=True` returns once it is `deleted`."""
        self.record = self._http.json("DELETE", self._path())
        if wait and self.state != "deleted":
            self.wait_for("deleted", timeout)
        return self

    def stop(self, wait: bool = True, timeout: float = DEFAULT_WAIT) -> Sandbox:
        """Stops it (a running sandbox); returns once `stopped` unless `wait=False`."""
        self.record = self._http.json("POST", self._path("/stop"))
        return self.wait_for("stopped", timeout) if wait else self

    def start(self, wait: bool = True, timeout: float = DEFAULT_WAIT) -> Sandbox:
        """Starts it again (a stopped sandbox); returns once `running` unless `wait=False`."""
        self.record = self._http.json("POST", self._path("/start"))
        return self.wait_for("running", timeout) if wait else self

    def stats(self) -> SandboxStats:
        """Its usage now: CPU, memory, processes, network bytes (a running sandbox)."""
        stats: SandboxStats = self._http.json("GET", self._path("/stats"))
        return stats

    def logs(self, since: Since = None) -> str:
        """Its log so far (`<ts> <source>: <text>` lines): lifecycle, how runs ended, its template's `start_cmd` output."""
        return logs_text(self._http, self._path("/logs"), since)

    def follow_logs(
        self, since: Since = None, timeout: Optional[float] = None, reconnect: bool = True
    ) -> Generator[str, None, None]:
        """
        Its log's lines as they are written (those stored first); dropping the iterator closes the
        connection. A dropped connection is followed by a new one resuming after the last line
        received (no line missed or repeated), unless `reconnect` is false.
        """
        return follow_logs(self._http, self._path("/logs"), since, timeout, reconnect)

    def metrics(self, since: Since = None) -> List[MetricSample]:
        """Its samples (every 5 s while it runs, kept 24 h), oldest first."""
        return metric_samples(self._http, self._path("/metrics"), since)

    def set_network(self, allow_out: Optional[Sequence[str]] = None, deny_out: Optional[Sequence[str]] = None) -> Sandbox:
        """Replaces its egress policy."""
        check_str_list(allow_out, "allow_out", required=False)
        check_str_list(deny_out, "deny_out", required=False)
        body = drop_none({"allow_out": allow_out, "deny_out": deny_out})
        self.record = self._http.json("PUT", self._path("/network"), json=body)
        return self

    def set_timeout(self, timeout_s: Any = KEEP, idle_timeout_s: Any = KEEP) -> Sandbox:
        """
        A keep-alive: `timeout_s` counts again from now, `idle_timeout_s` replaces the idle limit;
        `None` removes either, one left out is kept. The record shows the new `expiresAt`.
        """
        body = {}
        for field, value in (("timeout_s", timeout_s), ("idle_timeout_s", idle_timeout_s)):
            if value is KEEP:
                continue
            check_int(value, field, required=False, low=1)
            body[field] = value
        self.record = self._http.json("PUT", self._path("/timeout"), json=body)
        return self

    def bind_secret(self, secret_id: str) -> None:
        """Binds a secret of the org (the key needs `secrets:use`)."""
        check_str(secret_id, "secret_id")
        self._http.request("POST", self._path("/secrets"), json={"secret_id": secret_id})

    def expose_port(self, port: int, ttl_s: Optional[int] = None) -> PreviewToken:
        """A preview URL and token for one of its exposed ports."""
        check_int(port, "port", low=1)
        check_int(ttl_s, "ttl_s", required=False, low=1)
        token: PreviewToken = self._http.json("POST", self._path(f"/ports/{port}/token"), json=drop_none({"ttl_s": ttl_s}))
        return token

    def snapshot(self, name: str, wait: bool = True, timeout: float = DEFAULT_WAIT) -> Template:
        """Captures its files as a template named `name`; returns once built unless `wait=False`."""
        check_str(name, "name")
        template: Template = self._http.json("POST", self._path("/snapshot"), json={"name": name})
        return self._templates.wait_for(template["id"], timeout) if wait else template


    def fork(
        self,
        count: int = 1,
        *,
        name: Optional[str] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        wait: bool = True,
        timeout: float = DEFAULT_WAIT,
        idempotency_key: Optional[str] = None,
    ) -> List[Sandbox]:
        """
        Forks it: `count` (1 to 20) new sandboxes whose files start as its own now, with its
        template, resources, env, network policy, secrets and ports; it keeps running. Returns
        once every fork runs unless `wait=False` (then `pending`).
        """
        check_int(count, "count", low=1)
        check_str(name, "name", required=False)
        check_mapping(metadata, "metadata")
        check_str(idempotency_key, "idempotency_key", required=False)
        answer = self._http.json(
            "POST",
            self._path("/fork"),
            json=drop_none({"count": count, "name": name, "metadata": metadata}),
            headers={"Idempotency-Key": idempotency_key},
        )
        forks = [Sandbox(self._http, self._templates, record) for record in answer["sandboxes"]]
        if wait:
            for fork in forks:
                fork.wait_for("running", timeout)
        return forks


class SandboxPage(TypedDict):
    rows: List[Sandbox]
    total: int
    offset: int
    limit: int
    has_more: bool


class Sandboxes:
    """`svc.sandboxes`."""

    def __init__(self, http: Http, templates: Templates) -> None:
        self._http = http
        self._templates = templates

    def _wrap(self, record: SandboxRecord) -> Sandbox:
        return Sandbox(self._http, self._templates, record)

    def create(
        self,
        name: Optional[str] = None,
        *,
        template: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        cpu: Optional[int] = None,
        ram_mb: Optional[int] = None,
        disk_gb: Optional[int] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        timeout_s: Optional[int] = None,
        idle_timeout_s: Optional[int] = None,
        on_timeout: Optional[str] = None,
        auto_delete_s: Optional[int] = None,
        auto_resume: Optional[bool] = None,
        exposed_ports: Optional[Sequence[int]] = None,
        secrets: Optional[Sequence[str]] = None,
        network: Optional[Mapping[str, Sequence[str]]] = None,
        volumes: Optional[Sequence[Mapping[str, Any]]] = None,
        wait: bool = True,
        timeout: float = DEFAULT_WAIT,
        idempotency_key: Optional[str] = None,
        **params: Any,
    ) -> Sandbox:
        """
        Creates a sandbox and returns it once it is running (a SvcError `sandbox_error` if it ends
        in `error`); `wait=False` returns the `pending` record at once. The other fields of the
        API's body (`parent_id`, `region`, `type`...) pass through `**params`.
        `idempotency_key`: the same key and body again answer the same sandbox.
        """
        check_str(name, "name", required=False)
        check_str(template, "template", required=False)
        check_str_map(env, "env")
        for field, value in (
            ("cpu", cpu),
            ("ram_mb", ram_mb),
            ("disk_gb", disk_gb),
            ("timeout_s", timeout_s),
            ("idle_timeout_s", idle_timeout_s),
            ("auto_delete_s", auto_delete_s),
        ):
            check_int(value, field, required=False, low=1)
        check_str(on_timeout, "on_timeout", required=False)
        if auto_resume is not None and not isinstance(auto_resume, bool):
            invalid("auto_resume", f"must be a bool, not {type(auto_resume).__name__}")
        check_mapping(metadata, "metadata")
        check_mapping(network, "network")
        check_str_list(secrets, "secrets", required=False)
        if exposed_ports is not None:
            for i, port in enumerate(exposed_ports):
                check_int(port, f"exposed_ports.{i}", low=1)
        check_str(idempotency_key, "idempotency_key", required=False)
        body = drop_none(
            {
                "name": name,
                "template": template,
                "env": env,
                "cpu": cpu,
                "ram_mb": ram_mb,
                "disk_gb": disk_gb,
                "metadata": metadata,
                "timeout_s": timeout_s,
                "idle_timeout_s": idle_timeout_s,
                "on_timeout": on_timeout,
                "auto_delete_s": auto_delete_s,
                "auto_resume": auto_resume,
                "exposed_ports": exposed_ports,
                "secrets": secrets,
                "network": network,
                "volumes": volumes,
                **params,
            }
        )
        record = self._http.json("POST", "/v1/sandboxes", json=body, headers={"Idempotency-Key": idempotency_key})
        sandbox = self._wrap(record)
        return sandbox.wait_for("running", timeout) if wait else sandbox

    def get(self, sandbox_id: str) -> Sandbox:
        check_str(sandbox_id, "sandbox_id")
        return self._wrap(self._http.json("GET", f"/v1/sandboxes/{segment(sandbox_id)}"))

    def list(
        self,
        *,
        limit: Optional[int] = None,
        offset: Optional[int] = None,
        state: Optional[Union[str, Sequence[str]]] = None,
        paginated: Optional[bool] = None,
    ) -> SandboxPage:
        """Newest first. `state`: one state or several; `paginated=False`: every row (up to 10,000) at once."""
        check_int(limit, "limit", required=False, low=1)
        check_int(offset, "offset", required=False, low=0)
        page = self._http.json(
            "GET",
            "/v1/sandboxes",
            query={
                "limit": limit,
                "offset": offset,
                "state": state if state is None or isinstance(state, str) else ",".join(state),
                "paginated": paginated,
            },
        )
        return {
            "rows": [self._wrap(record) for record in page["rows"]],
            "total": page["total"],
            "offset": page["offset"],
            "limit": page["limit"],
            "has_more": page["has_more"],
        }
