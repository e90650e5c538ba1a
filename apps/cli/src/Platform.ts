/**
 * The platform's processes as layers, so that `svc dev` can run them all in one process and an
 * operator can run each role alone (`svc api`, ...) to scale it by process count.
 */
import { Nats } from "@svc/bus/Nats"
import * as Database from "@svc/db/Database"
import * as ApiServer from "@svc/api/Server"
import { Layer } from "effect"

/** What every role needs: Postgres (migrated) and NATS, from DATABASE_URL and NATS_URL. */
export const Infrastructure = Layer.mergeAll(Database.layer, Nats.layer)

/** The HTTP API role. */
export const ApiRole = ApiServer.layer

/** Every role of the platform in one process. */
export const AllRoles = Layer.mergeAll(ApiRole)
