"""
A sandbox through the client, on the real stack: create (once running), get, list, exec (whole,
with callbacks, streamed), files, background processes, the terminal, stats, network, ports,
secrets, snapshot, stop and start, delete; the events iterator and its resumption.
"""

from __future__ import annotations

import io
import os
import re
import time
import unittest
from typing import List

from support import CuttingProxy, client, unique

from svc import OutputChunk, Process, Sandbox, Svc, SvcError
from svc.types import FileWatchEvent


class Sandboxes(unittest.TestCase):
    svc: Svc
    sbx: Sandbox

    @classmethod
    def setUpClass(cls) -> None:
        cls.svc = client()
        cls.sbx = cls.svc.sandboxes.create(unique("py-sbx"), exposed_ports=[8000], metadata={"by": "python"})

    @classmethod
    def tearDownClass(cls) -> None:
        try:
            cls.sbx.delete()
        finally:
            cls.svc.close()

    def test_created_running_get_list_refresh(self) -> None:
        self.assertEqual(self.sbx.state, "running")
        self.assertTrue(self.sbx.id.startswith("sbx_"))
        self.assertEqual(self.sbx.record["metadata"], {"by": "python"})
        got = self.svc.sandboxes.get(self.sbx.id)
        self.assertIsInstance(got, Sandbox)
        self.assertEqual((got.id, got.name, got.state), (self.sbx.id, self.sbx.name, "running"))
        page = self.svc.sandboxes.list(state=["running", "starting"], limit=500)
        self.assertIn(self.sbx.id, [s.id for s in page["rows"]])
        self.assertTrue(all(isinstance(s, Sandbox) for s in page["rows"]))
        self.assertGreaterEqual(page["total"], 1)
        self.assertIs(self.sbx.refresh(), self.sbx)
        self.assertIs(self.sbx.wait_for("running"), self.sbx)

    def test_fork(self) -> None:
        self.sbx.exec("echo forked > /tmp/fork-note")
        forks = self.sbx.fork(2, name=unique("py-fork"))
        try:
            self.assertEqual(len(forks), 2)
            for fork in forks:
                self.assertIsInstance(fork, Sandbox)
                self.assertEqual(fork.state, "running")
                self.assertEqual(fork.exec("cat /tmp/fork-note")["stdout"], "forked\n")
            forks[0].exec("echo mine > /tmp/fork-note")
            self.assertEqual(forks[1].exec("cat /tmp/fork-note")["stdout"], "forked\n")
            with self.assertRaises(SvcError) as refused:
                self.sbx.fork(21)
            self.assertEqual((refused.exception.status, refused.exception.code), (400, "invalid_request"))
        finally:
            for fork in forks:
                fork.delete()

    def test_exec(self) -> None:
        result = self.sbx.exec(["sh", "-c", "echo hello; echo oops >&2; exit 3"])
        self.assertEqual((result["exit_code"], result["stdout"], result["stderr"]), (3, "hello\n", "oops\n"))
        self.assertFalse(result["truncated"])
        shell = self.sbx.exec("cat; pwd; echo $GREETING", cwd="/tmp", env={"GREETING": "hi"}, stdin="fed\n", timeout_ms=20_000)
        self.assertEqual(shell["stdout"], "fed\n/tmp\nhi\n")

    def test_exec_callbacks(self) -> None:
        pieces: List[str] = []
        errors: List[str] = []
        result = self.sbx.exec("printf 'one\\ntwo\\n'; echo bad >&2", on_stdout=pieces.append, on_stderr=errors.append)
        self.assertEqual((result["exit_code"], result["stdout"], result["stderr"]), (0, "one\ntwo\n", "bad\n"))
        self.assertEqual(("".join(pieces), "".join(errors)), ("one\ntwo\n", "bad\n"))

    def test_exec_stream(self) -> None:
        chunks: List[OutputChunk] = list(self.sbx.exec_stream(["sh", "-c", "echo a; echo b >&2; exit 2"]))
        labels = [f"exit:{c.exit_code}" if c.type == "exit" else f"{c.type}:{c.text}" for c in chunks]
        self.assertEqual(labels, ["stdout:a\n", "stderr:b\n", "exit:2"])
        # Left early: the stream closes, the sandbox answers the next call.
        stream = self.sbx.exec_stream("echo first; sleep 2; echo late")
        self.assertEqual(next(stream).data, b"first\n")
        stream.close()
        self.assertEqual(self.sbx.exec("echo next")["stdout"], "next\n")

    def test_files(self) -> None:
        self.sbx.files.write("/tmp/note.txt", "written by python")
        self.sbx.files.write("/tmp/bytes.bin", bytes([0, 1, 2, 255]))
        self.sbx.files.write("/tmp/stream.bin", io.BytesIO(b"x" * 100_000))
        self.assertEqual(self.sbx.files.read_text("/tmp/note.txt"), "written by python")
        self.assertEqual(self.sbx.files.read("/tmp/bytes.bin"), bytes([0, 1, 2, 255]))
        self.assertEqual(self.sbx.files.read("/tmp/stream.bin"), b"x" * 100_000)
        listing = {f"{e['name']}:{e['type']}" for e in self.sbx.files.list("/tmp")}
        self.assertTrue({"note.txt:file", "bytes.bin:file", "stream.bin:file"} <= listing, listing)
        with self.assertRaises(SvcError) as folder:
            self.sbx.files.read("/tmp")
        self.assertEqual(folder.exception.code, "not_a_file")
        with self.assertRaises(SvcError) as file:
            self.sbx.files.list("/tmp/note.txt")
        self.assertEqual(file.exception.code, "not_a_folder")
        with self.assertRaises(SvcError) as missing:
            self.sbx.files.read("/tmp/no-such-file")
        self.assertEqual((missing.exception.status, missing.exception.code), (404, "not_found"))
        with self.assertRaises(SvcError) as relative:
            self.sbx.files.read("tmp/note.txt")
        self.assertEqual((relative.exception.status, relative.exception.code), (0, "invalid_argument"))

    def test_files_stat_mkdir_move_remove(self) -> None:
        made = self.sbx.files.mkdir("/tmp/py/d", mode="0700")
        self.assertEqual((made["path"], made["type"], made["mode"]), ("/tmp/py/d", "dir", "0700"))
        self.assertEqual(self.sbx.files.mkdir("/tmp/py/d")["type"], "dir")
        with self.assertRaises(SvcError) as exists:
            self.sbx.files.mkdir("/tmp/py/d", parents=False)
        self.assertEqual((exists.exception.status, exists.exception.code), (409, "conflict"))
        self.sbx.files.write("/tmp/py/a.txt", "abcd")
        info = self.sbx.files.stat("/tmp/py/a.txt")
        self.assertEqual((info["name"], info["type"], info["size"], info["target"]), ("a.txt", "file", 4, None))
        self.sbx.files.write("/tmp/py/b.txt", "b")
        with self.assertRaises(SvcError) as taken:
            self.sbx.files.move("/tmp/py/a.txt", "/tmp/py/b.txt")
        self.assertEqual(taken.exception.code, "conflict")
        moved = self.sbx.files.move("/tmp/py/a.txt", "/tmp/py/b.txt", overwrite=True)
        self.assertEqual((moved["path"], moved["size"]), ("/tmp/py/b.txt", 4))
        with self.assertRaises(SvcError) as not_empty:
            self.sbx.files.remove("/tmp/py")
        self.assertEqual((not_empty.exception.status, not_empty.exception.code), (409, "conflict"))
        self.sbx.files.remove("/tmp/py", recursive=True)
        with self.assertRaises(SvcError) as gone:
            self.sbx.files.stat("/tmp/py")
        self.assertEqual((gone.exception.status, gone.exception.code), (404, "not_found"))
        with self.assertRaises(SvcError) as kernel:
            self.sbx.files.stat("/proc/1/environ")
        self.assertEqual((kernel.exception.status, kernel.exception.code), (400, "invalid_request"))

    def test_files_upload_download_watch(self) -> None:
        import io
        import os
        import tarfile
        import tempfile
        import threading

        with tempfile.TemporaryDirectory() as local, tempfile.TemporaryDirectory() as back:
            os.makedirs(os.path.join(local, "src", "deep"))
            with open(os.path.join(local, "src", "deep", "main.py"), "w") as text:
                text.write("print('hi')\n")
            with open(os.path.join(local, "data.bin"), "wb") as binary:
                binary.write(b"\x03" * 300_000)
            os.symlink("src/deep/main.py", os.path.join(local, "main"))
            self.sbx.files.upload(local, "/tmp/pyup")
            self.assertEqual(self.sbx.files.read_text("/tmp/pyup/src/deep/main.py"), "print('hi')\n")
            self.assertEqual(self.sbx.files.stat("/tmp/pyup/main")["target"], "src/deep/main.py")
            count = self.sbx.files.download("/tmp/pyup", back)
            self.assertGreaterEqual(count, 5)
            with open(os.path.join(back, "data.bin"), "rb") as copy:
                self.assertEqual(len(copy.read()), 300_000)
            self.assertEqual(os.readlink(os.path.join(back, "main")), "src/deep/main.py")
        # A hostile tar: 400, nothing written.
        hostile = io.BytesIO()
        with tarfile.open(fileobj=hostile, mode="w") as archive:
            info = tarfile.TarInfo("../evil")
            archive.addfile(info, io.BytesIO(b""))
        hostile.seek(0)
        with self.assertRaises(SvcError) as refused:
            self.sbx.files.upload(hostile, "/tmp/pyhostile")
        self.assertEqual((refused.exception.status, refused.exception.code), (400, "invalid_request"))
        # watch: an event for a file made after the watch began.
        events = self.sbx.files.watch("/tmp/pyup")
        first: List[FileWatchEvent] = []
        def read() -> None:
            for event in events:
                first.append(event)
                if event["path"] == "/tmp/pyup/new.txt":
                    return

        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(1.5)
        self.sbx.files.write("/tmp/pyup/new.txt", "x")
        reader.join(30)
        events.close()
        # A write lands under a temp name and is renamed: the file appears by a move.
        self.assertEqual(first[-1]["path"], "/tmp/pyup/new.txt")
        self.assertIn(first[-1]["type"], ("create", "move"))

    def test_processes(self) -> None:
        sleeper = self.sbx.processes.start("echo started; echo warn >&2; exec sleep 300")
        self.assertIsInstance(sleeper, Process)
        self.assertEqual(sleeper.state, "running")
        self.assertIn(f"{sleeper.pid}:running", [f"{p.pid}:{p.state}" for p in self.sbx.processes.list()])
        followed = b""
        output = sleeper.output(follow=True)
        for chunk in output:
            followed += chunk.data
            if b"started" in followed:
                break
        output.close()
        sleeper.kill("TERM")
        sleeper.wait(timeout=60)
        self.assertEqual((sleeper.state, sleeper.exit_code, sleeper.record["reason"]), ("exited", 143, "killed"))
        logs = self.sbx.processes.logs(sleeper.pid)
        self.assertEqual((logs.stdout, logs.stderr), ("started\n", "warn\n"))
        self.assertIsNotNone(logs.exit)
        with self.assertRaises(SvcError) as again:
            sleeper.kill("KILL")
        self.assertEqual((again.exception.status, again.exception.code), (409, "conflict"))
        with self.assertRaises(SvcError) as missing:
            self.sbx.processes.get(999999)
        self.assertEqual((missing.exception.status, missing.exception.code), (404, "not_found"))

        counter = self.sbx.processes.start(["sh", "-c", "for i in 1 2 3; do echo $i; done; exit 4"], cwd="/tmp", env={"A": "1"})
        chunks = list(counter.output(follow=True))
        self.assertEqual(b"".join(c.data for c in chunks if c.type == "stdout"), b"1\n2\n3\n")
        self.assertEqual((chunks[-1].type, chunks[-1].exit_code, chunks[-1].reason), ("exit", 4, "exited"))
        self.assertEqual(counter.refresh().exit_code, 4)

        cat = self.sbx.processes.start("cat", stdin=True)
        cat.write_stdin("fed through stdin\n")
        cat.close_stdin()
        cat.wait(timeout=60)
        self.assertEqual((cat.exit_code, cat.logs().stdout), (0, "fed through stdin\n"))

    def test_terminal(self) -> None:
        with self.sbx.terminal(cols=100, rows=30) as terminal:
            terminal.resize(120, 40)
            terminal.write("echo hi from the $(echo terminal); stty size; exit 7\n")
            self.assertEqual(terminal.wait(timeout=60), 7)
            screen = b"".join(terminal.output).decode("utf-8", "replace")
        self.assertIn("hi from the terminal", screen)
        self.assertIn("40 120", screen)
        # Its bytes as an iterator, until the shell's end.
        with self.sbx.terminal() as terminal:
            terminal.write("echo iterated; exit 0\n")
            seen = b"".join(terminal)
        self.assertIn(b"iterated", seen)
        self.assertEqual(terminal.exit_code, 0)

    def test_logs_and_metrics(self) -> None:
        deadline = time.time() + 60
        while "lifecycle: started" not in self.sbx.logs() and time.time() < deadline:
            time.sleep(0.5)
        self.assertRegex(self.sbx.logs(), r"(?m)^\S+Z lifecycle: started$")
        self.assertIn("lifecycle: started", self.sbx.logs(since="1d"))
        self.assertEqual(self.sbx.logs(since="2999-01-01T00:00:00Z"), "")
        lines = self.sbx.follow_logs(timeout=30)
        try:
            self.assertRegex(next(line for line in lines if line.endswith("lifecycle: started")), r"Z lifecycle: started$")
        finally:
            lines.close()
        samples = self.sbx.metrics()
        while not samples and time.time() < deadline:
            time.sleep(0.5)
            samples = self.sbx.metrics(since="1h")
        self.assertGreater(len(samples), 0)
        self.assertGreater(samples[0]["mem_bytes"], 0)
        self.assertGreaterEqual(samples[0]["pids"], 1)
        with self.assertRaises(SvcError) as refused:
            self.sbx.metrics(since="yesterday")
        self.assertEqual(refused.exception.code, "invalid_request")

    def test_follow_logs_across_a_cut_connection(self) -> None:
        # A line every 100 ms, numbered: a repeat or a gap after the reconnection shows in them.
        template = self.svc.templates.create(
            unique("py-ticker"), start_cmd="i=0; while :; do i=$((i+1)); echo tick-$i; sleep 0.1; done"
        )
        proxy = CuttingProxy(os.environ["SVC_API_URL"])
        through = Svc(proxy.url, os.environ["SVC_API_KEY"])
        sbx = self.svc.sandboxes.create(unique("py-ticker"), template=template["id"])
        try:
            ticks: List[int] = []
            lines = through.sandboxes.get(sbx.id).follow_logs(timeout=30)
            try:
                for line in lines:
                    found = re.search(r"start_cmd: tick-(\d+)$", line)
                    if found is None:
                        continue
                    ticks.append(int(found.group(1)))
                    if len(ticks) == 10:
                        proxy.cut()
                    if len(ticks) >= 30:
                        break
            finally:
                lines.close()
            # Past the cut (a stream that ended there would stop at 10), with no hole and no repeat.
            self.assertEqual(len(ticks), 30)
            self.assertEqual(ticks, list(range(ticks[0], ticks[0] + 30)))
        finally:
            sbx.delete()
            through.close()
            proxy.close()

    def test_stats_network_port_secret(self) -> None:
        stats = self.sbx.stats()
        self.assertGreaterEqual(stats["pids"], 1)
        self.assertGreater(stats["memory_bytes"], 0)
        self.sbx.set_network(allow_out=["example.com"], deny_out=["203.0.113.0/24"])
        self.assertEqual(self.sbx.record["network"], {"allow_out": ["example.com"], "deny_out": ["203.0.113.0/24"]})
        self.sbx.set_network()
        token = self.sbx.expose_port(8000, ttl_s=60)
        self.assertIn(self.sbx.id, token["url"])
        self.assertTrue(token["token"])
        secret = self.svc.secrets.create(unique("py-bound"), "bound-secret-value", allowed_hosts=["example.com"])
        self.sbx.bind_secret(secret["id"])
        self.assertIn(secret["id"], self.sbx.refresh().record["secrets"])


class Lifecycle(unittest.TestCase):
    """A sandbox of its own: events followed from before its creation, snapshot, stop, start, delete."""

    def test_timeouts_keep_alive_and_stop_reason(self) -> None:
        svc = client()
        self.addCleanup(svc.close)
        with svc.sandboxes.create(unique("py-timeout"), timeout_s=600, idle_timeout_s=300, auto_resume=True) as sbx:
            record = sbx.record
            self.assertEqual((record["timeout_s"], record["idle_timeout_s"], record["on_timeout"]), (600, 300, "stop"))
            self.assertEqual((record["auto_resume"], record["stop_reason"]), (True, None))
            self.assertIsNotNone(record["expiresAt"])
            self.assertIs(sbx.set_timeout(timeout_s=900), sbx)
            self.assertEqual((sbx.record["timeout_s"], sbx.record["idle_timeout_s"]), (900, 300))
            sbx.set_timeout(idle_timeout_s=None)
            self.assertEqual((sbx.record["timeout_s"], sbx.record["idle_timeout_s"]), (900, None))
            with self.assertRaises(SvcError) as refused:
                sbx.set_timeout(timeout_s=2_592_001)
            self.assertEqual(refused.exception.code, "invalid_request")
            sbx.stop()
            self.assertEqual(sbx.record["stop_reason"], "user")
            # auto_resume: a call on the stopped sandbox starts it.
            self.assertEqual(sbx.exec("echo back")["stdout"], "back\n")
            self.assertIsNone(sbx.refresh().record["stop_reason"])

    def test_events_stop_start_snapshot_delete(self) -> None:
        svc = client()
        self.addCleanup(svc.close)
        events = svc.events(["sandbox.state_updated", "sandbox.created", "sandbox.deleted"])
        with events, svc.sandboxes.create(unique("py-life")) as sbx:
            self.assertEqual(sbx.state, "running")
            sbx.exec("echo kept > /root/kept.txt")
            template = sbx.snapshot(unique("py-snap"))
            self.assertEqual(template["state"], "ready")
            svc.templates.delete(template["id"])

            sbx.stop()
            self.assertEqual(sbx.state, "stopped")
            with self.assertRaises(SvcError) as stopped:
                sbx.terminal()
            self.assertEqual((stopped.exception.status, stopped.exception.code), (409, "conflict"))
            with self.assertRaises(SvcError) as exec_stopped:
                sbx.exec("true")
            self.assertEqual(exec_stopped.exception.status, 409)
            sbx.start()
            self.assertEqual(sbx.state, "running")
            self.assertEqual(sbx.exec("cat /root/kept.txt")["stdout"], "kept\n")
            sbx.delete(wait=True)
            self.assertEqual(sbx.state, "deleted")

            mine = []
            for event in events:
                if event.data.get("sandbox_id") != sbx.id:
                    continue
                mine.append(event)
                if event.event == "sandbox.deleted":
                    break
        labels = [f"{e.event}:{e.data['state']}" if e.event == "sandbox.state_updated" else e.event for e in mine]
        self.assertEqual(labels[:3], ["sandbox.state_updated:starting", "sandbox.created", "sandbox.state_updated:running"])
        self.assertEqual(labels[-3:], ["sandbox.state_updated:deleting", "sandbox.state_updated:deleted", "sandbox.deleted"])
        self.assertIn("sandbox.state_updated:stopped", labels)

        # Resumed after the first event: the later ones again, in order (Last-Event-ID).
        resumed = []
        with svc.events(last_event_id=mine[0].id) as again:
            for event in again:
                if event.data.get("sandbox_id") != sbx.id:
                    continue
                resumed.append(event.id)
                if event.event == "sandbox.deleted":
                    break
        self.assertEqual(resumed, [e.id for e in mine[1:]])

    def test_context_manager_deletes(self) -> None:
        svc = client()
        self.addCleanup(svc.close)
        with svc.sandboxes.create(unique("py-with"), wait=False) as sbx:
            self.assertIn(sbx.state, ("pending", "starting", "running"))
            sandbox_id = sbx.id
        self.assertIn(svc.sandboxes.get(sandbox_id).state, ("deleting", "deleted"))


if __name__ == "__main__":
    unittest.main()
