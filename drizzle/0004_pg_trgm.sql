-- Trigram indexes back case-insensitive substring search of chat messages and users.
create extension if not exists pg_trgm;
