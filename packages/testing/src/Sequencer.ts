/**
 * The order test files run in. Vitest's own order (longest or largest first) would start the
 * files that need a built image root (`debian`, `code`: they import `ImageCache.ts`) early, and
 * on a fresh clone both workers would then sit waiting on mmdebstrap (minutes, `code` the longest)
 * with nothing else to do. Here those files go last, and the roots they need are built in the
 * background from the start (`ImageRoots.ts`), beside the other files, so that by the time they
 * run the roots wait in the cache.
 */
import * as Fs from "node:fs/promises"
import { BaseSequencer, type TestSpecification } from "vitest/node"
import { prebuildImageRoots } from "./ImageRoots.ts"

/** Whether the test file at `path` needs a built image root: it imports the image cache's folder. */
export const needsImageRoots = async (path: string): Promise<boolean> =>
  (await Fs.readFile(path, "utf8").catch(() => "")).includes("@svc/testing/ImageCache")

/** `items` in their order, those `needs` picks moved to the end (their own order kept). */
export const lastOf = async <A>(items: ReadonlyArray<A>, needs: (item: A) => Promise<boolean>) => {
  const picked = await Promise.all(items.map(needs))
  return {
    order: [...items.filter((_, i) => !picked[i]), ...items.filter((_, i) => picked[i])],
    moved: picked.filter(Boolean).length
  }
}

export default class Sequencer extends BaseSequencer {
  override async sort(files: Array<TestSpecification>): Promise<Array<TestSpecification>> {
    const { order, moved } = await lastOf(await super.sort(files), (spec) => needsImageRoots(spec.moduleId))
    if (moved > 0) prebuildImageRoots()
    return order
  }
}
