/**
 * Throwaway TLS material for tests, made with `openssl`: a CA, a server certificate for
 * 127.0.0.1 and localhost signed by it, and a client certificate signed by it (for a server that
 * verifies its clients). Everything lives in `dir`; nothing is trusted outside the test.
 */
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Path from "node:path"

export interface TestCertificates {
  readonly caFile: string
  readonly serverCertFile: string
  readonly serverKeyFile: string
  readonly clientCertFile: string
  readonly clientKeyFile: string
}

const openssl = (args: ReadonlyArray<string>, cwd: string) =>
  execFileSync("openssl", args, { cwd, stdio: ["ignore", "pipe", "pipe"] })

/**
 * Makes a CA and a server and a client certificate under `dir` (valid for a day); the server's
 * names 127.0.0.1, localhost and `serverNames`.
 */
export const makeTestCertificates = (dir: string, serverNames: ReadonlyArray<string> = []): TestCertificates => {
  Fs.mkdirSync(dir, { recursive: true })
  const key = (name: string) => openssl(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", name], dir)
  key("ca.key")
  openssl(["req", "-x509", "-new", "-key", "ca.key", "-days", "1", "-subj", "/CN=svc test CA", "-out", "ca.pem"], dir)
  const signed = (name: string, subject: string, extensions: string) => {
    key(`${name}.key`)
    openssl(["req", "-new", "-key", `${name}.key`, "-subj", subject, "-out", `${name}.csr`], dir)
    Fs.writeFileSync(Path.join(dir, `${name}.ext`), extensions)
    openssl([
      "x509",
      "-req",
      "-in",
      `${name}.csr`,
      "-CA",
      "ca.pem",
      "-CAkey",
      "ca.key",
      "-CAcreateserial",
      "-days",
      "1",
      "-extfile",
      `${name}.ext`,
      "-out",
      `${name}.pem`
    ], dir)
  }
  const names = ["IP:127.0.0.1", "DNS:localhost", ...serverNames.map((name) => `DNS:${name}`)].join(",")
  signed("server", "/CN=127.0.0.1", `subjectAltName=${names}\nextendedKeyUsage=serverAuth\n`)
  signed("client", "/CN=svc test client", "extendedKeyUsage=clientAuth\n")
  return {
    caFile: Path.join(dir, "ca.pem"),
    serverCertFile: Path.join(dir, "server.pem"),
    serverKeyFile: Path.join(dir, "server.key"),
    clientCertFile: Path.join(dir, "client.pem"),
    clientKeyFile: Path.join(dir, "client.key")
  }
}
