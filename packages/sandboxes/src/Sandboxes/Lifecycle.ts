/**
 * When a sandbox's lifecycle settings call for the supervisor, and what for (pure; tested
 * against tables in test/Sandboxes/Lifecycle.test.ts):
 *
 *   state    | due when                                                      | does
 *   running  | `timeoutFrom + timeout_s` (its start, or the last keep-alive) | `timeout`: stop, or delete (`on_timeout`)
 *   running  | `lastActivityAt + idle_timeout_s + IDLE_GRACE_MS`, not `busy` | `idle`: stop, or delete (`on_timeout`)
 *   stopped  | `stoppedAt + auto_delete_s`                                   | delete
 *   other    | never                                                         |
 *
 * The earliest of a running sandbox's two wins (the lifetime on a tie). `IDLE_GRACE_MS` covers
 * activity its host saw but has not reported yet (at most `ACTIVITY_REPORT_MS` late, see
 * `@svc/host-protocol/Protocol`): idleness is never judged early. `dueAt` is stored as the row's
 * `due_at` (indexed), so one sweep reads only due rows.
 */
import { ACTIVITY_REPORT_MS } from "@svc/host-protocol/Protocol"
import type { SandboxActorState } from "./Model.ts"

export const IDLE_GRACE_MS = 2 * ACTIVITY_REPORT_MS

/** The fields the decision reads (a row of the sweep, or the whole state). */
export type DueInputs = Pick<
  SandboxActorState,
  | "state"
  | "timeoutS"
  | "timeoutFrom"
  | "idleTimeoutS"
  | "lastActivityAt"
  | "busy"
  | "autoDeleteS"
  | "stoppedAt"
>

export type Due =
  | { readonly kind: "timeout"; readonly at: number; readonly seen: number }
  | { readonly kind: "idle"; readonly at: number; readonly seen: number }
  | { readonly kind: "auto_delete"; readonly at: number; readonly seen: number }

/** When `timeout_s` ends the run: only while running. */
export const expiresAt = (s: DueInputs): number | null =>
  s.state === "running" && s.timeoutS !== null && s.timeoutFrom !== null ? s.timeoutFrom + s.timeoutS * 1000 : null

/** The next thing due for this sandbox (`seen` is what the message checks is still so), or null. */
export const next = (s: DueInputs): Due | null => {
  if (s.state === "running") {
    const expires = expiresAt(s)
    const idle = s.idleTimeoutS !== null && !s.busy && s.lastActivityAt !== null
      ? s.lastActivityAt + s.idleTimeoutS * 1000 + IDLE_GRACE_MS
      : null
    if (expires !== null && (idle === null || expires <= idle)) {
      return { kind: "timeout", at: expires, seen: s.timeoutFrom! }
    }
    if (idle !== null) return { kind: "idle", at: idle, seen: s.lastActivityAt! }
    return null
  }
  if (s.state === "stopped" && s.autoDeleteS !== null && s.stoppedAt !== null) {
    return { kind: "auto_delete", at: s.stoppedAt + s.autoDeleteS * 1000, seen: s.stoppedAt }
  }
  return null
}

/** The row's `due_at`. */
export const dueAt = (s: DueInputs): number | null => next(s)?.at ?? null

/** What is due at `now`, or null. */
export const due = (s: DueInputs, now: number): Due | null => {
  const d = next(s)
  return d !== null && d.at <= now ? d : null
}
