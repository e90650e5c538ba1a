/**
 * What a starting agent does with what it finds, as a pure function of its journal and the
 * driver's listing (so it is tested without sandboxes). See `Journal.ts` for the invariant.
 *
 * - A journal entry with `pending` is an operation the previous process did not finish; no
 *   report of it went out and its command is still in the consumer. Undo it and report
 *   nothing: the redelivered command redoes it and reports. create and destroy are undone by
 *   destroying (a half-made create leaves nothing; a half-done destroy completes), start and
 *   stop by stopping (the file system stays).
 * - A sandbox on disk without a journal entry was never confirmed to anyone (its create died
 *   before its journal write, or the journal was lost): it is destroyed.
 * - A settled entry whose sandbox is on disk: its real state is reported (`running` with its
 *   internal IP, or `stopped`).
 * - A settled entry whose sandbox is not on disk any more (someone removed it, or the disk was
 *   replaced): reported `destroyed` (nothing of it is left on the host) and the entry is
 *   removed; the sandbox actor moves a sandbox it did not mean to delete to `error`.
 */
import type { RunStatus, SandboxListing } from "@svc/host/Driver"
import type { JournalEntry, PendingOp } from "./Journal.ts"

export type ReconcileAction =
  | { readonly _tag: "Undo"; readonly sandboxId: string; readonly pending: PendingOp; readonly by: "destroy" | "stop" }
  | { readonly _tag: "DestroyOrphan"; readonly sandboxId: string }
  | { readonly _tag: "Report"; readonly sandboxId: string; readonly status: RunStatus; readonly internalIp: string }
  | { readonly _tag: "Vanished"; readonly sandboxId: string }

export const undoBy = (pending: PendingOp): "destroy" | "stop" =>
  pending === "create" || pending === "destroy" ? "destroy" : "stop"

/** The actions in a stable order: undo first, then orphans, then reports (by sandbox id). */
export const plan = (
  journal: ReadonlyArray<JournalEntry>,
  listing: ReadonlyArray<Pick<SandboxListing, "sandboxId" | "status" | "internalIp">>
): ReadonlyArray<ReconcileAction> => {
  const onDisk = new Map(listing.map((row) => [row.sandboxId, row]))
  const known = new Set(journal.map((entry) => entry.sandboxId))
  const byId = <A extends { readonly sandboxId: string }>(a: A, b: A) =>
    a.sandboxId < b.sandboxId ? -1 : a.sandboxId > b.sandboxId ? 1 : 0

  const undo: Array<ReconcileAction & { _tag: "Undo" }> = []
  const reports: Array<ReconcileAction & { _tag: "Report" | "Vanished" }> = []
  for (const entry of journal) {
    if (entry.pending !== null) {
      undo.push({ _tag: "Undo", sandboxId: entry.sandboxId, pending: entry.pending, by: undoBy(entry.pending) })
      continue
    }
    const row = onDisk.get(entry.sandboxId)
    reports.push(
      row === undefined
        ? { _tag: "Vanished", sandboxId: entry.sandboxId }
        : { _tag: "Report", sandboxId: entry.sandboxId, status: row.status, internalIp: row.internalIp }
    )
  }
  const orphans: Array<ReconcileAction & { _tag: "DestroyOrphan" }> = listing
    .filter((row) => !known.has(row.sandboxId))
    .map((row) => ({ _tag: "DestroyOrphan", sandboxId: row.sandboxId }))
  return [...undo.sort(byId), ...orphans.sort(byId), ...reports.sort(byId)]
}
