/** The organization: its name (renamable), id and creation, and who is signed in. */
import { useEffect, useState } from "preact/hooks"
import { get, patch } from "../api.ts"
import { ErrorMessage, Field, Form, PageTitle, Status, useAction, useResource, When } from "../ui.tsx"
import type { OrgRecord, WhoAmI } from "../wire.ts"

export const Org = (props: { readonly me: WhoAmI; readonly onRenamed: () => void }) => {
  const org = useResource(() => get<OrgRecord>("/v1/org"))
  const [name, setName] = useState("")
  const [saved, setSaved] = useState(false)
  useEffect(() => {
    if (org.data !== undefined) setName(org.data.name)
  }, [org.data?.name])
  const action = useAction()
  const rename = () =>
    action.run(async () => {
      setSaved(false)
      org.setData(await patch<OrgRecord>("/v1/org", { name }))
      setSaved(true)
      props.onRenamed()
    })
  return (
    <section>
      <PageTitle>Organization</PageTitle>
      <ErrorMessage error={org.error} />
      {org.data === undefined ? null : (
        <dl class="facts">
          <dt>Name</dt>
          <dd>{org.data.name}</dd>
          <dt>Id</dt>
          <dd class="mono">{org.data.id}</dd>
          <dt>Created</dt>
          <dd>
            <When at={org.data.createdAt} />
          </dd>
          <dt>Signed in as</dt>
          <dd>{props.me.user?.email ?? "a service key"} ({props.me.credential.type})</dd>
        </dl>
      )}
      <Form label="Rename the organization" onSubmit={rename} class="form inline">
        <Field label="Organization name" required value={name} onValue={setName} />
        <button type="submit" disabled={action.pending}>Rename</button>
      </Form>
      <ErrorMessage error={action.error} />
      {saved ? <Status>Saved.</Status> : null}
    </section>
  )
}
