-- Remove old samples from a batch of counters, as the leader, and forget
-- each counter whose hash is empty afterwards. Runs after fence.lua.
--
-- KEYS[1] the fence (fence.lua)   KEYS[2] known:   KEYS[3..] count:PREC:NAME hashes
-- ARGV[1] the fence's argument, then for each hash (in KEYS order):
--   its known: member (PREC:NAME), '1' to forget it if its hash is empty
--   afterwards else '0', N, then N bucket fields to delete
-- The caller bounds a batch to a few hundred fields and hashes in all.
--
-- Fenced: a worker that lost the lease (paused past it, say) writes nothing
-- and gets -1, so a stale leader never races the new one.
-- One Redis (a token fence): a member leaves known: only if its hash is
-- empty at this very moment: a worker's write (apply.lua's HINCRBY, then
-- the worker's ZADD) is either before, and the hash is not empty, or after,
-- and its ZADD adds the member back. Returns {fields deleted, members removed}, or -1.
-- A cluster (an epoch fence): known: lives in another hash slot, so KEYS[2]
-- is not touched (the caller gives the fence key again) and the members
-- whose hashes are empty are returned for forget.lua:
-- {fields deleted, {members}}, or -1.

if not fenced(KEYS[1], ARGV[1]) then
    return -1
end
local report = string.match(ARGV[1], '^epoch:') ~= nil
local removed, forgotten, emptied = 0, 0, {}
local a = 2
for k = 3, #KEYS do
    local member, forget, n = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
    if n > 0 then
        removed = removed + redis.call('HDEL', KEYS[k], unpack(ARGV, a + 3, a + 2 + n))
    end
    if forget == '1' and redis.call('HLEN', KEYS[k]) == 0 then
        if report then
            emptied[#emptied + 1] = member
        else
            forgotten = forgotten + redis.call('ZREM', KEYS[2], member)
        end
    end
    a = a + 3 + n
end
if report then
    return {removed, emptied}
end
return {removed, forgotten}
