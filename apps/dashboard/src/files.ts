/**
 * The sandbox's files (docs/contract.md "Files: the sandbox as a workspace"): list a folder,
 * stat, upload, make a folder, move, delete, and the addresses a download link points at. Paths
 * are absolute inside the sandbox; the helpers for them are pure.
 */
import { call, del, get, post, query } from "./api.ts"
import type { FileInfo, FileListing } from "./wire.ts"

const base = (sandboxId: string) => `/v1/sandboxes/${encodeURIComponent(sandboxId)}/files`

/** `name` inside the folder `folder` ("/" joins without a doubled slash). */
export const joinPath = (folder: string, name: string) =>
  folder.endsWith("/") ? `${folder}${name}` : `${folder}/${name}`

/** The folder that holds `path` ("/" for "/" itself). */
export const parentOf = (path: string) => {
  const trimmed = path.replace(/\/+$/, "")
  const slash = trimmed.lastIndexOf("/")
  return slash <= 0 ? "/" : trimmed.slice(0, slash)
}

/** The last name of `path` ("/" for the root). */
export const nameOf = (path: string) => path.replace(/\/+$/, "").split("/").pop() || "/"

/** Every folder from the root down to `path`, for a breadcrumb: [["/", "/"], ["tmp", "/tmp"], ...]. */
export const crumbsOf = (path: string): ReadonlyArray<readonly [name: string, path: string]> => {
  const names = path.split("/").filter((name) => name !== "")
  return [["/", "/"], ...names.map((name, i) => [name, `/${names.slice(0, i + 1).join("/")}`] as const)]
}

export const listFolder = (sandboxId: string, path: string) => get<FileListing>(`${base(sandboxId)}${query({ path })}`)

export const stat = (sandboxId: string, path: string) => get<FileInfo>(`${base(sandboxId)}/stat${query({ path })}`)

export const mkdir = (sandboxId: string, path: string) => post<FileInfo>(`${base(sandboxId)}/mkdir`, { path })

export const move = (sandboxId: string, from: string, to: string) =>
  post<FileInfo>(`${base(sandboxId)}/move`, { from, to })

export const remove = (sandboxId: string, path: string) =>
  del<void>(`${base(sandboxId)}${query({ path, recursive: "true" })}`)

/** A file's bytes, for a download link (the browser streams it to disk). */
export const fileUrl = (sandboxId: string, path: string) => `${base(sandboxId)}${query({ path })}`

/** A folder as a tar.gz, for a download link. */
export const archiveUrl = (sandboxId: string, path: string) =>
  `${base(sandboxId)}/archive${query({ path, format: "tar.gz" })}`

/** Uploads a file the user picked to `path`: the browser streams the `File` (never read into the page). */
export const upload = (sandboxId: string, path: string, file: Blob) =>
  call<void>("PUT", `${base(sandboxId)}${query({ path })}`, { raw: file })
