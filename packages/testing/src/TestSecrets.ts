/**
 * The encryption key of test runs (`SVC_ENCRYPTION_KEYS`, see @svc/crypto/SecretBox). Tests read
 * it the way production does, from the environment: GlobalSetup puts the fixed key below there
 * when the run has none, so every test process and every role it spawns (TestProcess.spawnRole)
 * seal and open with the same key. Harnesses that give a layer an environment of their own add
 * `testEncryptionKeys()` to it.
 */
import { parseEncryptionKeys } from "@svc/crypto/Config"
import { SecretBox } from "@svc/crypto/SecretBox"
import { Result } from "effect"

/** A fixed, public key: for throwaway test databases only. */
export const TEST_ENCRYPTION_KEYS = "test:pGhf6gHM2PYbDs9Wzq6z6Hj8+0gpFn0CgfGCSCczQaY="

/** The run's keys: the environment's when set, else the fixed test key. */
export const testEncryptionKeys = (): string => process.env.SVC_ENCRYPTION_KEYS || TEST_ENCRYPTION_KEYS

/** Makes the test key the process's `SVC_ENCRYPTION_KEYS` unless one is set (GlobalSetup, benchmarks). */
export const useTestEncryptionKeys = (): void => {
  process.env.SVC_ENCRYPTION_KEYS = testEncryptionKeys()
}

/** A SecretBox with the run's keys: seals what the roles of the run open (tests that publish commands). */
export const testSecretBox = (): SecretBox["Service"] =>
  SecretBox.make(Result.getOrThrow(parseEncryptionKeys(testEncryptionKeys())))
