"""
`AsyncSvc` on the real stack: the same methods as coroutines and async iterators, and the event
loop kept free while a call waits (a ticker task keeps running during a 1 s command).
"""

from __future__ import annotations

import asyncio
import inspect
import unittest
from typing import List, Set, Tuple, cast

from support import client, unique

from svc import AsyncSvc, Process, Sandbox, Svc, SvcError
from svc.aio import AsyncProcess, AsyncSandbox, AsyncSandboxes, _Creating
from svc.types import ProcessRecord, SandboxRecord


def public(obj: object) -> Set[str]:
    return {name for name in dir(obj) if not name.startswith("_")}


class Surface(unittest.TestCase):
    """AsyncSvc has every method of Svc, resource by resource and object by object, as coroutines."""

    def test_the_same_methods(self) -> None:
        svc = Svc("http://127.0.0.1:1", "svc_live_x")
        asynchronous = AsyncSvc("http://127.0.0.1:1", "svc_live_x")
        self.addCleanup(asynchronous._executor.shutdown)
        record = cast(SandboxRecord, {"id": "sbx_1", "name": "n", "state": "running"})
        sandbox = Sandbox(svc._http, svc.templates, record)
        process = Process(sandbox.processes, cast(ProcessRecord, {"pid": 1, "state": "running", "exit_code": None}))
        async_sandbox = AsyncSandbox(asynchronous._run, sandbox)
        pairs: List[Tuple[object, object]] = [
            (svc, asynchronous),
            (sandbox, async_sandbox),
            (sandbox.files, async_sandbox.files),
            (sandbox.processes, async_sandbox.processes),
            (process, AsyncProcess(asynchronous._run, process)),
        ]
        for name in ("sandboxes", "templates", "volumes", "apps", "secrets", "webhooks", "keys", "org", "audit", "billing", "workers"):
            pairs.append((getattr(svc, name), getattr(asynchronous, name)))
        iterators = {"events", "exec_stream", "output", "follow_logs", "watch"}
        for sync, other in pairs:
            missing = public(sync) - public(other) - {"close"}
            self.assertEqual(missing, set(), f"{type(other).__name__} lacks {missing}")
            for name in public(sync):
                value = getattr(other, name, None)
                if not callable(value) or name in iterators or name in ("verify_webhook", "close", "aclose"):
                    continue
                if isinstance(other, AsyncSandboxes) and name == "create":
                    # Awaitable, or an async context manager that deletes the sandbox at the end.
                    self.assertTrue(hasattr(_Creating, "__await__") and hasattr(_Creating, "__aenter__"))
                    continue
                self.assertTrue(inspect.iscoroutinefunction(value), f"{type(other).__name__}.{name} is not a coroutine function")


class Async(unittest.IsolatedAsyncioTestCase):
    async def test_the_same_surface_without_blocking_the_loop(self) -> None:
        client().close()  # skips without a stack
        async with AsyncSvc() as svc:
            events = svc.events(["sandbox.created"])
            await events.start()
            async with svc.sandboxes.create(unique("py-async")) as sbx:
                self.assertIsInstance(sbx, AsyncSandbox)
                self.assertEqual(sbx.state, "running")

                ticks = 0

                async def ticker() -> None:
                    nonlocal ticks
                    while True:
                        await asyncio.sleep(0.01)
                        ticks += 1

                task = asyncio.create_task(ticker())
                result = await sbx.exec("sleep 1; echo slept")
                task.cancel()
                self.assertEqual(result["stdout"], "slept\n")
                # The loop ran the ticker while the command ran: the call did not block it.
                self.assertGreater(ticks, 10)

                # Calls at once, each on a connection of its own thread.
                outs = await asyncio.gather(*(sbx.exec(["echo", str(i)]) for i in range(4)))
                self.assertEqual([o["stdout"] for o in outs], ["0\n", "1\n", "2\n", "3\n"])

                labels: List[str] = []
                async for chunk in sbx.exec_stream(["sh", "-c", "echo a; echo b >&2; exit 2"]):
                    labels.append(f"exit:{chunk.exit_code}" if chunk.type == "exit" else f"{chunk.type}:{chunk.text}")
                self.assertEqual(labels, ["stdout:a\n", "stderr:b\n", "exit:2"])

                await sbx.files.write("/tmp/async.txt", "from asyncio")
                self.assertEqual(await sbx.files.read_text("/tmp/async.txt"), "from asyncio")
                self.assertIn("async.txt", [e["name"] for e in await sbx.files.list("/tmp")])

                # Folders up and down, and a watch, as coroutines and an async iterator.
                import tempfile

                with tempfile.TemporaryDirectory() as local, tempfile.TemporaryDirectory() as back:
                    with open(f"{local}/a.txt", "w") as f:
                        f.write("async folder")
                    await sbx.files.upload(local, "/tmp/aup")
                    # The folder itself ("./") and its file.
                    self.assertEqual(await sbx.files.download("/tmp/aup", back), 2)
                    with open(f"{back}/a.txt") as f:
                        self.assertEqual(f.read(), "async folder")

                async def first_change() -> str:
                    async for event in sbx.files.watch("/tmp/aup"):
                        return event["path"]
                    return ""

                watching = asyncio.ensure_future(first_change())
                await asyncio.sleep(1.5)
                await sbx.exec(["touch", "/tmp/aup/b.txt"])
                self.assertEqual(await asyncio.wait_for(watching, 30), "/tmp/aup/b.txt")

                process = await sbx.processes.start("echo bg; exit 5")
                self.assertIsInstance(process, AsyncProcess)
                await process.wait(timeout=60)
                self.assertEqual((process.state, process.exit_code), ("exited", 5))
                self.assertEqual((await process.logs()).stdout, "bg\n")
                self.assertIn(process.pid, [p.pid for p in await sbx.processes.list()])

                terminal = await sbx.terminal()
                async with terminal:
                    terminal.write("exit 3\n")
                    self.assertEqual(await terminal.wait(60), 3)

                self.assertIn(sbx.id, [s.id for s in (await svc.sandboxes.list(limit=500))["rows"]])
                self.assertEqual((await svc.sandboxes.get(sbx.id)).id, sbx.id)
                self.assertGreaterEqual((await sbx.stats())["pids"], 1)
                sandbox_id = sbx.id

            async for event in events:
                if event.data.get("sandbox_id") == sandbox_id:
                    self.assertEqual(event.event, "sandbox.created")
                    break
            await events.aclose()
            self.assertIn((await svc.sandboxes.get(sandbox_id)).state, ("deleting", "deleted"))

            self.assertTrue((await svc.whoami())["org"]["id"].startswith("org_"))
            self.assertEqual((await svc.health())["status"], "ok")
            self.assertIsInstance((await svc.usage())["spend_micros"], int)
            self.assertIsInstance((await svc.templates.list())["rows"], list)
            self.assertIsInstance((await svc.volumes.list())["volumes"], list)
            with self.assertRaises(SvcError) as missing:
                await svc.sandboxes.get("sbx_" + "0" * 26)
            self.assertEqual((missing.exception.status, missing.exception.code), (404, "not_found"))


if __name__ == "__main__":
    unittest.main()
