-- Webhook URLs were recorded in the audit log with their path (where Slack- and Discord-style
-- receivers keep their token) and only the query stripped; the log never expires, so the
-- entries already written keep scheme, host and port alone. The full URL was never stored,
-- so these entries carry no fingerprint.
UPDATE "audit_entries"
SET "detail" = jsonb_set(
  "detail",
  '{url}',
  to_jsonb(regexp_replace("detail"->>'url', '^([A-Za-z][A-Za-z0-9+.-]*://[^/?#;]*).*$', '\1/…'))
)
WHERE "action" IN ('add-webhook', 'update-webhook')
  AND jsonb_typeof("detail"->'url') = 'string'
  AND "detail"->>'url' ~ '^[A-Za-z][A-Za-z0-9+.-]*://'
  AND "detail"->>'url' !~ ' sha256:[0-9a-f]{8}$';
