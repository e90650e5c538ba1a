// The platform's javascript code-context runner (docs/architecture.md, code contexts), node's own
// modules only. The same protocol as kernel.py: `serve SOCK` is one interpreter (a node REPL
// server, so a run has the REPL's semantics: top-level await, declarations that persist, the last
// value shown as the REPL shows it); each connection on the Unix socket SOCK is one run (a JSON
// request read to its end, a JSON answer). The client the API execs per run is `svc-ctx`
// (packages/host/native/svc-ctx.c), which also sends the SIGINT past a run's limit.
"use strict"
const fs = require("fs")
const net = require("net")
const repl = require("repl")
const { Console } = require("console")
const { PassThrough, Writable } = require("stream")

const KEEP = 256 * 1024 // characters kept of each of stdout and stderr per run
const RESULTS = 400 * 1024 // characters of results kept per run

const serve = (path) => {
  try {
    fs.unlinkSync(path)
  } catch {}
  // The client (svc-ctx) signals a run past its time limit (a synchronous loop holds the event loop).
  fs.writeFileSync(`${path}.pid`, String(process.pid))
  const server = repl.start({
    input: new PassThrough(),
    output: new Writable({ write: (_chunk, _encoding, done) => done() }),
    terminal: false,
    prompt: "",
    useColors: false,
    // A SIGINT stops synchronous code (vm's watchdog) and an awaited promise (the REPL's own queue).
    breakEvalOnSigint: true
  })
  Object.defineProperty(server.context, "console", {
    value: new Console({ stdout: process.stdout, stderr: process.stderr }),
    writable: true,
    configurable: true,
    enumerable: false
  })
  // A run's error reaches the REPL's domain, which would print it: here it ends the run.
  server._domain.removeAllListeners("error")
  server._domain.on("error", (e) => {
    if (current !== undefined) current.finish(e, undefined)
  })

  // What user code writes goes to the run in progress (nothing is kept between runs).
  let current
  const capture = (name) => (chunk, encoding, done) => {
    if (typeof encoding === "function") done = encoding
    if (current !== undefined) current.write(name, typeof chunk === "string" ? chunk : Buffer.from(chunk).toString())
    if (typeof done === "function") process.nextTick(done)
    return true
  }
  process.stdout.write = capture("stdout")
  process.stderr.write = capture("stderr")

  // A SIGINT outside a run is one the API sent for a run on its way here: that run ends at once.
  let pending = false
  const onInterrupt = () => {
    if (current === undefined) pending = true
    else server.emit("SIGINT")
  }
  process.on("SIGINT", onInterrupt)

  let count = 0
  const queue = []
  const next = () => {
    if (current !== undefined || queue.length === 0) return
    const { conn, req } = queue.shift()
    count += 1
    current = startRun(server, count, req, conn, onInterrupt, () => {
      current = undefined
      next()
    })
    if (pending) {
      pending = false
      current.finish(interrupted(), undefined)
    } else {
      current.start()
    }
  }
  net.createServer({ allowHalfOpen: true }, (conn) => {
    const parts = []
    conn.on("data", (chunk) => parts.push(chunk))
    conn.on("error", () => undefined)
    conn.on("end", () => {
      let req
      try {
        req = JSON.parse(Buffer.concat(parts).toString("utf8"))
      } catch {
        conn.destroy()
        return
      }
      queue.push({ conn, req })
      next()
    })
  }).listen(path, () => fs.chmodSync(path, 0o600))
}

const interrupted = () => Object.assign(new Error("the run was interrupted"), { svcName: "Interrupted" })

const startRun = (server, count, req, conn, onInterrupt, done) => {
  const started = Date.now()
  const deadline = started + Number(req.timeout_ms)
  const out = { stdout: [], stderr: [] }
  const size = { stdout: 0, stderr: 0 }
  let cut = false
  let finished = false
  const emit = (event) => {
    if (req.stream) conn.write(JSON.stringify(event) + "\n")
  }
  let timer
  const run = {
    write: (name, text) => {
      const room = KEEP - size[name]
      if (text.length > room) {
        text = text.slice(0, Math.max(room, 0))
        cut = true
      }
      if (text.length === 0) return
      out[name].push(text)
      size[name] += text.length
      emit({ event: name, text })
    },
    start: () => {
      // An awaited promise past the time limit: the event loop is free, the runner stops it itself.
      timer = setTimeout(() => server.emit("SIGINT"), Math.max(0, deadline - Date.now()))
      const file = `<cell-${count}>`
      // While the code runs synchronously vm's watchdog takes the SIGINT; a listener of the
      // process's would be removed by vm meanwhile, and that removal disarms the watchdog.
      process.removeListener("SIGINT", onInterrupt)
      try {
        server.eval(req.code, server.context, file, (e, value) => run.finish(e, value))
      } catch (e) {
        run.finish(e, undefined)
      } finally {
        process.on("SIGINT", onInterrupt)
      }
    },
    finish: (e, value) => {
      if (finished) return
      finished = true
      clearTimeout(timer)
      const results = []
      let error = null
      if (e !== null && e !== undefined) {
        error = shownError(e, Date.now() >= deadline)
      } else if (value !== undefined) {
        server.last = value
        results.push({ type: "text/plain", data: server.writer(value) })
      }
      const kept = []
      let total = 0
      for (const r of results) {
        total += r.data.length
        if (total > RESULTS) {
          cut = true
          break
        }
        kept.push(r)
      }
      const duration = Date.now() - started
      const answer = {
        execution_count: count,
        results: kept,
        stdout: out.stdout.join(""),
        stderr: out.stderr.join(""),
        error,
        duration_ms: duration,
        truncated: cut,
        exited: false
      }
      if (req.stream) {
        for (const r of kept) emit({ event: "result", ...r })
        if (error !== null) emit({ event: "error", ...error })
        emit({ event: "end", execution_count: count, duration_ms: duration, truncated: cut, exited: false })
        conn.end()
      } else {
        conn.end(JSON.stringify(answer))
      }
      done()
    }
  }
  return run
}

/** `{name, value, traceback}` of what a run threw, the runner's and node's own frames left out. */
const shownError = (e, late) => {
  const isError = e instanceof Error || (e !== null && typeof e === "object" && typeof e.stack === "string")
  if (isError && (e.svcName === "Interrupted" || e.code === "ERR_SCRIPT_EXECUTION_INTERRUPTED")) {
    return late
      ? { name: "TimeoutError", value: "the run exceeded its time limit", traceback: [] }
      : { name: "Interrupted", value: "the run was interrupted", traceback: [] }
  }
  if (!isError) {
    return { name: "Uncaught", value: require("util").inspect(e), traceback: [] }
  }
  const lines = String(e.stack).split("\n").filter((line) =>
    !/^\s+at /.test(line) || !(line.includes("node:") || line.includes(__filename))
  )
  return { name: String(e.name ?? "Error"), value: String(e.message ?? ""), traceback: lines }
}

if (process.argv[2] === "serve") serve(process.argv[3])
