ALTER TABLE "conference_events" ADD COLUMN "breakout_id" text DEFAULT '' NOT NULL;--> statement-breakpoint
ALTER TABLE "conference_events" ADD COLUMN "room_jid" text;--> statement-breakpoint
ALTER TABLE "conference_events" ADD COLUMN "started_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "conference_events" ADD COLUMN "ended_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "conference_events" ADD COLUMN "occupants" jsonb DEFAULT '[]'::jsonb NOT NULL;--> statement-breakpoint
-- Existing rows get the columns their payloads mean, read as the fold read them until now.
UPDATE "conference_events" SET
  "breakout_id" = case when "payload"->'is_breakout' = 'true'::jsonb then coalesce("payload"->>'breakout_room_id', '') else '' end,
  "room_jid" = nullif("payload"->>'room_jid', ''),
  "started_at" = case when "kind" in ('room_created', 'room_destroyed') then (case when jsonb_typeof("payload"->'created_at') = 'number' then case when ("payload"->'created_at')::text::numeric >= 0 then to_timestamp(floor(("payload"->'created_at')::text::numeric)) end end) end,
  "ended_at" = case when "kind" = 'room_destroyed' then (case when jsonb_typeof("payload"->'destroyed_at') = 'number' then case when ("payload"->'destroyed_at')::text::numeric >= 0 then to_timestamp(floor(("payload"->'destroyed_at')::text::numeric)) end end) end
WHERE "kind" in ('room_created', 'room_destroyed', 'occupant_joined', 'occupant_left');--> statement-breakpoint
UPDATE "conference_events" e SET "occupants" = coalesce((
  select jsonb_agg(jsonb_build_object(
      'jid', o->>'occupant_jid', 'userId', nullif(o->>'id', ''), 'name', nullif(o->>'name', ''), 'email', nullif(o->>'email', ''),
      'joinedAt', to_char((case when jsonb_typeof(o->'joined_at') = 'number' then case when (o->'joined_at')::text::numeric >= 0 then to_timestamp(floor((o->'joined_at')::text::numeric)) end end) at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS".000Z"'), 'leftAt', to_char((case when jsonb_typeof(o->'left_at') = 'number' then case when (o->'left_at')::text::numeric >= 0 then to_timestamp(floor((o->'left_at')::text::numeric)) end end) at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS".000Z"')) order by n)
  from jsonb_array_elements(case when e."kind" <> 'room_destroyed' then jsonb_build_array(e."payload"->'occupant')
    else case jsonb_typeof(e."payload"->'all_occupants')
      when 'array' then e."payload"->'all_occupants'
      when 'object' then (select coalesce(jsonb_agg(v), '[]'::jsonb) from jsonb_each(e."payload"->'all_occupants') as a(k, v))
      else '[]'::jsonb end end) with ordinality as x(o, n)
  where jsonb_typeof(o) = 'object' and jsonb_typeof(o->'occupant_jid') = 'string' and (case when jsonb_typeof(o->'joined_at') = 'number' then case when (o->'joined_at')::text::numeric >= 0 then to_timestamp(floor((o->'joined_at')::text::numeric)) end end) is not null
    and (e."kind" <> 'occupant_left' or (case when jsonb_typeof(o->'left_at') = 'number' then case when (o->'left_at')::text::numeric >= 0 then to_timestamp(floor((o->'left_at')::text::numeric)) end end) is not null)
), '[]'::jsonb)
WHERE e."kind" in ('occupant_joined', 'occupant_left')
  or (e."kind" = 'room_destroyed' and e."started_at" is not null and e."ended_at" is not null);
