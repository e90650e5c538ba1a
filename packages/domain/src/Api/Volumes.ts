/**
 * The volume routes (docs/contract.md#volumes). `volumes:read` lists and
 * reads, `volumes:write` creates and deletes; a `sandbox:<id>` key is 403 here unless it holds
 * volume scopes too. Another org's volume is 404.
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import {
  Conflict,
  IdempotencyKeyReused,
  InvalidRequest,
  NotFound,
  QuotaExceeded,
  Unavailable,
  VolumeCapacityAboveMax
} from "../Errors.ts"
import { VolumeId } from "../Ids.ts"
import { ListQuery } from "../Pagination.ts"
import { CreateVolumeRequest, Volume, VolumeList } from "../Volume.ts"
import { Access } from "./Auth.ts"
import { IdempotencyKey } from "./Sandboxes.ts"

export class CreateVolumeBody
  extends Schema.Class<CreateVolumeBody>("CreateVolumeRequest")(CreateVolumeRequest.fields)
{}

const params = { id: VolumeId }

export class VolumesApi extends HttpApiGroup.make("volumes")
  .add(
    HttpApiEndpoint.post("create", "/v1/volumes", {
      payload: CreateVolumeBody,
      headers: { "idempotency-key": Schema.optionalKey(IdempotencyKey) },
      success: Volume.pipe(HttpApiSchema.status(201)),
      error: [InvalidRequest, VolumeCapacityAboveMax, Conflict, IdempotencyKeyReused, QuotaExceeded, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Creates a volume of `size_gb` GiB: 201 with the record (`state: \"available\"`). `type` is " +
        "`local` (default: its storage lives on one host, and sandboxes using it are placed there) or `shared` " +
        "(attachable to several sandboxes at once, on any host). `name` is required for `shared`; a `local` volume " +
        "without one is named `volume-<id body>`. Names are unique in the org (409). `size_gb` above " +
        "`SVC_VOLUME_MAX_GIB` is 400 `volume_capacity_above_max` with `requested_gib`, `max_gib` and `unit`. " +
        "`Idempotency-Key`: the same key and body within 24 h answer 200 with the first response; another body is " +
        "422. 429 `quota_exceeded` past `SVC_ORG_MAX_VOLUMES`."
    })),
    HttpApiEndpoint.get("list", "/v1/volumes", {
      query: ListQuery,
      success: VolumeList,
      error: [InvalidRequest, Unavailable]
    }).annotateMerge(OpenApi.annotations({ description: "The org's volumes, newest first (deleted ones omitted)." })),
    HttpApiEndpoint.get("get", "/v1/volumes/:id", {
      params,
      success: Volume,
      error: [NotFound, Unavailable]
    }),
    HttpApiEndpoint.delete("delete", "/v1/volumes/:id", {
      params,
      success: Volume,
      error: [NotFound, Conflict, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Deletes the volume and its data: 200 with the record (`state: \"deleted\"`). 409 `conflict` " +
        "while a sandbox that is not deleted has it attached."
    }))
  )
  .annotateMerge(Access.resource("volumes"))
  .annotateMerge(OpenApi.annotations({ title: "Volumes" }))
{}
