/**
 * The few building blocks every page shares: a labelled field, an error and a status message
 * (announced by screen readers), a page heading that takes the focus on navigation, a table,
 * a pager, and the loading of a resource.
 */
import type { ComponentChildren } from "preact"
import { useCallback, useEffect, useId, useRef, useState } from "preact/hooks"
import { describeError } from "./api.ts"
import { hasNavigated } from "./router.tsx"

/**
 * A page's title: focused when the page opens, so keyboard and screen-reader users land on it,
 * and the document's title.
 */
export const PageTitle = (props: { readonly children: ComponentChildren }) => {
  const ref = useRef<HTMLHeadingElement>(null)
  useEffect(() => {
    // Not on the first load: the document's start (the skip link) is where keyboard users begin.
    if (hasNavigated()) ref.current?.focus()
  }, [])
  useEffect(() => {
    document.title = `${ref.current?.textContent ?? ""} · svc dashboard`
  })
  return <h1 tabIndex={-1} ref={ref}>{props.children}</h1>
}

/** The input attributes the forms use (preact's own type is a union by `type`, awkward to extend). */
interface InputProps {
  readonly type?: "text" | "email" | "password" | "number" | "url" | "datetime-local"
  readonly required?: boolean
  readonly placeholder?: string
  readonly autoComplete?: string
  readonly min?: number
  readonly max?: number
  readonly step?: number
  readonly pattern?: string
  readonly inputMode?: "text" | "decimal" | "numeric"
  readonly class?: string
  readonly spellcheck?: boolean
}

/** An input with its label (and a hint read with it). */
export const Field = (
  props: InputProps & {
    readonly label: string
    readonly value: string
    readonly onValue: (value: string) => void
    readonly hint?: string
    /** The label is for assistive technology only (a control whose row says what it is). */
    readonly hideLabel?: boolean
  }
) => {
  const { label, value, onValue, hint, hideLabel, ...rest } = props
  // Preact types <input> as a union by `type`; these attributes fit every member used here.
  const attributes: Record<string, unknown> = rest
  const id = useId()
  return (
    <div class="field">
      <label for={id} class={hideLabel === true ? "visually-hidden" : undefined}>{label}</label>
      <input
        id={id}
        value={value}
        onInput={(e) => onValue((e.currentTarget as HTMLInputElement).value)}
        aria-describedby={hint === undefined ? undefined : `${id}-hint`}
        {...attributes}
      />
      {hint === undefined ? null : <small id={`${id}-hint`}>{hint}</small>}
    </div>
  )
}

export const TextArea = (props: {
  readonly label: string
  readonly value: string
  readonly onValue: (value: string) => void
  readonly hint?: string
  readonly rows?: number
}) => {
  const id = useId()
  return (
    <div class="field">
      <label for={id}>{props.label}</label>
      <textarea
        id={id}
        rows={props.rows ?? 3}
        value={props.value}
        onInput={(e) => props.onValue((e.currentTarget as HTMLTextAreaElement).value)}
        aria-describedby={props.hint === undefined ? undefined : `${id}-hint`}
      />
      {props.hint === undefined ? null : <small id={`${id}-hint`}>{props.hint}</small>}
    </div>
  )
}

export const Select = (props: {
  readonly label: string
  readonly value: string
  readonly onValue: (value: string) => void
  readonly options: ReadonlyArray<readonly [value: string, label: string]>
}) => {
  const id = useId()
  return (
    <div class="field">
      <label for={id}>{props.label}</label>
      <select id={id} value={props.value} onChange={(e) => props.onValue((e.currentTarget as HTMLSelectElement).value)}>
        {props.options.map(([value, label]) => <option key={value} value={value}>{label}</option>)}
      </select>
    </div>
  )
}

export const Checkbox = (props: {
  readonly label: string
  readonly checked: boolean
  readonly onChecked: (checked: boolean) => void
}) => (
  <label class="check">
    <input
      type="checkbox"
      checked={props.checked}
      onChange={(e) => props.onChecked((e.currentTarget as HTMLInputElement).checked)}
    />
    {props.label}
  </label>
)

/** A failure, announced at once. */
export const ErrorMessage = (props: { readonly error: unknown }) =>
  props.error === undefined ? null : <p role="alert" class="error">{describeError(props.error)}</p>

/** A status line, announced politely. */
export const Status = (props: { readonly children: ComponentChildren }) => (
  <p role="status" class="status">{props.children}</p>
)

/** A table with a caption (its accessible name) and column headers. */
export const Table = (props: {
  readonly caption: string
  readonly columns: ReadonlyArray<string>
  readonly children: ComponentChildren
  readonly empty?: boolean
  readonly emptyText?: string
  /** Its rows are still being loaded. */
  readonly loading?: boolean
}) => (
  <div class="table-wrap">
    <table aria-busy={props.loading === true ? "true" : "false"}>
      <caption>{props.caption}</caption>
      <thead>
        <tr>{props.columns.map((c) => <th scope="col" key={c}>{c}</th>)}</tr>
      </thead>
      <tbody>
        {props.empty === true
          ? (
            <tr>
              <td colSpan={props.columns.length}>{props.emptyText ?? "Nothing yet."}</td>
            </tr>
          )
          : props.children}
      </tbody>
    </table>
  </div>
)

export interface Paged {
  readonly total: number
  readonly offset: number
  readonly limit: number
  readonly has_more: boolean
}

export const Pager = (
  props: { readonly page: Paged; readonly label: string; readonly onOffset: (n: number) => void }
) => {
  const { total, offset, limit, has_more } = props.page
  const shown = Math.min(total, offset + limit)
  return (
    <nav class="pager" aria-label={`${props.label} pages`}>
      <button type="button" disabled={offset === 0} onClick={() => props.onOffset(Math.max(0, offset - limit))}>
        Previous page
      </button>
      <span>{total === 0 ? "0 of 0" : `${offset + 1}–${shown} of ${total}`}</span>
      <button type="button" disabled={!has_more} onClick={() => props.onOffset(offset + limit)}>Next page</button>
    </nav>
  )
}

/** A resource loaded on mount (and on `deps`), reloadable. */
// Function declarations: a generic arrow in .tsx needs `<A,>`, which the formatter removes.
export function useResource<A>(load: () => Promise<A>, deps: ReadonlyArray<unknown> = []) {
  const [data, setData] = useState<A | undefined>(undefined)
  const [error, setError] = useState<unknown>(undefined)
  const latest = useRef(load)
  latest.current = load
  const reload = useCallback(async () => {
    try {
      setData(await latest.current())
      setError(undefined)
    } catch (e) {
      setError(e)
    }
  }, [])
  useEffect(() => {
    void reload()
  }, deps)
  return { data, error, reload, setData }
}

/** Runs an action with its pending state and error (for a form or a button). */
export const useAction = () => {
  const [pending, setPending] = useState(false)
  const [error, setError] = useState<unknown>(undefined)
  const run = useCallback(async function<A>(action: () => Promise<A>): Promise<A | undefined> {
    setPending(true)
    setError(undefined)
    try {
      return await action()
    } catch (e) {
      setError(e)
      return undefined
    } finally {
      setPending(false)
    }
  }, [])
  return { pending, error, run, setError }
}

const dateFormat = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" })

/** A timestamp as a `<time>`, or a dash. */
export const When = (props: { readonly at: string | null | undefined }) =>
  props.at === null || props.at === undefined
    ? <span aria-label="never">—</span>
    : <time dateTime={props.at}>{dateFormat.format(new Date(props.at))}</time>

/** Micros of a currency unit as dollars, exactly (6 decimals kept when they matter). */
export const dollars = (micros: number | null | undefined) => {
  if (micros === null || micros === undefined) return "none"
  const whole = micros / 1_000_000
  return `$${whole.toLocaleString(undefined, { minimumFractionDigits: 2, maximumFractionDigits: 6 })}`
}

/** A state as a badge people and screen readers read as a word. */
export const StateBadge = (props: { readonly state: string }) => (
  <span class={`badge state-${props.state}`}>{props.state}</span>
)

/** A form that runs `onSubmit` without a page load. */
export const Form = (props: {
  readonly label: string
  readonly onSubmit: () => void
  readonly children: ComponentChildren
  readonly class?: string
}) => (
  <form
    aria-label={props.label}
    class={props.class ?? "form"}
    onSubmit={(e) => {
      e.preventDefault()
      props.onSubmit()
    }}
  >
    {props.children}
  </form>
)

/** A secret shown this once, selectable, with a copy button. */
export const ShownOnce = (props: {
  readonly label: string
  readonly value: string
  readonly note: string
  readonly onDone: () => void
}) => {
  const id = useId()
  const [copied, setCopied] = useState(false)
  return (
    <section class="shown-once" aria-labelledby={`${id}-title`}>
      <h2 id={`${id}-title`}>{props.label}</h2>
      <p>{props.note}</p>
      <label for={id} class="visually-hidden">{props.label}</label>
      <input id={id} readOnly value={props.value} onFocus={(e) => (e.currentTarget as HTMLInputElement).select()} />
      <div class="actions">
        <button
          type="button"
          onClick={() =>
            void navigator.clipboard?.writeText(props.value).then(() => setCopied(true), () => setCopied(false))}
        >
          Copy
        </button>
        <button type="button" onClick={props.onDone}>Done, hide it</button>
      </div>
      {copied ? <Status>Copied.</Status> : null}
    </section>
  )
}
