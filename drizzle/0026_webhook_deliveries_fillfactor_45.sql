-- An attempt's outcome changes no indexed column of the log row now, so it is a HOT update when
-- its page has room for the row's next version. A batch records every row of a page at once,
-- before any old version can be pruned, and a recorded row (about 200 bytes with its answer's
-- first bytes) is wider than a new one (about 180): below half full, a page has room for all.
ALTER TABLE "webhook_deliveries" SET (fillfactor = 45);
