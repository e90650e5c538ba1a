/** The caller's org (docs/contract.md#org-and-audit): account-level, `*` keys and sessions only. */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "effect/http-api"
import { NotFound } from "../Errors.ts"
import { Name } from "../Text.ts"
import { Access, OrgRecord } from "./Auth.ts"

export class UpdateOrgRequest extends Schema.Class<UpdateOrgRequest>("UpdateOrgRequest")({
  name: Name(120)
}) {}

export class OrgApi extends HttpApiGroup.make("org")
  .add(
    HttpApiEndpoint.get("get", "/v1/org", { success: OrgRecord, error: NotFound }),
    HttpApiEndpoint.patch("update", "/v1/org", { payload: UpdateOrgRequest, success: OrgRecord, error: NotFound })
      .annotateMerge(OpenApi.annotations({ description: "Renames the org; writes the audit entry `org.updated`." }))
  )
  .annotateMerge(Access.account)
  .annotateMerge(OpenApi.annotations({ title: "Org" }))
{}
