/** Sign in and sign up: each starts a session (the API sets the HttpOnly cookie). */
import { useState } from "preact/hooks"
import { call } from "../api.ts"
import { Link } from "../router.tsx"
import { ErrorMessage, Field, Form, useAction } from "../ui.tsx"

export const SignIn = (props: { readonly onSignedIn: () => void }) => {
  const [email, setEmail] = useState("")
  const [password, setPassword] = useState("")
  const action = useAction()
  const submit = () =>
    action.run(async () => {
      await call("POST", "/v1/auth/sign-in", { body: { email, password }, expectUnauthenticated: true })
      props.onSignedIn()
    })
  return (
    <section class="card">
      <h1>Sign in</h1>
      <Form label="Sign in" onSubmit={submit}>
        <Field label="Email" type="email" autoComplete="username" required value={email} onValue={setEmail} />
        <Field
          label="Password"
          type="password"
          autoComplete="current-password"
          required
          value={password}
          onValue={setPassword}
        />
        <ErrorMessage error={action.error} />
        <button type="submit" disabled={action.pending}>Sign in</button>
      </Form>
      <p>
        New here? <Link href="/sign-up">Create an account</Link>
      </p>
    </section>
  )
}

export const SignUp = (props: { readonly onSignedIn: () => void }) => {
  const [email, setEmail] = useState("")
  const [password, setPassword] = useState("")
  const [orgName, setOrgName] = useState("")
  const action = useAction()
  const submit = () =>
    action.run(async () => {
      await call("POST", "/v1/auth/sign-up", {
        body: { email, password, org_name: orgName },
        expectUnauthenticated: true
      })
      props.onSignedIn()
    })
  return (
    <section class="card">
      <h1>Create an account</h1>
      <Form label="Sign up" onSubmit={submit}>
        <Field label="Email" type="email" autoComplete="username" required value={email} onValue={setEmail} />
        <Field
          label="Password"
          type="password"
          autoComplete="new-password"
          required
          value={password}
          onValue={setPassword}
          hint="8 to 256 characters."
        />
        <Field label="Organization name" required value={orgName} onValue={setOrgName} />
        <ErrorMessage error={action.error} />
        <button type="submit" disabled={action.pending}>Create account</button>
      </Form>
      <p>
        Have an account? <Link href="/sign-in">Sign in</Link>
      </p>
    </section>
  )
}
