/**
 * The app's frame: who is signed in (`GET /v1/auth/me` on the session cookie), the sign-in and
 * sign-up pages until then, and once signed in the navigation, the live-events indicator and
 * the page of the current path.
 */
import { useCallback, useEffect, useRef, useState } from "preact/hooks"
import { ApiError, call, onSignedOut } from "./api.ts"
import { connect, disconnect, useConnection } from "./events.ts"
import { Apps } from "./pages/Apps.tsx"
import { Audit } from "./pages/Audit.tsx"
import { SignIn, SignUp } from "./pages/Auth.tsx"
import { Keys } from "./pages/Keys.tsx"
import { Org } from "./pages/Org.tsx"
import { Sandbox } from "./pages/Sandbox.tsx"
import { Sandboxes } from "./pages/Sandboxes.tsx"
import { Secrets } from "./pages/Secrets.tsx"
import { Templates } from "./pages/Templates.tsx"
import { Usage } from "./pages/Usage.tsx"
import { Volumes } from "./pages/Volumes.tsx"
import { Webhook, Webhooks } from "./pages/Webhooks.tsx"
import { Link, match, navigate, usePath } from "./router.tsx"
import { ErrorMessage } from "./ui.tsx"
import type { WhoAmI } from "./wire.ts"

const SECTIONS: ReadonlyArray<readonly [href: string, label: string]> = [
  ["/sandboxes", "Sandboxes"],
  ["/apps", "Apps"],
  ["/templates", "Templates"],
  ["/volumes", "Volumes"],
  ["/secrets", "Secrets"],
  ["/keys", "API keys"],
  ["/webhooks", "Webhooks"],
  ["/audit", "Audit log"],
  ["/usage", "Usage"],
  ["/org", "Organization"]
]

type Session = { readonly _tag: "Loading" } | { readonly _tag: "SignedOut" } | {
  readonly _tag: "SignedIn"
  readonly me: WhoAmI
}

const Page = (props: { readonly path: string; readonly me: WhoAmI; readonly onOrgRenamed: () => void }) => {
  const { path } = props
  let params: Record<string, string> | undefined
  if ((params = match("/sandboxes/:id", path))) return <Sandbox id={params["id"]!} key={params["id"]} />
  if ((params = match("/webhooks/:id", path))) return <Webhook id={params["id"]!} key={params["id"]} />
  switch (path) {
    case "/":
    case "/sandboxes":
      return <Sandboxes />
    case "/apps":
      return <Apps />
    case "/templates":
      return <Templates />
    case "/volumes":
      return <Volumes />
    case "/secrets":
      return <Secrets />
    case "/keys":
      return <Keys />
    case "/webhooks":
      return <Webhooks />
    case "/audit":
      return <Audit />
    case "/usage":
      return <Usage />
    case "/org":
      return <Org me={props.me} onRenamed={props.onOrgRenamed} />
    default:
      return (
        <section>
          <h1>Not found</h1>
          <p>
            No page at <code>{path}</code>. <Link href="/sandboxes">Go to the sandboxes</Link>.
          </p>
        </section>
      )
  }
}

const LiveIndicator = () => {
  const connection = useConnection()
  const text = connection === "live" ? "Live" : connection === "connecting" ? "Connecting…" : "Offline"
  return (
    <span class={`live live-${connection}`} role="status" aria-label={`Live updates: ${text}`}>
      {text}
    </span>
  )
}

export const App = () => {
  const path = usePath()
  const [session, setSession] = useState<Session>({ _tag: "Loading" })
  const [error, setError] = useState<unknown>(undefined)

  const refresh = useCallback(async () => {
    try {
      const me = await call<WhoAmI>("GET", "/v1/auth/me", { expectUnauthenticated: true })
      setSession({ _tag: "SignedIn", me })
      setError(undefined)
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) setSession({ _tag: "SignedOut" })
      else setError(e)
    }
  }, [])

  useEffect(() => {
    void refresh()
    return onSignedOut(() => setSession({ _tag: "SignedOut" }))
  }, [])

  const signedIn = session._tag === "SignedIn"
  useEffect(() => {
    if (signedIn) connect()
    else disconnect()
  }, [signedIn])

  // Signed out: only the sign-in and sign-up pages; signed in: never those, and back to the page
  // that sent to sign-in.
  const returnTo = useRef("/sandboxes")
  useEffect(() => {
    if (session._tag === "SignedOut" && path !== "/sign-in" && path !== "/sign-up") {
      returnTo.current = path === "/" ? "/sandboxes" : path
      navigate("/sign-in", { replace: true })
    }
    if (session._tag === "SignedIn" && (path === "/sign-in" || path === "/sign-up")) {
      navigate(returnTo.current, { replace: true })
      returnTo.current = "/sandboxes"
    }
  }, [session._tag, path])

  const signOut = async () => {
    try {
      await call("POST", "/v1/auth/sign-out", { body: {} })
    } catch {
      // Already over: signed out either way.
    }
    setSession({ _tag: "SignedOut" })
  }

  if (session._tag === "Loading") {
    return (
      <main id="main" class="centered">
        {error === undefined ? <p role="status">Loading…</p> : <ErrorMessage error={error} />}
      </main>
    )
  }

  if (session._tag === "SignedOut") {
    return (
      <main id="main" class="centered">
        {path === "/sign-up" ? <SignUp onSignedIn={refresh} /> : <SignIn onSignedIn={refresh} />}
      </main>
    )
  }

  const me = session.me
  return (
    <>
      <a class="skip" href="#main">Skip to content</a>
      <header class="top">
        <span class="brand">svc</span>
        <span class="who">
          <span>{me.org.name}</span>
          {me.user === null ? null : <span class="muted">{me.user.email}</span>}
        </span>
        <LiveIndicator />
        <button type="button" onClick={signOut}>Sign out</button>
      </header>
      <div class="layout">
        <nav aria-label="Sections" class="side">
          <ul>
            {SECTIONS.map(([href, label]) => (
              <li key={href}>
                <Link
                  href={href}
                  aria-current={path === href || path.startsWith(`${href}/`) || (href === "/sandboxes" && path === "/")
                    ? "page"
                    : undefined}
                >
                  {label}
                </Link>
              </li>
            ))}
            <li>
              <a href="/docs">API reference</a>
            </li>
          </ul>
        </nav>
        <main id="main">
          <Page path={path} me={me} onOrgRenamed={refresh} />
        </main>
      </div>
    </>
  )
}
