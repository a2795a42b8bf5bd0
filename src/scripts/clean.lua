-- Remove old samples from one counter, as the leader, and forget the counter
-- when its hash is empty.
--
-- KEYS[1] leader lease   KEYS[2] count:PREC:NAME   KEYS[3] known:
-- ARGV[1] the leader's token   ARGV[2] known: member (PREC:NAME)
-- ARGV[3] '1' to forget the counter if its hash is empty afterwards, else '0'
-- ARGV[4..] bucket fields to delete (a bounded chunk, a few hundred at most)
--
-- Fenced: a worker that lost the lease (paused past it, say) writes nothing
-- and gets -1, so a stale leader never races the new one.
-- The member leaves known: only if the hash is empty at this very moment:
-- a worker's write (apply.lua: HINCRBY, then ZADD) is either before, and the
-- hash is not empty, or after, and its ZADD adds the member back.
-- Returns {fields deleted, 1 if the member was removed else 0}, or -1.

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return -1
end
local removed = 0
if #ARGV > 3 then
    removed = redis.call('HDEL', KEYS[2], unpack(ARGV, 4))
end
local forgotten = 0
if ARGV[3] == '1' and redis.call('HLEN', KEYS[2]) == 0 then
    forgotten = redis.call('ZREM', KEYS[3], ARGV[2])
end
return {removed, forgotten}
