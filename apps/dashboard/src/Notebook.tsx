/**
 * A notebook on one code context (docs/contract.md "Code contexts"): cells of code run in order
 * in one interpreter (created on the first run, in the language picked), their output shown as
 * it comes (the streamed run): stdout, stderr, the values (`text/plain`, JSON, `image/png` as an
 * image, `text/html` in a sandboxed frame), errors with their traceback. A run can be
 * interrupted; a dead context is shown as such and restarted as a new one. Its own chunk, loaded
 * when the panel first shows.
 *
 * Everything a run shows is produced by code in the sandbox, so hostile: text is rendered as text,
 * and HTML only inside an `<iframe sandbox="">` (no scripts, an opaque origin: it can reach
 * neither the dashboard's page nor its cookie-authenticated API).
 */
import { useEffect, useId, useRef, useState } from "preact/hooks"
import {
  createContext,
  deleteContext,
  getContext,
  interrupt,
  type Language,
  LANGUAGES,
  type Output,
  type RunEnd,
  runStreaming
} from "./contexts.ts"
import { ErrorMessage, Select, Status } from "./ui.tsx"
import type { CodeContext } from "./wire.ts"

interface Cell {
  readonly key: number
  readonly code: string
  readonly outputs: ReadonlyArray<Output>
  readonly end: RunEnd | null | undefined
  readonly error: unknown
}

let nextKey = 1
const emptyCell = (): Cell => ({ key: nextKey++, code: "", outputs: [], end: undefined, error: undefined })

/** Terminal colour codes some tracebacks carry: text here. */
// oxlint-disable-next-line no-control-regex -- the escape character is what is removed
const stripAnsi = (text: string) => text.replace(/\u001b\[[0-9;]*[A-Za-z]/g, "")

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/

const jsonText = (data: string) => {
  try {
    return JSON.stringify(JSON.parse(data), null, 2)
  } catch {
    return data
  }
}

/** One output of a cell; `label` names it for assistive technology. */
const OutputView = (props: { readonly output: Output; readonly label: string }) => {
  const { output } = props
  switch (output.kind) {
    case "stdout":
      return <pre class="out" aria-label={props.label} data-kind="stdout">{output.text}</pre>
    case "stderr":
      return <pre class="out stderr" aria-label={props.label} data-kind="stderr">{output.text}</pre>
    case "error":
      return (
        <pre class="out stderr" role="group" aria-label={props.label} data-kind="error">
          <strong>{output.name}: {output.value}</strong>
          {output.traceback.length === 0 ? null : `\n${stripAnsi(output.traceback.join("\n"))}`}
        </pre>
      )
    case "result":
      if (output.type === "image/png" && BASE64.test(output.data)) {
        return (
          <img
            class="out figure"
            src={`data:image/png;base64,${output.data}`}
            alt={props.label}
            data-kind="image/png"
          />
        )
      }
      if (output.type === "text/html") {
        // `sandbox` first and empty: no scripts, no forms, no popups, an opaque origin.
        return (
          <iframe
            sandbox=""
            class="out html"
            title={props.label}
            srcdoc={output.data}
            referrerpolicy="no-referrer"
            data-kind="text/html"
          />
        )
      }
      return (
        <pre class="out" aria-label={props.label} data-kind={output.type}>
          {output.type === "application/json" ? jsonText(output.data) : output.data}
        </pre>
      )
  }
}

const labelOf = (output: Output, index: number, cell: number) =>
  output.kind === "result"
    ? `Result ${index + 1} of cell ${cell} (${output.type})`
    : output.kind === "error"
    ? `Error of cell ${cell}`
    : `${output.kind} of cell ${cell}`

export const Notebook = (props: { readonly sandboxId: string; readonly running: boolean }) => {
  const { sandboxId } = props
  const [language, setLanguage] = useState<Language>("python")
  const [context, setContext] = useState<CodeContext | undefined>(undefined)
  const [cells, setCells] = useState<ReadonlyArray<Cell>>(() => [emptyCell()])
  const [busy, setBusy] = useState<number | undefined>(undefined)
  const [contextError, setContextError] = useState<unknown>(undefined)
  const [interrupting, setInterrupting] = useState(false)
  const areas = useRef(new Map<number, HTMLTextAreaElement>())
  const focusNext = useRef<number | undefined>(undefined)
  const contextRef = useRef<CodeContext | undefined>(undefined)
  contextRef.current = context
  const id = useId()

  // The interpreter lives in the sandbox until deleted: leaving the page ends it.
  useEffect(() => () => {
    const ctx = contextRef.current
    if (ctx !== undefined) void deleteContext(sandboxId, ctx.id).catch(() => undefined)
  }, [sandboxId])
  // A stopped sandbox ends its interpreters: the next run starts a new one.
  useEffect(() => {
    if (props.running) return
    contextRef.current = undefined
    setContext(undefined)
  }, [props.running])
  useEffect(() => {
    if (focusNext.current === undefined) return
    areas.current.get(focusNext.current)?.focus()
    focusNext.current = undefined
  })

  const update = (key: number, change: (cell: Cell) => Cell) =>
    setCells((all) => all.map((cell) => cell.key === key ? change(cell) : cell))

  /** A new interpreter in `lang`; the old one (if any) ended. */
  const start = async (lang: Language) => {
    const old = contextRef.current
    contextRef.current = undefined
    setContext(undefined)
    if (old !== undefined) await deleteContext(sandboxId, old.id).catch(() => undefined)
    const made = await createContext(sandboxId, lang)
    contextRef.current = made
    setContext(made)
    return made
  }

  /** The context's state after a run: the API marks it idle just after the run's end, so a `running` is asked again. */
  const refresh = async (ctx: CodeContext) => {
    try {
      for (let attempt = 0; attempt < 10; attempt++) {
        const now = await getContext(sandboxId, ctx.id)
        if (contextRef.current?.id !== now.id) return
        setContext(now)
        if (now.state !== "running") return
        await new Promise((resolve) => setTimeout(resolve, 300))
      }
    } catch {
      // Deleted meanwhile (restarted): nothing to show.
    }
  }

  const run = async (key: number) => {
    const cell = cells.find((c) => c.key === key)
    if (cell === undefined || busy !== undefined || cell.code.trim() === "") return
    setContextError(undefined)
    setBusy(key)
    update(key, (c) => ({ ...c, outputs: [], end: undefined, error: undefined }))
    let ctx = contextRef.current
    let ran = false
    try {
      if (ctx === undefined) ctx = await start(language)
      const end = await runStreaming(sandboxId, ctx.id, cell.code, (outputs) => update(key, (c) => ({ ...c, outputs })))
      update(key, (c) => ({ ...c, end }))
      ran = true
    } catch (error) {
      // Said under the cell it stopped: no interpreter (409 naming what is missing), a dead one.
      update(key, (c) => ({ ...c, error }))
    } finally {
      setBusy(undefined)
      setInterrupting(false)
      if (ctx !== undefined) await refresh(ctx)
    }
    if (!ran) return
    // Like a notebook: running the last cell opens a new one below it.
    setCells((all) => {
      if (all.at(-1)?.key !== key) return all
      const next = emptyCell()
      focusNext.current = next.key
      return [...all, next]
    })
  }

  const stop = async () => {
    const ctx = contextRef.current
    if (ctx === undefined) return
    setInterrupting(true)
    try {
      await interrupt(sandboxId, ctx.id)
    } catch (error) {
      setContextError(error)
      setInterrupting(false)
    }
  }

  const restart = async () => {
    setContextError(undefined)
    try {
      await start(language)
    } catch (error) {
      setContextError(error)
    }
  }

  const pickLanguage = (next: string) => {
    const lang = next as Language
    setLanguage(lang)
    // The next run starts an interpreter of this language; the old one ends now.
    const old = contextRef.current
    contextRef.current = undefined
    setContext(undefined)
    if (old !== undefined) void deleteContext(sandboxId, old.id).catch(() => undefined)
  }

  const dead = context?.state === "dead"
  return (
    <section aria-labelledby={`${id}-title`} class="panel notebook">
      <h2 id={`${id}-title`}>Notebook</h2>
      {!props.running ? <p class="muted">The sandbox must be running to run code.</p> : (
        <>
          <div class="form inline">
            <Select
              label="Language"
              value={language}
              onValue={pickLanguage}
              options={LANGUAGES.map((l) => [l, l] as const)}
            />
            <button type="button" disabled={busy !== undefined} onClick={() => void restart()}>
              Restart the context
            </button>
          </div>
          {context === undefined
            ? <Status>No context yet: the first run starts a {language} interpreter.</Status>
            : dead
            ? (
              <p role="alert" class="error">
                The context {context.id}{" "}
                is dead: its interpreter ended, and its variables with it. Restart it to run again.
              </p>
            )
            : (
              <Status>
                Context <span class="mono">{context.id}</span> ({context.language}): {context.state}
              </Status>
            )}
          <ErrorMessage error={contextError} />
          <ol class="cells">
            {cells.map((cell, index) => {
              const n = index + 1
              const running = busy === cell.key
              return (
                <li key={cell.key} class="cell" aria-busy={running}>
                  <div class="field">
                    <label for={`${id}-cell-${cell.key}`}>
                      Cell {n}
                      {cell.end ? <span class="muted">[{cell.end.execution_count}]</span> : null}
                    </label>
                    <textarea
                      id={`${id}-cell-${cell.key}`}
                      ref={(element) => {
                        if (element === null) areas.current.delete(cell.key)
                        else areas.current.set(cell.key, element)
                      }}
                      class="mono"
                      rows={Math.min(20, Math.max(2, cell.code.split("\n").length))}
                      spellcheck={false}
                      value={cell.code}
                      aria-describedby={`${id}-hint`}
                      onInput={(e) => {
                        const code = (e.currentTarget as HTMLTextAreaElement).value
                        update(cell.key, (c) => ({ ...c, code }))
                      }}
                      onKeyDown={(e) => {
                        if (e.key === "Enter" && e.shiftKey) {
                          e.preventDefault()
                          void run(cell.key)
                        }
                      }}
                    />
                  </div>
                  <div class="actions">
                    <button type="button" disabled={busy !== undefined || dead} onClick={() => void run(cell.key)}>
                      Run cell {n}
                    </button>
                    {running
                      ? (
                        <button type="button" disabled={interrupting} onClick={() => void stop()}>
                          Interrupt cell {n}
                        </button>
                      )
                      : null}
                    {cells.length > 1 && !running
                      ? (
                        <button
                          type="button"
                          onClick={() => setCells((all) => all.filter((c) => c.key !== cell.key))}
                        >
                          Remove cell {n}
                        </button>
                      )
                      : null}
                  </div>
                  <div role="region" aria-label={`Output of cell ${n}`} class="cell-output">
                    {cell.outputs.map((output, i) => (
                      <OutputView key={i} output={output} label={labelOf(output, i, n)} />
                    ))}
                    <ErrorMessage error={cell.error} />
                    {running ? <Status>Running…</Status> : null}
                    {cell.end === null
                      ? <p class="muted">Ended early, without its result.</p>
                      : cell.end !== undefined
                      ? (
                        <p class="muted">
                          Ran in {cell.end.duration_ms} ms{cell.end.truncated === true ? "; output cut (too long)" : ""}
                        </p>
                      )
                      : null}
                  </div>
                </li>
              )
            })}
          </ol>
          <p id={`${id}-hint`} class="muted">Shift+Enter runs a cell.</p>
          <button type="button" onClick={() => setCells((all) => [...all, emptyCell()])}>Add a cell</button>
        </>
      )}
    </section>
  )
}

export default Notebook
