/**
 * A sandbox's code contexts (`sandbox.contexts`, docs/contract.md#code-contexts): stateful
 * interpreters whose variables and imports persist from one `run` to the next.
 */
import { type Http, segment } from "./Http.ts"
import { Refreshable } from "./Refreshable.ts"
import type * as T from "./Types.ts"

export interface CreateContextOptions {
  /** `python` (default), `javascript` or `bash`; an image without the interpreter is 409 `conflict`. */
  readonly language?: T.CodeContextRecord["language"] | undefined
  readonly cwd?: string | undefined
  readonly env?: Readonly<Record<string, string>> | undefined
}

/** A context: its record as of the last answer, and its runs. */
export class CodeContext extends Refreshable<T.CodeContextRecord> {
  readonly #contexts: Contexts

  constructor(contexts: Contexts, record: T.CodeContextRecord) {
    super(record)
    this.#contexts = contexts
  }

  get id(): string {
    return this.record.id
  }

  protected async reread(): Promise<T.CodeContextRecord> {
    return (await this.#contexts.get(this.id)).record
  }
  /**
   * Runs code: the last expression's value in `results` (`text/plain`), output, and `error`
   * when it raised (still a result, not a throw). A dead context is a SvcError `conflict`.
   */
  run(code: string, options: { readonly timeoutMs?: number | undefined } = {}): Promise<T.RunResult> {
    return this.#contexts.run(this.id, code, options)
  }
  /** Ends the run in progress: a `KeyboardInterrupt` error in python, `Interrupted` in javascript and bash. */
  interrupt(): Promise<void> {
    return this.#contexts.interrupt(this.id)
  }
  /** Ends its interpreter. */
  delete(): Promise<void> {
    return this.#contexts.delete(this.id)
  }
}

/** `sandbox.contexts`: the code contexts of one sandbox. */
export class Contexts {
  readonly #http: Http
  readonly #sandboxId: string

  constructor(http: Http, sandboxId: string) {
    this.#http = http
    this.#sandboxId = sandboxId
  }

  #path(suffix = ""): string {
    return `/v1/sandboxes/${segment(this.#sandboxId)}/contexts${suffix}`
  }

  /** Starts an interpreter in the (running) sandbox. 409 `conflict` when its image lacks it. */
  async create(options: CreateContextOptions = {}): Promise<CodeContext> {
    const record: T.CodeContextRecord = await this.#http.json("POST", this.#path(), {
      json: {
        language: options.language ?? "python",
        ...(options.cwd !== undefined ? { cwd: options.cwd } : {}),
        ...(options.env !== undefined ? { env: options.env } : {})
      }
    })
    return new CodeContext(this, record)
  }

  async list(): Promise<ReadonlyArray<CodeContext>> {
    const { contexts } = await this.#http.json<{ contexts: ReadonlyArray<T.CodeContextRecord> }>("GET", this.#path())
    return contexts.map((record) => new CodeContext(this, record))
  }

  async get(id: string): Promise<CodeContext> {
    return new CodeContext(this, await this.#http.json("GET", this.#path(`/${segment(id)}`)))
  }

  run(id: string, code: string, options: { readonly timeoutMs?: number | undefined } = {}): Promise<T.RunResult> {
    return this.#http.json("POST", this.#path(`/${segment(id)}/run`), {
      json: { code, ...(options.timeoutMs !== undefined ? { timeout_ms: options.timeoutMs } : {}) }
    })
  }

  async interrupt(id: string): Promise<void> {
    await this.#http.request("POST", this.#path(`/${segment(id)}/interrupt`))
  }

  async delete(id: string): Promise<void> {
    await this.#http.request("DELETE", this.#path(`/${segment(id)}`))
  }
}
