/**
 * One sandbox: its record (state live from the event stream), stop/start/delete, the exec
 * console (a command's stdout, stderr and exit code, as they come), its files, a notebook on a
 * code context (a chunk of its own, loaded when the panel shows), the terminal (a shell over
 * the /terminal WebSocket, loaded on demand: xterm.js is a chunk of its own), and its metrics
 * charts and followed log (`SandboxTelemetry.tsx`, a chunk of its own).
 */
import type { FunctionComponent } from "preact"
import { useEffect, useId, useRef, useState } from "preact/hooks"
import { ApiError, get } from "../api.ts"
import { useConnection, useEvents } from "../events.ts"
import { type ExecResult, execStreaming } from "../exec.ts"
import { FileBrowser } from "../FileBrowser.tsx"
import { Link, navigate } from "../router.tsx"
import { ErrorMessage, Field, Form, PageTitle, StateBadge, Status, useAction, useResource, When } from "../ui.tsx"
import type { Sandbox as SandboxRecord } from "../wire.ts"
import { SandboxActions } from "./Sandboxes.tsx"

interface TerminalProps {
  readonly sandboxId: string
  readonly onClose: () => void
}

/** The terminal's chunk (xterm.js), fetched the first time a terminal opens. */
const LazyTerminal = (props: TerminalProps) => {
  const [loaded, setLoaded] = useState<FunctionComponent<TerminalProps> | undefined>(undefined)
  const [error, setError] = useState<unknown>(undefined)
  useEffect(() => {
    import("../Terminal.tsx").then((module) => setLoaded(() => module.default), setError)
  }, [])
  if (error !== undefined) return <ErrorMessage error={error} />
  if (loaded === undefined) return <p role="status">Loading the terminal…</p>
  const Loaded = loaded
  return <Loaded {...props} />
}

/** The metrics and log panel (`SandboxTelemetry.tsx`), a chunk of its own fetched with the page. */
const LazyTelemetry = (props: { readonly sandboxId: string }) => {
  const [loaded, setLoaded] = useState<FunctionComponent<{ readonly sandboxId: string }> | undefined>(undefined)
  const [error, setError] = useState<unknown>(undefined)
  useEffect(() => {
    import("../SandboxTelemetry.tsx").then((module) => setLoaded(() => module.default), setError)
  }, [])
  if (error !== undefined) return <ErrorMessage error={error} />
  if (loaded === undefined) return <p role="status">Loading the metrics and log…</p>
  const Loaded = loaded
  return <Loaded {...props} />
}

interface NotebookProps {
  readonly sandboxId: string
  readonly running: boolean
}

/** The notebook's chunk, fetched the first time its panel shows. */
const LazyNotebook = (props: NotebookProps) => {
  const [loaded, setLoaded] = useState<FunctionComponent<NotebookProps> | undefined>(undefined)
  const [error, setError] = useState<unknown>(undefined)
  useEffect(() => {
    import("../Notebook.tsx").then((module) => setLoaded(() => module.default), setError)
  }, [])
  if (error !== undefined) return <ErrorMessage error={error} />
  if (loaded === undefined) return <p role="status">Loading the notebook…</p>
  const Loaded = loaded
  return <Loaded {...props} />
}

const ExecConsole = (props: { readonly sandbox: SandboxRecord }) => {
  const [command, setCommand] = useState("")
  const [cwd, setCwd] = useState("")
  const [stdout, setStdout] = useState("")
  const [stderr, setStderr] = useState("")
  const [result, setResult] = useState<ExecResult | undefined>(undefined)
  const [ran, setRan] = useState<string | undefined>(undefined)
  const action = useAction()
  const abort = useRef<AbortController | undefined>(undefined)
  const id = useId()
  const submit = () => {
    if (command.trim() === "") return
    setStdout("")
    setStderr("")
    setResult(undefined)
    setRan(command)
    const controller = new AbortController()
    abort.current = controller
    void action.run(async () => {
      const exit = await execStreaming(
        props.sandbox.id,
        { cmd: ["sh", "-c", command], ...(cwd === "" ? {} : { cwd }) },
        {
          onStdout: (text) => setStdout((s) => s + text),
          onStderr: (text) => setStderr((s) => s + text)
        },
        controller.signal
      )
      setResult(exit)
    })
  }
  const running = props.sandbox.state === "running"
  return (
    <section aria-labelledby={`${id}-title`} class="panel">
      <h2 id={`${id}-title`}>Run a command</h2>
      {running ? null : <p class="muted">The sandbox must be running to run commands.</p>}
      <Form label="Run a command" onSubmit={submit} class="form inline">
        <Field
          label="Command"
          class="wide mono"
          value={command}
          onValue={setCommand}
          placeholder="echo hello from $(hostname)"
          hint="Run with sh -c."
          autoComplete="off"
          spellcheck={false}
        />
        <Field label="Working directory" value={cwd} onValue={setCwd} placeholder="/root" />
        <button type="submit" disabled={!running || action.pending}>Run</button>
        {action.pending ? <button type="button" onClick={() => abort.current?.abort()}>Cancel</button> : null}
      </Form>
      <ErrorMessage error={action.error} />
      {ran === undefined ? null : (
        <div class="exec-output" aria-busy={action.pending}>
          <h3>
            Output of <code>{ran}</code>
          </h3>
          <h4 id={`${id}-stdout`}>stdout</h4>
          <pre aria-labelledby={`${id}-stdout`} data-testid="stdout" tabIndex={0}>{stdout}</pre>
          <h4 id={`${id}-stderr`}>stderr</h4>
          <pre aria-labelledby={`${id}-stderr`} data-testid="stderr" class="stderr" tabIndex={0}>{stderr}</pre>
          {result === undefined
            ? (action.pending ? <Status>Running…</Status> : null)
            : <Status>Exit code {result.exit_code} after {result.duration_ms} ms</Status>}
        </div>
      )}
    </section>
  )
}

export const Sandbox = (props: { readonly id: string }) => {
  const sandbox = useResource(() => get<SandboxRecord>(`/v1/sandboxes/${props.id}`), [props.id])
  const [terminal, setTerminal] = useState(false)
  const [deleted, setDeleted] = useState(false)
  useEvents("sandbox.", (envelope) => {
    if (envelope.data["sandbox_id"] !== props.id) return
    if (envelope.event === "sandbox.deleted") setDeleted(true)
    else void sandbox.reload()
  })
  useConnection(() => void sandbox.reload())
  const record = sandbox.data
  const notFound = sandbox.error instanceof ApiError && sandbox.error.status === 404
  const id = useId()
  return (
    <section>
      <p>
        <Link href="/sandboxes">← Sandboxes</Link>
      </p>
      <PageTitle>Sandbox {record?.name || props.id}</PageTitle>
      {notFound || deleted ? <Status>This sandbox is deleted.</Status> : <ErrorMessage error={sandbox.error} />}
      {record === undefined || deleted ? null : (
        <>
          <dl class="facts">
            <dt>State</dt>
            <dd>
              <span role="status" aria-label={`State: ${record.state}`}>
                <StateBadge state={record.state} />
              </span>
              {record.errorMessage === null ? null : <span class="error">{record.errorMessage}</span>}
            </dd>
            <dt>Id</dt>
            <dd class="mono">{record.id}</dd>
            <dt>Template</dt>
            <dd class="mono">{record.templateId}</dd>
            <dt>Resources</dt>
            <dd>{record.cpu} CPU, {record.ramMb} MB memory, {record.diskGb} GB disk</dd>
            <dt>Region</dt>
            <dd>{record.region}</dd>
            <dt>Address</dt>
            <dd class="mono">{record.internalIp ?? "—"}</dd>
            <dt>Exposed ports</dt>
            <dd>{record.exposedPorts.length === 0 ? "none" : record.exposedPorts.join(", ")}</dd>
            <dt>Created</dt>
            <dd>
              <When at={record.createdAt} />
            </dd>
            <dt>Started</dt>
            <dd>
              <When at={record.startedAt} />
            </dd>
          </dl>
          <SandboxActions
            sandbox={record}
            onChanged={(next) => next === undefined ? void sandbox.reload() : sandbox.setData(next)}
            onDeleted={() => navigate("/sandboxes")}
          />
          <ExecConsole sandbox={record} />
          <FileBrowser sandboxId={record.id} running={record.state === "running"} />
          <LazyNotebook sandboxId={record.id} running={record.state === "running"} />
          <LazyTelemetry sandboxId={record.id} />
          <section aria-labelledby={`${id}-terminal`} class="panel">
            <h2 id={`${id}-terminal`}>Terminal</h2>
            {terminal
              ? <LazyTerminal sandboxId={record.id} onClose={() => setTerminal(false)} />
              : (
                <button type="button" disabled={record.state !== "running"} onClick={() => setTerminal(true)}>
                  Open a terminal
                </button>
              )}
          </section>
        </>
      )}
    </section>
  )
}
