-- Keeps quota_usage.chat_bytes equal to the UTF-8 bytes of the account's stored chat text
-- (messages and poll options). A trigger sees every change, deletes by cascade included,
-- which the application could not count reliably. TG_ARGV[0] names the text column.
create or replace function parley_count_chat_bytes() returns trigger language plpgsql as $$
declare
  delta bigint;
  account text;
begin
  if tg_op = 'INSERT' then
    delta := octet_length(to_jsonb(new) ->> tg_argv[0]);
    account := new.account_id;
  elsif tg_op = 'UPDATE' then
    delta := octet_length(to_jsonb(new) ->> tg_argv[0]) - octet_length(to_jsonb(old) ->> tg_argv[0]);
    account := new.account_id;
  else
    delta := -octet_length(to_jsonb(old) ->> tg_argv[0]);
    account := old.account_id;
  end if;
  if delta > 0 then
    insert into quota_usage (account_id, chat_bytes) values (account, delta)
    on conflict (account_id) do update set chat_bytes = quota_usage.chat_bytes + delta;
  elsif delta < 0 then
    -- An update only: while an account is deleted its row may be gone already.
    update quota_usage set chat_bytes = greatest(chat_bytes + delta, 0) where account_id = account;
  end if;
  return null;
end
$$;
--> statement-breakpoint
create trigger chat_messages_count_bytes after insert or delete or update of content on chat_messages
  for each row execute function parley_count_chat_bytes('content');
--> statement-breakpoint
create trigger chat_poll_options_count_bytes after insert or delete or update of text on chat_poll_options
  for each row execute function parley_count_chat_bytes('text');
--> statement-breakpoint
insert into quota_usage (account_id, chat_bytes)
select account_id, sum(bytes) from (
  select account_id, octet_length(content) as bytes from chat_messages
  union all
  select account_id, octet_length(text) from chat_poll_options
) as stored
group by account_id
on conflict (account_id) do update set chat_bytes = excluded.chat_bytes;
