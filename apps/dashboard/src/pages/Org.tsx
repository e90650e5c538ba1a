/** The organization: its name (renamable), id and creation, and who is signed in. */
import { useState } from "preact/hooks"
import { get, patch } from "../api.ts"
import { ErrorMessage, Field, Form, PageTitle, Status, useAction, useResource, When } from "../ui.tsx"
import type { OrgRecord, WhoAmI } from "../wire.ts"

/** Shown once the name is known: what is typed is never overwritten by a late answer. */
const RenameForm = (props: { readonly current: string; readonly onRenamed: (org: OrgRecord) => void }) => {
  const [name, setName] = useState(props.current)
  const [saved, setSaved] = useState(false)
  const action = useAction()
  const rename = () =>
    action.run(async () => {
      setSaved(false)
      props.onRenamed(await patch<OrgRecord>("/v1/org", { name }))
      setSaved(true)
    })
  return (
    <>
      <Form label="Rename the organization" onSubmit={rename} class="form inline">
        <Field label="Organization name" required value={name} onValue={setName} />
        <button type="submit" disabled={action.pending}>Rename</button>
      </Form>
      <ErrorMessage error={action.error} />
      {saved ? <Status>Saved.</Status> : null}
    </>
  )
}

export const Org = (props: { readonly me: WhoAmI; readonly onRenamed: () => void }) => {
  const org = useResource(() => get<OrgRecord>("/v1/org"))
  return (
    <section>
      <PageTitle>Organization</PageTitle>
      <ErrorMessage error={org.error} />
      {org.data === undefined ? null : (
        <>
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
          <RenameForm
            current={org.data.name}
            onRenamed={(renamed) => {
              org.setData(renamed)
              props.onRenamed()
            }}
          />
        </>
      )}
    </section>
  )
}
