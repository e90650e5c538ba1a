/**
 * The app controller as an actor: one per app, single writer through its mailbox
 * (`actor.app.<partition>.<appId>`, 8 partitions), its state in the app's row of `apps`. The
 * decisions are `Apps/Reconcile.ts` (pure); the operations it asks for are carried out by
 * `Apps/Operations.ts` and their outcomes come back here as messages.
 */
import * as Actor from "@svc/actors/Actor"
import { AppControllerState, AppMessage } from "./Apps/Model.ts"
import { transition } from "./Apps/Reconcile.ts"
import { APP_ACTOR_TYPE, store } from "./Apps/Store.ts"

export const APP_ACTOR_PARTITIONS = 8

export const AppActor: Actor.Actor<typeof AppControllerState, typeof AppMessage> = Actor.make({
  type: APP_ACTOR_TYPE,
  partitions: APP_ACTOR_PARTITIONS,
  state: AppControllerState,
  message: AppMessage,
  store,
  transition
})
