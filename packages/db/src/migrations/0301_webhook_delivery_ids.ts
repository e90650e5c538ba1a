import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * Delivery ids made inside the fan-out's single INSERT (which matches events to webhooks in SQL):
 * `whd_` + 10 base32 characters of the database clock in milliseconds + 16 random ones, the
 * shape of @svc/domain/Ids (time-sortable; the random part is not a secret).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql.unsafe(`
    CREATE FUNCTION svc_webhook_delivery_id() RETURNS text LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
      alphabet CONSTANT text := '0123456789abcdefghjkmnpqrstvwxyz';
      t bigint := floor(extract(epoch FROM clock_timestamp()) * 1000);
      body text := '';
    BEGIN
      FOR i IN 1..10 LOOP
        body := substr(alphabet, (t % 32)::int + 1, 1) || body;
        t := t / 32;
      END LOOP;
      FOR i IN 1..16 LOOP
        body := body || substr(alphabet, floor(random() * 32)::int + 1, 1);
      END LOOP;
      RETURN 'whd_' || body;
    END $$
  `)
})
