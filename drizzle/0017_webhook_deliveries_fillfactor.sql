-- Room on each page for the row's next version: claiming a delivery (lease, attempts) changes
-- no indexed column, so with space beside it the update is HOT and writes no index entries.
ALTER TABLE "webhook_deliveries" SET (fillfactor = 70);
