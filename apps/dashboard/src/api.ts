/**
 * The dashboard's calls to /v1: same-origin `fetch` on the session cookie (HttpOnly: the page
 * never sees it). Browsers send `Origin` on every request that changes state, which is what the
 * API checks for cookie-authenticated writes (CSRF), so nothing else is needed here. An error is
 * thrown as `ApiError` with the contract's `code` and details; a 401 also tells the app that
 * the session is over (`onSignedOut`).
 */

export interface Issue {
  readonly path: ReadonlyArray<string | number> | string
  readonly message: string
}

export class ApiError extends Error {
  readonly status: number
  readonly code: string
  readonly details: Record<string, unknown>
  constructor(status: number, body: { error?: string; code?: string; [k: string]: unknown } | undefined) {
    super(body?.error ?? `The API answered ${status}`)
    this.status = status
    this.code = body?.code ?? "unknown"
    this.details = body ?? {}
  }
  /** The invalid fields of a 400 `invalid_request`, if it named any. */
  get issues(): ReadonlyArray<Issue> {
    const issues = this.details["issues"]
    return Array.isArray(issues) ? issues as ReadonlyArray<Issue> : []
  }
}

const signedOutListeners = new Set<() => void>()

/** Called when any call answers 401: the session ended (expired, signed out elsewhere). */
export const onSignedOut = (listener: () => void) => {
  signedOutListeners.add(listener)
  return () => void signedOutListeners.delete(listener)
}

export interface CallOptions {
  readonly body?: unknown
  readonly headers?: Record<string, string>
  /** A 401 is an answer to show, not the end of the session (sign-in). */
  readonly expectUnauthenticated?: boolean
  /** Bytes sent as they are (a file upload: the browser streams a `Blob`), instead of `body`'s JSON. */
  readonly raw?: Blob
}

/** One call; resolves to the JSON body (undefined for 204), throws `ApiError`. */
export const call = async <A>(method: string, path: string, options: CallOptions = {}): Promise<A> => {
  const headers: Record<string, string> = { accept: "application/json", ...options.headers }
  let body: string | Blob | undefined = options.raw
  if (options.raw !== undefined) headers["content-type"] = "application/octet-stream"
  else if (options.body !== undefined) {
    headers["content-type"] = "application/json"
    body = JSON.stringify(options.body)
  }
  let response: Response
  try {
    response = await fetch(path, { method, headers, body: body ?? null, credentials: "same-origin" })
  } catch (error) {
    const why = error instanceof Error ? ` (${error.message})` : ""
    throw new ApiError(0, { error: `The API cannot be reached${why}; check that it runs`, code: "network" })
  }
  const text = await response.text()
  const type = response.headers.get("content-type") ?? ""
  const json = type.includes("json") && text !== "" ? JSON.parse(text) : undefined
  if (!response.ok) {
    if (response.status === 401 && options.expectUnauthenticated !== true) {
      for (const listener of signedOutListeners) listener()
    }
    throw new ApiError(response.status, json)
  }
  return (json ?? (text === "" ? undefined : text)) as A
}

export const get = <A>(path: string) => call<A>("GET", path)
export const post = <A>(path: string, body?: unknown, headers?: Record<string, string>) =>
  call<A>("POST", path, { body: body ?? {}, ...(headers ? { headers } : {}) })
export const put = <A>(path: string, body: unknown) => call<A>("PUT", path, { body })
export const patch = <A>(path: string, body: unknown) => call<A>("PATCH", path, { body })
export const del = <A>(path: string) => call<A>("DELETE", path)

/** `?a=1&b=2` from the defined entries (an empty string when none). */
export const query = (params: Record<string, string | number | undefined>) => {
  const entries = Object.entries(params).filter((entry): entry is [string, string | number] =>
    entry[1] !== undefined && entry[1] !== ""
  )
  return entries.length === 0
    ? ""
    : `?${new URLSearchParams(entries.map(([k, v]): [string, string] => [k, String(v)]))}`
}

/** A message for people: the API's own words, with the invalid fields it named. */
export const describeError = (error: unknown): string => {
  if (error instanceof ApiError) {
    const fields = error.issues.map((issue) =>
      `${Array.isArray(issue.path) ? issue.path.join(".") : issue.path}: ${issue.message}`
    )
    return [`${error.message} (${error.code})`, ...fields].join("\n")
  }
  return error instanceof Error ? error.message : String(error)
}
