# The platform's python code-context runner (docs/contract.md#code-contexts), standard library only.
# `serve SOCK`: one interpreter whose namespace persists; each connection on the Unix socket SOCK
# is one run (a JSON request `{code, timeout_ms, stream}` read to its end, a JSON answer; with
# `stream`, the answer as newline-delimited JSON events while the run goes: stdout, stderr as
# written, then result, error, end). `serve-bash SOCK`: the same for one bash it feeds. The
# client the API execs per run is `svc-ctx` (packages/host/native/svc-ctx.c).
import ast, base64, builtins, io, json, linecache, os, signal, socket, sys, time, traceback

KEEP = 256 * 1024  # characters kept of each of stdout and stderr per run
RESULTS = 400 * 1024  # characters of results (figures, values) kept per run


class Capped(io.TextIOBase):
    def __init__(self, name=None, emit=None):
        self.parts, self.size, self.cut = [], 0, False
        self.name, self.emit = name, emit

    def writable(self):
        return True

    def write(self, s):
        s = str(s)
        room = KEEP - self.size
        if len(s) > room:
            s, self.cut = s[:max(room, 0)], True
        self.parts.append(s)
        self.size += len(s)
        if self.emit is not None and s:
            self.emit({"event": self.name, "text": s})
        return len(s)

    def text(self):
        return "".join(self.parts)


# An interrupt (SIGINT) ends the run in progress; one that comes before the run reaches the
# interpreter (the API sends it only while a run is under way) ends that run as it starts.
state = {"in_run": False, "pending": False}


def on_interrupt(_sig, _frame):
    if state["in_run"]:
        raise KeyboardInterrupt
    state["pending"] = True


def interrupt_shell(shell):
    def on_interrupt_shell(_sig, _frame):
        if state["in_run"]:
            state["interrupted"] = True
            shell.signal(signal.SIGINT)
        else:
            state["pending"] = True
    return on_interrupt_shell


def on_alarm(_sig, _frame):
    raise TimeoutError("the run exceeded its time limit")


def serve(path, shell=None):
    os.environ["MPLBACKEND"] = "Agg"
    ns = {"__name__": "__main__", "__builtins__": builtins}
    count = 0
    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGINT, on_interrupt if shell is None else interrupt_shell(shell))
    runner = run_one if shell is None else (lambda _ns, *args: run_bash(shell, *args))
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o600)
    srv.listen(8)
    while True:
        try:
            conn, _ = srv.accept()
        except KeyboardInterrupt:
            continue
        try:
            data = b""
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            req = json.loads(data)
            count += 1
            if req.get("stream"):
                def emit(event, conn=conn):
                    try:
                        conn.sendall((json.dumps(event) + "\n").encode())
                    except OSError:
                        pass  # the client went away: the run goes on, its answer is lost
                answer, leave = runner(ns, count, req["code"], int(req["timeout_ms"]), emit)
                for r in answer["results"]:
                    emit(dict(event="result", **r))
                if answer["error"] is not None:
                    emit(dict(event="error", **answer["error"]))
                emit({"event": "end", "execution_count": count, "duration_ms": answer["duration_ms"],
                      "truncated": answer["truncated"], "exited": answer["exited"]})
            else:
                answer, leave = runner(ns, count, req["code"], int(req["timeout_ms"]))
                conn.sendall(json.dumps(answer).encode())
        except KeyboardInterrupt:
            continue
        except Exception:
            continue
        finally:
            conn.close()
        if leave is not None:
            os._exit(leave)


def run_one(ns, count, code, timeout_ms, emit=None):
    out, err = Capped("stdout", emit), Capped("stderr", emit)
    results, error, leave = [], None, None
    name = "<cell-%d>" % count
    started = time.monotonic()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        state["in_run"] = True
        if state["pending"]:
            state["pending"] = False
            raise KeyboardInterrupt
        signal.setitimer(signal.ITIMER_REAL, timeout_ms / 1000.0)
        # Tracebacks show the cell's own lines.
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        tree = ast.parse(code, name, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, name, "exec"), ns)
        if last is not None:
            value = eval(compile(last, name, "eval"), ns)
            if value is not None:
                ns["_"] = value
                results.extend(shown(value))
    except SystemExit as e:
        leave = e.code if isinstance(e.code, int) else 0
        error = {"name": "SystemExit", "value": str(e.code), "traceback": []}
    except BaseException as e:
        tb = e.__traceback__
        # The runner's own frame is not the user's.
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        shown_tb = traceback.TracebackException(type(e), e, tb)
        # The runner's handlers (time limit, interrupt) are not the user's frames either.
        shown_tb.stack = traceback.StackSummary.from_list([f for f in shown_tb.stack if f.filename != __file__])
        lines = list(shown_tb.format())
        error = {"name": type(e).__name__, "value": str(e), "traceback": "".join(lines).rstrip("\n").split("\n")}
    finally:
        state["in_run"] = False
        state["pending"] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        sys.stdout, sys.stderr = saved
    results.extend(figures())
    cut = out.cut or err.cut
    kept, size = [], 0
    for r in results:
        size += len(r["data"])
        if size > RESULTS:
            cut = True
            break
        kept.append(r)
    return {
        "execution_count": count,
        "results": kept,
        "stdout": out.text(),
        "stderr": err.text(),
        "error": error,
        "duration_ms": int((time.monotonic() - started) * 1000),
        "truncated": cut,
        "exited": leave is not None,
    }, leave


def shown(value):
    items = [{"type": "text/plain", "data": repr(value)}]
    for method, kind in (("_repr_html_", "text/html"), ("_repr_json_", "application/json"), ("_repr_png_", "image/png")):
        f = getattr(value, method, None)
        if not callable(f) or isinstance(value, type):
            continue
        try:
            data = f()
        except Exception:
            continue
        if data is None:
            continue
        if kind == "image/png" and isinstance(data, (bytes, bytearray)):
            data = base64.b64encode(data).decode()
        elif kind == "application/json":
            data = json.dumps(data)
        if isinstance(data, str):
            items.append({"type": kind, "data": data})
    return items


def figures():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return []
    items = []
    try:
        for num in plt.get_fignums():
            buf = io.BytesIO()
            plt.figure(num).savefig(buf, format="png")
            items.append({"type": "image/png", "data": base64.b64encode(buf.getvalue()).decode()})
        plt.close("all")
    except Exception:
        pass
    return items


class Bash:
    """One `bash` whose cwd, variables and functions persist from run to run: each run's code is
    sourced from a file, its stdout and stderr through two FIFOs the runner reads, its status
    answered on bash's own stdout after a marker only the runner knows."""

    def __init__(self, path):
        import secrets, subprocess
        self.dir = path + ".d"
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        self.marker = ("__svc_done_%s " % secrets.token_hex(16)).encode()
        self.fifos = {}
        for name in ("stdout", "stderr"):
            fifo = os.path.join(self.dir, name)
            try:
                os.unlink(fifo)
            except FileNotFoundError:
                pass
            os.mkfifo(fifo, 0o600)
            # Our own writer keeps a read from finding an end of file between bash's writes.
            self.fifos[name] = (os.open(fifo, os.O_RDONLY | os.O_NONBLOCK), os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        # Its own session: an interrupt reaches bash and whatever it runs in the foreground.
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, start_new_session=True,
                                     # A SIGINT ignored where the runner started would stay ignored.
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        os.set_blocking(self.proc.stdout.fileno(), False)
        # An interrupt ends the sourced code (not bash): its status is 130.
        self.send(b"trap 'return 130 2>/dev/null' INT\n")

    def send(self, line):
        self.proc.stdin.write(line)
        self.proc.stdin.flush()

    def signal(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except OSError:
            pass

    def drain(self, name):
        chunks = []
        while True:
            try:
                chunk = os.read(self.fifos[name][0], 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def run_bash(shell, count, code, timeout_ms, emit=None):
    import codecs, select
    out, err = Capped("stdout", emit), Capped("stderr", emit)
    decoders = {"stdout": codecs.getincrementaldecoder("utf-8")("replace"),
                "stderr": codecs.getincrementaldecoder("utf-8")("replace")}
    streams = {"stdout": out, "stderr": err}
    started = time.monotonic()
    deadline = started + timeout_ms / 1000.0
    # What background jobs wrote since the last run is not this run's.
    shell.drain("stdout")
    shell.drain("stderr")
    path = os.path.join(shell.dir, "code")
    with open(path, "wb") as f:
        f.write(code.encode("utf-8", "replace"))
    status, error, leave, timed_out, killed_at = None, None, None, False, None
    state["in_run"] = True
    try:
        if state["pending"]:
            # Interrupted on its way here: it does not start.
            state["pending"] = False
            state["interrupted"] = True
            status = 130
        else:
            shell.send((". %s >%s 2>%s </dev/null; printf '%s%%d\\n' \"$?\"\n"
                        % (path, os.path.join(shell.dir, "stdout"), os.path.join(shell.dir, "stderr"),
                           shell.marker.decode())).encode())
        answer = b""
        fds = {shell.fifos["stdout"][0]: "stdout", shell.fifos["stderr"][0]: "stderr"}
        status_fd = shell.proc.stdout.fileno()
        while status is None:
            now = time.monotonic()
            if not timed_out and now >= deadline:
                timed_out, killed_at = True, now
                shell.signal(signal.SIGINT)
            if killed_at is not None and now >= killed_at + 2:
                # It did not stop at the interrupt: the shell goes with it (the context is dead).
                shell.signal(signal.SIGKILL)
                killed_at = float("inf")
            wait = max(0.0, min(deadline - now if not timed_out else 0.5, 0.5))
            try:
                ready, _, _ = select.select(list(fds) + [status_fd], [], [], wait)
            except InterruptedError:
                continue
            for fd in ready:
                if fd == status_fd:
                    try:
                        chunk = os.read(status_fd, 65536)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        leave = shell.proc.wait()
                        status = leave if leave >= 0 else 128 - leave
                        break
                    answer += chunk
                    at = answer.find(shell.marker)
                    if at >= 0 and answer.endswith(b"\n"):
                        status = int(answer[at + len(shell.marker):].split(b"\n")[0] or b"0")
                else:
                    name = fds[fd]
                    text = decoders[name].decode(shell.drain(name))
                    if text:
                        streams[name].write(text)
        # What the code wrote before it ended is in the FIFOs already.
        for name in ("stdout", "stderr"):
            text = decoders[name].decode(shell.drain(name), final=True)
            if text:
                streams[name].write(text)
    finally:
        state["in_run"] = False
        state["pending"] = False
    if timed_out:
        error = {"name": "TimeoutError", "value": "the run exceeded its time limit", "traceback": []}
    elif state.pop("interrupted", False):
        error = {"name": "Interrupted", "value": "the run was interrupted", "traceback": []}
    elif leave is not None:
        error = {"name": "ExitCode", "value": str(status), "traceback": []}
    elif status != 0:
        error = {"name": "ExitCode", "value": str(status), "traceback": []}
    state.pop("interrupted", None)
    return {
        "execution_count": count,
        "results": [],
        "stdout": out.text(),
        "stderr": err.text(),
        "error": error,
        "duration_ms": int((time.monotonic() - started) * 1000),
        "truncated": out.cut or err.cut,
        "exited": leave is not None,
    }, (0 if leave is not None else None)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    elif sys.argv[1] == "serve-bash":
        serve(sys.argv[2], Bash(sys.argv[2]))
