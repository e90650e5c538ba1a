/**
 * `SVC_EGRESS_HOSTS_FILE`: names the sandboxes' resolver and the proxy answer from first (a split
 * horizon for operators, a fake public host for tests). The hosts(5) format: an address, then
 * names; `#` starts a comment.
 */
import * as FsSync from "node:fs"
import * as net from "node:net"

export type HostsTable = ReadonlyMap<string, ReadonlyArray<{ readonly address: string; readonly family: 4 | 6 }>>

/** Pure: the file's text → name (lowercase, no trailing dot) → addresses in file order. */
export const parseHosts = (text: string): HostsTable => {
  const table = new Map<string, Array<{ address: string; family: 4 | 6 }>>()
  for (const raw of text.split("\n")) {
    const [address, ...names] = raw.replace(/#.*/, "").trim().split(/\s+/)
    const family = address === undefined ? 0 : net.isIP(address)
    if (family === 0) continue
    for (const name of names) {
      const key = name.toLowerCase().replace(/\.$/, "")
      const list = table.get(key) ?? []
      if (!list.some((entry) => entry.address === address)) list.push({ address: address!, family: family as 4 | 6 })
      table.set(key, list)
    }
  }
  return table
}

/** The file, read again whenever it changes (one `stat` per lookup); empty without a file. */
export const hostsFileReader = (path: string): () => HostsTable => {
  let stamp = ""
  let table: HostsTable = new Map()
  return () => {
    if (path === "") return table
    const st = FsSync.statSync(path, { throwIfNoEntry: false })
    const next = st === undefined ? "absent" : `${st.mtimeMs}:${st.size}:${st.ino}`
    if (next !== stamp) {
      stamp = next
      table = st === undefined ? new Map() : parseHosts(FsSync.readFileSync(path, "utf8"))
    }
    return table
  }
}
