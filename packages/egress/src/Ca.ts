/**
 * The platform's own CA on a host, and the leaf certificates the proxy presents where it writes
 * a secret into HTTPS. The CA is made once per agent data dir (`<dir>/ca.pem`, `<dir>/ca.key`,
 * root-only), its certificate is added to the `base` template's trust store (the driver's
 * `trustedCaPem`), and its key never leaves the folder: no sandbox sees it. Leaves (one EC key
 * for all, a certificate per host name, valid 30 days) are signed with Debian's `openssl` and
 * kept in memory per name.
 */
import { execFile } from "node:child_process"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import * as Tls from "node:tls"
import { promisify } from "node:util"

const exec = promisify(execFile)
const OPENSSL_ENV = { PATH: "/usr/bin:/bin" }
/** More names than this in memory and the cache starts afresh. */
const MAX_LEAVES = 1_000
/** A leaf is valid 30 days and signed again after 7. */
const LEAF_REUSE_MS = 7 * 86_400_000

export interface Ca {
  readonly certPem: string
  /** The TLS context for a host name (certificate for exactly that name, signed by the CA). */
  readonly contextFor: (name: string) => Promise<Tls.SecureContext>
}

const ecKey = (out: string) =>
  exec("openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", out], {
    env: OPENSSL_ENV
  })

/** Makes the CA under `dir` when it is not there yet (written under temporary names, renamed). */
export const ensureCa = async (dir: string): Promise<Ca> => {
  await Fs.mkdir(dir, { recursive: true, mode: 0o700 })
  await Fs.chmod(dir, 0o700)
  const certFile = NodePath.join(dir, "ca.pem")
  const keyFile = NodePath.join(dir, "ca.key")
  if (!FsSync.existsSync(certFile) || !FsSync.existsSync(keyFile)) {
    const suffix = `.tmp-${process.pid}`
    await ecKey(keyFile + suffix)
    await exec("openssl", [
      "req",
      "-x509",
      "-new",
      "-key",
      keyFile + suffix,
      "-out",
      certFile + suffix,
      "-days",
      "3650",
      "-subj",
      "/O=svc/CN=svc egress CA",
      "-addext",
      "basicConstraints=critical,CA:TRUE,pathlen:0",
      "-addext",
      "keyUsage=critical,keyCertSign,cRLSign"
    ], { env: OPENSSL_ENV })
    await Fs.chmod(keyFile + suffix, 0o600)
    await Fs.rename(keyFile + suffix, keyFile)
    await Fs.rename(certFile + suffix, certFile)
  }
  const leafKeyFile = NodePath.join(dir, "leaf.key")
  if (!FsSync.existsSync(leafKeyFile)) {
    await ecKey(`${leafKeyFile}.tmp-${process.pid}`)
    await Fs.chmod(`${leafKeyFile}.tmp-${process.pid}`, 0o600)
    await Fs.rename(`${leafKeyFile}.tmp-${process.pid}`, leafKeyFile)
  }
  const certPem = await Fs.readFile(certFile, "utf8")
  const leafKey = await Fs.readFile(leafKeyFile, "utf8")
  const contexts = new Map<string, { readonly context: Promise<Tls.SecureContext>; readonly until: number }>()

  const sign = async (name: string): Promise<Tls.SecureContext> => {
    // The name went through the SNI parser (letters, digits, dots, hyphens): safe in -subj.
    const { stdout } = await exec("openssl", [
      "req",
      "-new",
      "-key",
      leafKeyFile,
      "-subj",
      `/CN=${name}`,
      "-addext",
      `subjectAltName=DNS:${name}`,
      "-addext",
      "basicConstraints=critical,CA:FALSE",
      "-addext",
      "extendedKeyUsage=serverAuth",
      "-CA",
      certFile,
      "-CAkey",
      keyFile,
      "-days",
      "30"
    ], { env: OPENSSL_ENV })
    return Tls.createSecureContext({ key: leafKey, cert: `${stdout}${certPem}` })
  }

  return {
    certPem,
    contextFor: (name) => {
      const key = name.toLowerCase()
      const cached = contexts.get(key)
      if (cached !== undefined && cached.until > Date.now()) return cached.context
      if (contexts.size >= MAX_LEAVES) contexts.clear()
      const context = sign(key)
      context.catch(() => contexts.delete(key))
      contexts.set(key, { context, until: Date.now() + LEAF_REUSE_MS })
      return context
    }
  }
}
