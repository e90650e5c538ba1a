/**
 * The sandbox's files as a workspace: a folder's entries (folders first), a breadcrumb, a path
 * to go to (its stat: a folder opens, anything else shows its details), a file downloaded as it
 * is and a folder as a tar.gz (links: the browser streams them to disk), files uploaded into the
 * folder, a folder made, an entry renamed or moved, an entry deleted (after a confirmation,
 * with what is inside). The API's refusals are shown in its words.
 */
import { useEffect, useId, useRef, useState } from "preact/hooks"
import {
  archiveUrl,
  crumbsOf,
  fileUrl,
  joinPath,
  listFolder,
  mkdir,
  move,
  nameOf,
  parentOf,
  remove,
  stat,
  upload
} from "./files.ts"
import { ErrorMessage, Field, Form, Status, Table, useAction, useResource, When } from "./ui.tsx"
import type { FileEntry, FileInfo } from "./wire.ts"

/** Bytes for people: 1.5 KiB, 3.2 MiB. */
export const sizeText = (bytes: number) => {
  if (bytes < 1024) return `${bytes} B`
  const units = ["KiB", "MiB", "GiB", "TiB"]
  let value = bytes / 1024
  let unit = 0
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024
    unit += 1
  }
  return `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`
}

const byFoldersThenName = (a: FileEntry, b: FileEntry) =>
  a.type === "dir" && b.type !== "dir" ? -1 : b.type === "dir" && a.type !== "dir" ? 1 : a.name.localeCompare(b.name)

const Details = (props: { readonly sandboxId: string; readonly info: FileInfo; readonly onClose: () => void }) => {
  const { info } = props
  return (
    <section class="file-details" aria-label={`Details of ${info.path}`}>
      <dl class="facts">
        <dt>Path</dt>
        <dd class="mono">{info.path}</dd>
        <dt>Type</dt>
        <dd>{info.type}</dd>
        <dt>Size</dt>
        <dd>{sizeText(info.size)} ({info.size} bytes)</dd>
        <dt>Mode</dt>
        <dd class="mono">{info.mode}</dd>
        <dt>Owner</dt>
        <dd class="mono">{info.uid}:{info.gid}</dd>
        <dt>Modified</dt>
        <dd>
          <When at={info.mtime} />
        </dd>
        {info.target === null ? null : (
          <>
            <dt>Target</dt>
            <dd class="mono">{info.target}</dd>
          </>
        )}
      </dl>
      <div class="actions">
        {info.type === "file"
          ? <a href={fileUrl(props.sandboxId, info.path)} download={info.name}>Download {info.name}</a>
          : null}
        <button type="button" onClick={props.onClose}>Close the details</button>
      </div>
    </section>
  )
}

export const FileBrowser = (props: { readonly sandboxId: string; readonly running: boolean }) => {
  const { sandboxId } = props
  const [folder, setFolder] = useState("/")
  const [goTo, setGoTo] = useState("/")
  const [newFolder, setNewFolder] = useState("")
  const [renaming, setRenaming] = useState<string | undefined>(undefined)
  const [renameTo, setRenameTo] = useState("")
  const [details, setDetails] = useState<FileInfo | undefined>(undefined)
  const [done, setDone] = useState<string | undefined>(undefined)
  const action = useAction()
  const picker = useRef<HTMLInputElement>(null)
  const id = useId()
  const listing = useResource(
    () => props.running ? listFolder(sandboxId, folder) : Promise.resolve(undefined),
    [sandboxId, folder, props.running]
  )
  useEffect(() => setGoTo(folder), [folder])

  const open = (path: string) => {
    setDetails(undefined)
    setRenaming(undefined)
    setDone(undefined)
    action.setError(undefined)
    setFolder(path)
  }
  /** Runs a change, then says what it did and lists the folder again. */
  const change = (what: () => Promise<unknown>, said: string) =>
    void action.run(async () => {
      setDone(undefined)
      await what()
      setDone(said)
      await listing.reload()
    })

  const go = () =>
    void action.run(async () => {
      const path = goTo.trim()
      const info = await stat(sandboxId, path)
      if (info.type === "dir") open(info.path)
      else setDetails(info)
    })
  const makeFolder = () => {
    const name = newFolder.trim()
    if (name === "") return
    const path = name.startsWith("/") ? name : joinPath(folder, name)
    change(async () => {
      await mkdir(sandboxId, path)
      setNewFolder("")
    }, `Made the folder ${path}`)
  }
  const uploadPicked = (files: FileList | null) => {
    const picked = [...(files ?? [])]
    if (picked.length === 0) return
    change(async () => {
      // One after another: each streams from the disk, never held whole in the page.
      for (const file of picked) await upload(sandboxId, joinPath(folder, file.name), file)
      if (picker.current !== null) picker.current.value = ""
    }, `Uploaded ${picked.map((f) => joinPath(folder, f.name)).join(", ")}`)
  }
  const rename = (from: string) => {
    const to = renameTo.trim()
    if (to === "" || to === from) return setRenaming(undefined)
    const target = to.startsWith("/") ? to : joinPath(parentOf(from), to)
    change(async () => {
      await move(sandboxId, from, target)
      setRenaming(undefined)
    }, `Moved ${from} to ${target}`)
  }
  const removeEntry = (entry: FileEntry) => {
    const path = joinPath(folder, entry.name)
    const what = entry.type === "dir" ? `the folder ${path} and everything in it` : path
    if (!window.confirm(`Delete ${what}? This cannot be undone.`)) return
    change(() => remove(sandboxId, path), `Deleted ${path}`)
  }

  const entries = [...(listing.data?.entries ?? [])].sort(byFoldersThenName)
  return (
    <section aria-labelledby={`${id}-title`} class="panel files">
      <h2 id={`${id}-title`}>Files</h2>
      {!props.running ? <p class="muted">The sandbox must be running to browse its files.</p> : (
        <>
          <nav aria-label="Folder path" class="crumbs">
            {crumbsOf(folder).map(([name, path]) => (
              <button
                type="button"
                class="link"
                key={path}
                aria-label={`Open folder ${path}`}
                aria-current={path === folder ? "location" : undefined}
                onClick={() => open(path)}
              >
                {name}
              </button>
            ))}
          </nav>
          <Form label="Go to a path" onSubmit={go} class="form inline">
            <Field label="Path" class="mono" value={goTo} onValue={setGoTo} autoComplete="off" spellcheck={false} />
            <button type="submit" disabled={action.pending}>Go</button>
            <button type="button" disabled={folder === "/"} onClick={() => open(parentOf(folder))}>
              Up to the parent folder
            </button>
            <a
              href={archiveUrl(sandboxId, folder)}
              download={`${nameOf(folder) === "/" ? "root" : nameOf(folder)}.tar.gz`}
            >
              Download this folder (tar.gz)
            </a>
          </Form>
          <ErrorMessage error={action.error ?? listing.error} />
          {done === undefined ? null : <Status>{done}</Status>}
          {details === undefined
            ? null
            : <Details sandboxId={sandboxId} info={details} onClose={() => setDetails(undefined)} />}
          <Table
            caption={`Files in ${folder}`}
            columns={["Name", "Type", "Size", "Modified", "Actions"]}
            loading={listing.data === undefined && listing.error === undefined}
            empty={listing.data !== undefined && entries.length === 0}
            emptyText="This folder is empty."
          >
            {entries.map((entry) => {
              const path = joinPath(folder, entry.name)
              return (
                <tr key={entry.name} data-path={path}>
                  <th scope="row" class="mono">
                    {entry.type === "dir"
                      ? (
                        <button
                          type="button"
                          class="link"
                          onClick={() => open(path)}
                          aria-label={`Open folder ${path}`}
                        >
                          {entry.name}/
                        </button>
                      )
                      : entry.type === "file"
                      ? <a href={fileUrl(sandboxId, path)} download={entry.name}>{entry.name}</a>
                      : entry.name}
                  </th>
                  <td>{entry.type}</td>
                  <td>{entry.type === "file" ? sizeText(entry.size) : "—"}</td>
                  <td>
                    <When at={entry.mtime} />
                  </td>
                  <td>
                    {renaming === path
                      ? (
                        <Form label={`Rename or move ${entry.name}`} onSubmit={() => rename(path)} class="form inline">
                          <Field
                            label={`New path of ${entry.name}`}
                            class="mono"
                            value={renameTo}
                            onValue={setRenameTo}
                            autoComplete="off"
                            spellcheck={false}
                          />
                          <button type="submit" disabled={action.pending}>Move</button>
                          <button type="button" onClick={() => setRenaming(undefined)}>Cancel</button>
                        </Form>
                      )
                      : (
                        <div class="actions">
                          {entry.type === "dir"
                            ? (
                              <a href={archiveUrl(sandboxId, path)} download={`${entry.name}.tar.gz`}>
                                Download {entry.name} (tar.gz)
                              </a>
                            )
                            : entry.type === "file"
                            ? <a href={fileUrl(sandboxId, path)} download={entry.name}>Download {entry.name}</a>
                            : null}
                          <button
                            type="button"
                            onClick={() => {
                              setRenaming(path)
                              setRenameTo(path)
                            }}
                          >
                            Rename {entry.name}
                          </button>
                          <button type="button" class="danger" onClick={() => removeEntry(entry)}>
                            Delete {entry.name}
                          </button>
                        </div>
                      )}
                  </td>
                </tr>
              )
            })}
          </Table>
          <div class="form inline">
            <div class="field">
              <label for={`${id}-upload`}>Upload files into {folder}</label>
              <input
                id={`${id}-upload`}
                ref={picker}
                type="file"
                multiple
                disabled={action.pending}
                onChange={(e) => uploadPicked((e.currentTarget as HTMLInputElement).files)}
              />
            </div>
          </div>
          <Form label="Make a folder" onSubmit={makeFolder} class="form inline">
            <Field
              label="New folder name"
              value={newFolder}
              onValue={setNewFolder}
              autoComplete="off"
              spellcheck={false}
              hint={`Made in ${folder} (or an absolute path).`}
            />
            <button type="submit" disabled={action.pending}>Make folder</button>
          </Form>
        </>
      )}
    </section>
  )
}
