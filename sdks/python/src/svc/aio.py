"""
`AsyncSvc`: the same client for asyncio, with the same resources and methods, each a coroutine
(and each iterator an async iterator).

How it keeps the event loop free: every call runs the synchronous client's method in a thread
pool of the client's own (`max_threads`, default 16) through `loop.run_in_executor`; the loop
only awaits its future. Each worker thread keeps its own HTTP connection alive, so concurrent
calls run on concurrent connections. An async iterator (streamed exec, process output, events,
the terminal's output) takes a worker thread for each `__anext__` while it waits for the next
piece: at most `max_threads` of them wait at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Generator,
    Generic,
    Iterator,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Type,
    Tuple,
    TypedDict,
    TypeVar,
    cast,
    Union,
)

from ._http import SvcError
from .client import Svc
from .contexts import CodeContext, Contexts
from .events import EventStream, SvcEvent
from .processes import Process, Processes
from .resources import Apps, Audit, Billing, Keys, OrgResource, Secrets, Templates, Volumes, Webhooks, Workers
from .sandboxes import DEFAULT_WAIT, KEEP, Files, Sandbox, Sandboxes
from .terminal import Terminal
from .types import FileWatchEvent, ProcessRecord, SandboxRecord, Usage, WhoAmI
from .webhooks import Signature, verify_webhook

if TYPE_CHECKING:
    from typing_extensions import ParamSpec

    P = ParamSpec("P")

__all__ = ["AsyncIter", "AsyncProcess", "AsyncSandbox", "AsyncSandboxPage", "AsyncSvc", "AsyncTerminal"]

R = TypeVar("R")
T = TypeVar("T")


def _step(iterator: Iterator[T]) -> Tuple[bool, T]:
    # StopIteration cannot cross a future: the end is said by the flag.
    for item in iterator:
        return True, item
    return False, cast(T, None)


class _Runner:
    """Turns a blocking function into a coroutine function run in the client's thread pool."""

    def __init__(self, executor: concurrent.futures.ThreadPoolExecutor) -> None:
        self.executor = executor

    def __call__(self, fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
        executor = self.executor

        @functools.wraps(fn)
        async def call(*args: P.args, **kwargs: P.kwargs) -> R:
            return await asyncio.get_running_loop().run_in_executor(executor, functools.partial(fn, *args, **kwargs))

        return call

    def iterator(self, fn: Callable[P, Iterator[T]]) -> Callable[P, AsyncIter[T]]:
        """An iterator-returning function as one returning an async iterator (started on first use)."""

        def call(*args: P.args, **kwargs: P.kwargs) -> AsyncIter[T]:
            return AsyncIter(self, functools.partial(fn, *args, **kwargs))

        return call


class AsyncIter(Generic[T]):
    """
    An async iterator over a blocking one: each step waits in a worker thread. `aclose()` (or
    the end of an `async with` block) closes the underlying stream.
    """

    def __init__(self, run: _Runner, make: Callable[[], Iterator[T]]) -> None:
        self._run = run
        self._make = make
        self._iterator: Optional[Iterator[T]] = None

    async def start(self) -> AsyncIter[T]:
        """Opens it now (the events stream connects: nothing after this returns is missed)."""
        if self._iterator is None:
            self._iterator = await self._run(self._make)()
        return self

    def __aiter__(self) -> AsyncIter[T]:
        return self

    async def __anext__(self) -> T:
        await self.start()
        assert self._iterator is not None
        more, item = await self._run(_step)(self._iterator)
        if not more:
            raise StopAsyncIteration
        return item

    async def aclose(self) -> None:
        iterator = self._iterator
        close = getattr(iterator, "close", None)
        if close is not None:
            await self._run(close)()

    async def __aenter__(self) -> AsyncIter[T]:
        return await self.start()

    async def __aexit__(
        self, kind: Optional[Type[BaseException]], error: Optional[BaseException], trace: Optional[TracebackType]
    ) -> None:
        await self.aclose()


class _Refreshable(Protocol):
    @property
    def state(self) -> str: ...

    def refresh(self) -> Any: ...


S = TypeVar("S", bound=_Refreshable)
V = TypeVar("V", bound="_AsyncView[Any]")


class _AsyncView(Generic[S]):
    """
    What the async views of a synchronous object with a record share: the object (`_sync`), its
    repr, its `state` as of the last answer and `refresh` as a coroutine.
    """

    def __init__(self, run: _Runner, sync: S) -> None:
        self._run = run
        self._sync = sync

    def __repr__(self) -> str:
        return f"Async{self._sync!r}"

    @property
    def state(self) -> str:
        return self._sync.state

    async def refresh(self: V) -> V:
        await self._run(self._sync.refresh)()
        return self


class AsyncProcess(_AsyncView[Process]):
    """A background process (see `svc.Process`), its methods coroutines."""

    def __init__(self, run: _Runner, process: Process) -> None:
        super().__init__(run, process)
        self.output = run.iterator(process.output)
        self.logs = run(process.logs)
        self.write_stdin = run(process.write_stdin)
        self.close_stdin = run(process.close_stdin)
        self.kill = run(process.kill)

    @property
    def pid(self) -> int:
        return self._sync.pid

    @property
    def exit_code(self) -> Optional[int]:
        return self._sync.exit_code

    @property
    def record(self) -> ProcessRecord:
        return self._sync.record

    async def wait(self, timeout: float = 300.0) -> AsyncProcess:
        await self._run(self._sync.wait)(timeout)
        return self


class AsyncProcesses:
    """`sbx.processes` of an `AsyncSandbox`."""

    def __init__(self, run: _Runner, processes: Processes) -> None:
        self._run = run
        self._sync = processes
        self.kill = run(processes.kill)
        self.output = run.iterator(processes.output)
        self.logs = run(processes.logs)
        self.write_stdin = run(processes.write_stdin)
        self.close_stdin = run(processes.close_stdin)

    async def start(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        cwd: Optional[str] = None,
        env: Optional[dict[str, str]] = None,
        stdin: Optional[bool] = None,
    ) -> AsyncProcess:
        process = await self._run(self._sync.start)(cmd, cwd=cwd, env=env, stdin=stdin)
        return AsyncProcess(self._run, process)

    async def list(self) -> List[AsyncProcess]:
        return [AsyncProcess(self._run, p) for p in await self._run(self._sync.list)()]

    async def get(self, pid: int) -> AsyncProcess:
        return AsyncProcess(self._run, await self._run(self._sync.get)(pid))

    async def wait(self, pid: int, timeout: float = 300.0) -> AsyncProcess:
        return AsyncProcess(self._run, await self._run(self._sync.wait)(pid, timeout))


class AsyncFiles:
    """`sbx.files` of an `AsyncSandbox`."""

    def __init__(self, run: _Runner, files: Files) -> None:
        self.write = run(files.write)
        self.read = run(files.read)
        self.read_text = run(files.read_text)
        self.list = run(files.list)
        self.stat = run(files.stat)
        self.mkdir = run(files.mkdir)
        self.move = run(files.move)
        self.remove = run(files.remove)
        self.upload = run(files.upload)
        self.download = run(files.download)
        self._files = files
        self._run = run

    async def watch(self, path: str, *, recursive: bool = True) -> AsyncIterator[FileWatchEvent]:
        """`files.watch` as an async iterator: each event is read in a worker thread."""
        events = self._files.watch(path, recursive=recursive)
        done = object()
        step = self._run(lambda: next(events, done))
        try:
            while True:
                event = await step()
                if event is done:
                    return
                yield event  # type: ignore[misc]
        finally:
            events.close()


class AsyncCodeContext(_AsyncView[CodeContext]):
    """A code context (see `svc.CodeContext`): `run`, `interrupt`, `delete` and `refresh` are coroutines."""

    def __init__(self, run: _Runner, context: CodeContext) -> None:
        super().__init__(run, context)
        self.run = run(context.run)
        self.interrupt = run(context.interrupt)
        self.delete = run(context.delete)

    @property
    def id(self) -> str:
        return self._sync.id

    @property
    def record(self) -> Dict[str, Any]:
        return self._sync.record


class AsyncContexts:
    """`sbx.contexts` of an `AsyncSandbox`."""

    def __init__(self, run: _Runner, contexts: Contexts) -> None:
        self._run = run
        self._sync = contexts
        self.run = run(contexts.run)
        self.interrupt = run(contexts.interrupt)
        self.delete = run(contexts.delete)

    async def create(
        self, language: str = "python", cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None
    ) -> AsyncCodeContext:
        return AsyncCodeContext(self._run, await self._run(self._sync.create)(language, cwd, env))

    async def list(self) -> List[AsyncCodeContext]:
        return [AsyncCodeContext(self._run, c) for c in await self._run(self._sync.list)()]

    async def get(self, context_id: str) -> AsyncCodeContext:
        return AsyncCodeContext(self._run, await self._run(self._sync.get)(context_id))


class AsyncTerminal:
    """A terminal (see `svc.Terminal`): `write`, `resize` and `close` are quick sends; `read` and `wait` wait in a thread."""

    def __init__(self, run: _Runner, terminal: Terminal) -> None:
        self._sync = terminal
        self.write = terminal.write
        self.resize = terminal.resize
        self.read = run(terminal.read)
        self.wait = run(terminal.wait)
        self.close = terminal.close

    @property
    def exit_code(self) -> Optional[int]:
        return self._sync.exit_code

    @property
    def output(self) -> List[bytes]:
        return self._sync.output

    async def __aenter__(self) -> AsyncTerminal:
        return self

    async def __aexit__(
        self, kind: Optional[Type[BaseException]], error: Optional[BaseException], trace: Optional[TracebackType]
    ) -> None:
        self._sync.close()


class AsyncSandbox(_AsyncView[Sandbox]):
    """A sandbox (see `svc.Sandbox`); `async with` deletes it at the end of the block."""

    def __init__(self, run: _Runner, sandbox: Sandbox) -> None:
        super().__init__(run, sandbox)
        self.processes = AsyncProcesses(run, sandbox.processes)
        self.files = AsyncFiles(run, sandbox.files)
        self.exec = run(sandbox.exec)
        self.exec_stream = run.iterator(sandbox.exec_stream)
        self.stats = run(sandbox.stats)
        self.logs = run(sandbox.logs)
        self.follow_logs = run.iterator(sandbox.follow_logs)
        self.metrics = run(sandbox.metrics)
        self.bind_secret = run(sandbox.bind_secret)
        self.expose_port = run(sandbox.expose_port)
        self.snapshot = run(sandbox.snapshot)
        self.contexts = AsyncContexts(run, sandbox.contexts)
        self.run_code = run(sandbox.run_code)

    @property
    def id(self) -> str:
        return self._sync.id

    @property
    def name(self) -> str:
        return self._sync.name

    @property
    def record(self) -> SandboxRecord:
        return self._sync.record

    async def wait_for(self, states: Union[str, Sequence[str]], timeout: float = DEFAULT_WAIT) -> AsyncSandbox:
        await self._run(self._sync.wait_for)(states, timeout)
        return self

    async def delete(self, wait: bool = False, timeout: float = DEFAULT_WAIT) -> AsyncSandbox:
        await self._run(self._sync.delete)(wait, timeout)
        return self

    async def stop(self, wait: bool = True, timeout: float = DEFAULT_WAIT) -> AsyncSandbox:
        await self._run(self._sync.stop)(wait, timeout)
        return self

    async def start(self, wait: bool = True, timeout: float = DEFAULT_WAIT) -> AsyncSandbox:
        await self._run(self._sync.start)(wait, timeout)
        return self

    async def set_network(
        self, allow_out: Optional[Sequence[str]] = None, deny_out: Optional[Sequence[str]] = None
    ) -> AsyncSandbox:
        await self._run(self._sync.set_network)(allow_out, deny_out)
        return self

    async def set_timeout(self, timeout_s: Any = KEEP, idle_timeout_s: Any = KEEP) -> AsyncSandbox:
        await self._run(self._sync.set_timeout)(timeout_s, idle_timeout_s)
        return self

    async def fork(self, count: int = 1, **options: Any) -> List[AsyncSandbox]:
        """See `Sandbox.fork`."""
        return [AsyncSandbox(self._run, f) for f in await self._run(self._sync.fork)(count, **options)]

    async def terminal(self, cols: int = 80, rows: int = 24, timeout: Optional[float] = None) -> AsyncTerminal:
        return AsyncTerminal(self._run, await self._run(self._sync.terminal)(cols, rows, timeout))

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(
        self, kind: Optional[Type[BaseException]], error: Optional[BaseException], trace: Optional[TracebackType]
    ) -> None:
        try:
            await self.delete()
        except SvcError as failure:
            if failure.status != 404:
                raise


class _Creating:
    """`svc.sandboxes.create(...)`: awaitable (the sandbox), or `async with` (deleted at the end)."""

    def __init__(self, pending: Awaitable[Sandbox], run: _Runner) -> None:
        self._pending = pending
        self._run = run
        self._sandbox: Optional[AsyncSandbox] = None

    async def _create(self) -> AsyncSandbox:
        if self._sandbox is None:
            self._sandbox = AsyncSandbox(self._run, await self._pending)
        return self._sandbox

    def __await__(self) -> Generator[Any, None, AsyncSandbox]:
        return self._create().__await__()

    async def __aenter__(self) -> AsyncSandbox:
        return await self._create()

    async def __aexit__(
        self, kind: Optional[Type[BaseException]], error: Optional[BaseException], trace: Optional[TracebackType]
    ) -> None:
        if self._sandbox is not None:
            await self._sandbox.__aexit__(kind, error, trace)


class AsyncSandboxPage(TypedDict):
    rows: List[AsyncSandbox]
    total: int
    offset: int
    limit: int
    has_more: bool


class AsyncSandboxes:
    """`svc.sandboxes` of an `AsyncSvc`."""

    def __init__(self, run: _Runner, sandboxes: Sandboxes) -> None:
        self._run = run
        self._sync = sandboxes

    def create(self, name: Optional[str] = None, **options: Any) -> _Creating:
        """As `Svc.sandboxes.create`; `await` it, or `async with svc.sandboxes.create() as sbx:`."""
        return _Creating(self._run(self._sync.create)(name, **options), self._run)

    async def get(self, sandbox_id: str) -> AsyncSandbox:
        return AsyncSandbox(self._run, await self._run(self._sync.get)(sandbox_id))

    async def list(
        self,
        *,
        limit: Optional[int] = None,
        offset: Optional[int] = None,
        state: Optional[Union[str, Sequence[str]]] = None,
        paginated: Optional[bool] = None,
    ) -> AsyncSandboxPage:
        """Newest first (see `Svc.sandboxes.list`)."""
        page = await self._run(self._sync.list)(limit=limit, offset=offset, state=state, paginated=paginated)
        return {
            "rows": [AsyncSandbox(self._run, s) for s in page["rows"]],
            "total": page["total"],
            "offset": page["offset"],
            "limit": page["limit"],
            "has_more": page["has_more"],
        }


class _AsyncTemplates:
    def __init__(self, run: _Runner, t: Templates) -> None:
        self.create, self.list, self.get, self.delete = run(t.create), run(t.list), run(t.get), run(t.delete)
        self.logs, self.wait_for, self.follow_logs = run(t.logs), run(t.wait_for), run.iterator(t.follow_logs)
        self.update = run(t.update)


class _AsyncVolumes:
    def __init__(self, run: _Runner, v: Volumes) -> None:
        self.create, self.list, self.get, self.delete = run(v.create), run(v.list), run(v.get), run(v.delete)


class _AsyncApps:
    def __init__(self, run: _Runner, a: Apps) -> None:
        self.create, self.list, self.get, self.delete = run(a.create), run(a.list), run(a.get), run(a.delete)
        self.update, self.scale, self.wait_until_running = run(a.update), run(a.scale), run(a.wait_until_running)


class _AsyncSecrets:
    def __init__(self, run: _Runner, s: Secrets) -> None:
        self.create, self.list, self.get, self.delete = run(s.create), run(s.list), run(s.get), run(s.delete)
        self.rotate, self.update = run(s.rotate), run(s.update)


class _AsyncWebhooks:
    def __init__(self, run: _Runner, w: Webhooks) -> None:
        self.create, self.list, self.get, self.delete = run(w.create), run(w.list), run(w.get), run(w.delete)
        self.update, self.test, self.deliveries, self.retry = run(w.update), run(w.test), run(w.deliveries), run(w.retry)


class _AsyncKeys:
    def __init__(self, run: _Runner, k: Keys) -> None:
        self.create, self.list, self.revoke = run(k.create), run(k.list), run(k.revoke)


class _AsyncOrg:
    def __init__(self, run: _Runner, o: OrgResource) -> None:
        self.get, self.update = run(o.get), run(o.update)


class _AsyncAudit:
    def __init__(self, run: _Runner, a: Audit) -> None:
        self.list = run(a.list)


class _AsyncBilling:
    def __init__(self, run: _Runner, b: Billing) -> None:
        self.usage, self.set_limits = run(b.usage), run(b.set_limits)


class _AsyncWorkers:
    def __init__(self, run: _Runner, w: Workers) -> None:
        self.list = run(w.list)


class AsyncSvc:
    """
    The asyncio client: `AsyncSvc(api_url=None, api_key=None)` with `Svc`'s options and
    resources, every method a coroutine. `async with AsyncSvc() as svc:` (or `await svc.aclose()`)
    ends its threads.
    """

    def __init__(self, api_url: Optional[str] = None, api_key: Optional[str] = None, *, max_threads: int = 16, **options: Any) -> None:
        self.sync = Svc(api_url, api_key, **options)
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="svc-sdk")
        run = self._run = _Runner(self._executor)
        self.sandboxes = AsyncSandboxes(run, self.sync.sandboxes)
        self.templates = _AsyncTemplates(run, self.sync.templates)
        self.volumes = _AsyncVolumes(run, self.sync.volumes)
        self.apps = _AsyncApps(run, self.sync.apps)
        self.secrets = _AsyncSecrets(run, self.sync.secrets)
        self.webhooks = _AsyncWebhooks(run, self.sync.webhooks)
        self.keys = _AsyncKeys(run, self.sync.keys)
        self.org = _AsyncOrg(run, self.sync.org)
        self.audit = _AsyncAudit(run, self.sync.audit)
        self.billing = _AsyncBilling(run, self.sync.billing)
        self.workers = _AsyncWorkers(run, self.sync.workers)

    def __repr__(self) -> str:
        return f"AsyncSvc(api_url={self.sync.api_url!r})"

    @property
    def api_url(self) -> str:
        return self.sync.api_url

    def events(
        self, events: Optional[Sequence[str]] = None, *, last_event_id: Optional[str] = None, reconnect: bool = True
    ) -> AsyncIter[SvcEvent]:
        """The org's events as an async iterator; `await stream.start()` connects before anything else happens."""

        def make() -> EventStream:
            return self.sync.events(events, last_event_id=last_event_id, reconnect=reconnect)

        return AsyncIter(self._run, make)

    async def whoami(self) -> WhoAmI:
        return await self._run(self.sync.whoami)()

    async def health(self) -> dict[str, str]:
        return await self._run(self.sync.health)()

    async def usage(self) -> Usage:
        return await self._run(self.sync.usage)()

    @staticmethod
    def verify_webhook(secret: str, raw_body: Union[bytes, bytearray, str], signature: Signature) -> bool:
        """Pure computation: no thread needed."""
        return verify_webhook(secret, raw_body, signature)

    async def aclose(self) -> None:
        """Ends the worker threads and closes their connections."""
        self._executor.shutdown(wait=False)
        self.sync.close()

    async def __aenter__(self) -> AsyncSvc:
        return self

    async def __aexit__(
        self, kind: Optional[Type[BaseException]], error: Optional[BaseException], trace: Optional[TracebackType]
    ) -> None:
        await self.aclose()


