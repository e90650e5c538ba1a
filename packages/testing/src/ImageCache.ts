/**
 * The folder where built image roots are cached across a test run (and across runs): the
 * `debian` archive takes about a minute to build, so every test file's agents share one, keyed by
 * its recipe (`@svc/host/Debian`). Under the repository's `.svc/cache`, never cleaned by a test.
 */
import * as NodePath from "node:path"
import { fileURLToPath } from "node:url"

export const TEST_IMAGE_CACHE_DIR = NodePath.resolve(
  NodePath.dirname(fileURLToPath(import.meta.url)),
  "../../../.svc/cache/images"
)
