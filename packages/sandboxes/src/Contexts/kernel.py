# The platform's python code-context runner (docs/contract.md#code-contexts), standard library only.
# `serve SOCK`: one interpreter whose namespace persists; each connection on the Unix socket SOCK
# is one run (a JSON request read to its end, a JSON answer). `run SOCK TIMEOUT_MS`: the client
# the API execs per run: the code on stdin, the answer on stdout. `stream SOCK TIMEOUT_MS`: the
# same, the answer as newline-delimited JSON events while the run goes (stdout, stderr as
# written, then result, error, end).
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


def on_alarm(_sig, _frame):
    raise TimeoutError("the run exceeded its time limit")


def serve(path):
    os.environ["MPLBACKEND"] = "Agg"
    ns = {"__name__": "__main__", "__builtins__": builtins}
    count = 0
    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGINT, on_interrupt)
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
                answer, leave = run_one(ns, count, req["code"], int(req["timeout_ms"]), emit)
                for r in answer["results"]:
                    emit(dict(event="result", **r))
                if answer["error"] is not None:
                    emit(dict(event="error", **answer["error"]))
                emit({"event": "end", "execution_count": count, "duration_ms": answer["duration_ms"],
                      "truncated": answer["truncated"], "exited": answer["exited"]})
            else:
                answer, leave = run_one(ns, count, req["code"], int(req["timeout_ms"]))
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


def client(path, timeout_ms, stream):
    code = sys.stdin.buffer.read().decode("utf-8", "replace")
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # The interpreter may still be starting: its socket appears once it listens.
    deadline = time.monotonic() + 10
    while True:
        try:
            conn.connect(path)
            break
        except OSError:
            if time.monotonic() > deadline:
                sys.exit(3)
            time.sleep(0.02)
    conn.sendall(json.dumps({"code": code, "timeout_ms": timeout_ms, "stream": stream}).encode())
    conn.shutdown(socket.SHUT_WR)
    got = False
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            break
        got = True
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
    if not got:
        sys.exit(4)  # the interpreter ended without answering


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        client(sys.argv[2], int(sys.argv[3]), sys.argv[1] == "stream")
