/** Settings of templates: the build time limit (Settle.ts) and image collection (Collect.ts), read by the api. */
import * as Env from "@svc/config/Env"
import { Duration } from "effect"

/** How long a template build may take (Settle.ts): past it, the build is `failed`. */
export const TemplateBuildTimeout = Env.duration("SVC_TEMPLATE_BUILD_TIMEOUT", Duration.minutes(20), {
  min: Duration.seconds(1),
  max: Duration.days(1)
})

/**
 * How old an image layer no template refers to must be before it is removed from the image store
 * (and so from every host): a failed build's layers stay that long in its layer cache for a retry.
 */
export const ImageGcGrace = Env.duration("SVC_IMAGE_GC_GRACE", Duration.hours(1), {
  min: Duration.zero,
  max: Duration.days(365)
})

/** What the api reads. */
export const templateSettings: ReadonlyArray<Env.AnySetting> = [TemplateBuildTimeout, ImageGcGrace]
